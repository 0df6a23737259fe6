"""Numerics pinned: every stage computes with the same threads, instruction-set level and hash
seed on any x86-64 machine, so the same code, data and seed write the same bytes there.

What a number's last bits depend on, besides the code and the data, is chosen by each library
when it starts: torch's ATen kernels by the CPU's vector units (``ATEN_CPU_CAPABILITY``), MKL's
matrix products by the CPU's vendor and model (``MKL_CBWR``: its conditional numerical
reproducibility branch: ``COMPATIBLE`` at the default level, ``baseline``, the one branch MKL
promises across Intel and other vendors; ``AVX2`` at ``avx2``, promised across Intel CPUs only:
on another vendor's CPU MKL takes its ``AUTO`` branch instead),
oneDNN's JIT kernels (``ONEDNN_MAX_CPU_ISA``), OpenBLAS's (numpy's and scipy's) kernels
(``OPENBLAS_CORETYPE``), every parallel reduction by its thread count (``OMP_NUM_THREADS`` and
the others), Python's ``set`` order by ``PYTHONHASHSEED`` (TextAttack builds candidates from
sets). All of them are environment variables read once, when the library loads, so
:func:`pin` sets them from ``params.yaml``'s ``numerics`` block and, when the process did not
start with them, starts it again (``os.execv``, same interpreter and arguments) before anything
has computed. Every stage is launched through :mod:`src.launch` (``python -m src STAGE``, or a
stage module's ``__main__`` block), which calls :func:`pin` before the stage's module loads, so a
hand run of a stage's command computes as ``dvc repro`` does; nothing pins on import, and a
function called in-process (a test) is not restarted.

The level's instructions must exist on the CPU: a CPU without them is one ``error:`` line, never
a silent fallback to other kernels. ``isa: native`` leaves the libraries to choose (another
architecture, or a GPU with ``device: cuda``): its outputs differ from the x86-64 ones, and the
changed ``numerics`` params key them apart (DVC params of every stage). docs/pipeline.md,
"Same bytes on another machine".
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from src.core.errors import ConfigError
from src.core.settings import PARAMS_FILE, load_params

#: Per level, the variables the libraries read at start-up. ``baseline`` (the default): any x86-64
#: CPU, the same bytes on Intel and AMD; ``avx2``: what the embedded llama.cpp build needs anyway
#: (scripts/setup.sh, GGML_NATIVE=OFF), faster, but MKL's AVX2 branch holds on Intel CPUs only.
LEVELS: dict[str, dict[str, str]] = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
    },
    "baseline": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_CBWR": "COMPATIBLE",
        "OPENBLAS_CORETYPE": "Prescott",
    },
    "native": {},
}
#: numpy's names of the CPU features a level needs (its runtime feature detection).
REQUIRED_FEATURES = {"avx2": ("AVX2", "FMA3", "F16C"), "baseline": (), "native": ()}
#: Thread pools sized from the environment when they start (torch's intra-op pool included).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Numerics:
    """The ``numerics`` block of params.yaml."""

    threads: int
    isa: str
    hash_seed: int
    device: str

    @classmethod
    def from_mapping(cls, block: Mapping[str, Any], source: str = "params.yaml") -> Numerics:
        """Validated settings; a wrong value is a ConfigError naming the key and ``source``."""
        known = {"threads", "isa", "hash_seed", "device"}
        unknown = sorted(set(block) - known)
        if unknown:
            raise ConfigError(f"{source}: numerics has unknown keys {unknown} (known: {sorted(known)})")
        values = {key: block.get(key) for key in known}
        for key in ("threads", "hash_seed"):
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "threads" else 0):
                raise ConfigError(
                    f"{source}: numerics.{key} must be an integer >= {int(key == 'threads')}, got {value!r}"
                )
        if values["isa"] not in LEVELS:
            raise ConfigError(f"{source}: numerics.isa must be one of {sorted(LEVELS)}, got {values['isa']!r}")
        if values["device"] not in DEVICES:
            raise ConfigError(f"{source}: numerics.device must be one of {list(DEVICES)}, got {values['device']!r}")
        if values["device"] == "cuda" and values["isa"] != "native":
            raise ConfigError(f"{source}: numerics.device cuda computes on the GPU: set numerics.isa: native")
        return cls(**values)


def settings(params: str | os.PathLike = PARAMS_FILE) -> Numerics:
    """The project's numerics settings (``numerics`` in ``params``)."""
    return Numerics.from_mapping(load_params(params).numerics, str(params))


def environment(numerics: Numerics) -> dict[str, str]:
    """The environment variables that pin ``numerics`` (set before any library loads)."""
    env = {"PYTHONHASHSEED": str(numerics.hash_seed)}
    env |= dict.fromkeys(THREAD_VARIABLES, str(numerics.threads))
    env |= LEVELS[numerics.isa]
    if numerics.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a GPU on the machine is not used: its kernels are other numbers
    return env


def missing_features(numerics: Numerics) -> list[str]:
    """The CPU features the level needs that this CPU lacks (numpy's runtime detection)."""
    needed = REQUIRED_FEATURES[numerics.isa]
    if not needed:
        return []
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return [f"x86-64 (this machine is {platform.machine()})"]
    # numpy's runtime detection, imported here: pin() asks only once the environment is set, so numpy
    # loads once, in the pinned process
    from numpy._core._multiarray_umath import __cpu_features__ as cpu_features

    return [name for name in needed if not cpu_features.get(name)]


def pin(params: str | os.PathLike = PARAMS_FILE) -> None:
    """Compute this process with the pinned numerics: set the environment and, unless the process
    started with it, start it again (same interpreter and arguments); then size torch's pool if
    torch is already loaded (else ``OMP_NUM_THREADS`` sizes it when torch loads)."""
    numerics = settings(params)  # ConfigError: one line, exit 2 (the launcher)
    if sys.flags.ignore_environment:
        raise ConfigError(
            "this interpreter ignores PYTHON* variables (python -I or -E), so PYTHONHASHSEED cannot pin "
            "the hash seed: run the stage without -I/-E"
        )
    env = environment(numerics)
    if any(os.environ.get(name) != value for name, value in env.items()):
        os.environ.update(env)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    lacking = missing_features(numerics)
    if lacking:
        raise ConfigError(
            f"numerics.isa {numerics.isa} needs {', '.join(lacking)}, which this CPU lacks; "
            "set numerics.isa: baseline (or native) in params.yaml: its outputs are keyed apart"
        )
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(numerics.threads)


def report(with_torch: bool = False) -> str:
    """What this process computes with: the pinned variables (and torch's kernels and threads)."""
    names = sorted(environment(settings()))
    lines = [f"{name}={os.environ.get(name, '(unset)')}" for name in names]
    lines.append(f"hash('tempgen')={hash('tempgen')}")
    if with_torch:
        import torch

        lines.append(f"torch: {torch.backends.cpu.get_cpu_capability()} kernels, {torch.get_num_threads()} thread(s)")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Show the numerics a stage computes with on this machine.")
    parser.add_argument("--torch", action="store_true", help="also load torch and show its kernels and threads")
    options = parser.parse_args()
    try:
        pin()
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    print(report(options.torch))
