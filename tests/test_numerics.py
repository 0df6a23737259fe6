"""Pinned numerics (src/numerics.py): a stage computes the same bytes whatever CPU it lands on.

The slow test emulates two other CPUs on this one, as their libraries would see them: one whose
ATen, MKL, oneDNN and OpenBLAS kernels stop at SSE and that has one core, one with this CPU's own
kernels and two cores (and each its own ``PYTHONHASHSEED``). Under each, the stage commands train
the fine-tuned tagger on a tiny slice and derive a tiny ``adv`` set from it in subprocesses; the
checkpoint and every derived file must keep their bytes. Without the pinning the two emulated
CPUs wrote different checkpoints (docs/pipeline.md, "Same bytes on another machine").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from src import numerics
from src.core.errors import ConfigError
from src.data.schema import write_records
from tests.helpers.finetune_data import make_synthetic_records
from tests.helpers.paths import REPO_ROOT

#: Every variable by which a library picks its kernels or threads (the emulation clears them first).
LIBRARY_VARIABLES = {
    *numerics.THREAD_VARIABLES,
    *(name for level in numerics.LEVELS.values() for name in level),
    "MKL_ENABLE_INSTRUCTIONS",
    "PYTHONHASHSEED",
}
#: Emulated CPUs: (environment their libraries start with, the cores the process may use).
CPUS = {
    "sse-one-core": (
        {
            "ATEN_CPU_CAPABILITY": "default",
            "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "OPENBLAS_CORETYPE": "Prescott",
            "PYTHONHASHSEED": "1",
        },
        {0},
    ),
    "native-two-cores": ({"PYTHONHASHSEED": "2"}, {0, 1}),
}
TRAINING = {
    "max_steps": 4,
    "learning_rate": "3e-4",
    "train_batch_size": 8,
    "eval_batch_size": 16,
    "logging_steps": 2,
    "max_length": 64,
    "include_negatives": "false",
    "report_to": "none",
}
ATTACK = ["--limit", "3", "--query-budget", "12", "--workers", "1", "--bootstrap-resamples", "200"]


def emulated_cpu(name: str) -> tuple[dict[str, str], set[int]]:
    """The environment and cores of an emulated CPU (this process's environment, its library
    variables replaced)."""
    variables, cores = CPUS[name]
    env = {k: v for k, v in os.environ.items() if k not in LIBRARY_VARIABLES}
    return env | variables, cores


def run_stage(project: Path, args: list[str], cpu: str) -> None:
    """One stage command (``python -m ...``) in ``project`` under an emulated CPU."""
    env, cores = emulated_cpu(cpu)
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    assert done.returncode == 0, f"{args[0]} under {cpu}:\n{(done.stdout + done.stderr)[-4000:]}"


def train_and_derive(project: Path, out: Path, cpu: str) -> dict[str, str]:
    """Train the MiniLM tagger on a tiny synthetic slice and attack three records with it; the
    sha256 of the checkpoint's and the derived set's files, by path under ``out``."""
    records = make_synthetic_records(46, seed=3)
    write_records(out / "train.jsonl", records[:32])
    write_records(out / "val.jsonl", records[32:40])
    write_records(out / "base.jsonl", records[40:])
    settings = [item for key, value in TRAINING.items() for item in ("--set", f"{key}={value}")]
    model = out / "model"
    run_stage(
        project,
        ["src.finetune.train", "--model", "minilm", "--task", "timex", "--out", str(model)]
        + ["--train-file", str(out / "train.jsonl"), "--val-file", str(out / "val.jsonl"), *settings],
        cpu,
    )
    run_stage(
        project,
        ["src.derive.adv", "--input", str(out / "base.jsonl"), "--task", "timex", "--checkpoint", str(model)]
        + ["--output", str(out / "adv.jsonl"), "--stats", str(out / "adv.stats.json")]
        + ["--examples", str(out / "adv.md"), *ATTACK],
        cpu,
    )
    inputs = {"train.jsonl", "val.jsonl", "base.jsonl"}
    written = [p for p in sorted(out.rglob("*")) if p.is_file() and p.name not in inputs]
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in written}


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="emulating a two-core CPU needs two cores")
@pytest.mark.skipif(not (REPO_ROOT / "data/raw/nltk_data").is_dir(), reason="data/raw not pulled: dvc pull data.dvc")
def test_the_checkpoint_and_the_derived_set_keep_their_bytes_on_another_cpu(tmp_path):
    first = train_and_derive(REPO_ROOT, tmp_path / "run", "sse-one-core")
    shutil.rmtree(tmp_path / "run")  # the same paths on both CPUs: the outputs name their inputs
    second = train_and_derive(REPO_ROOT, tmp_path / "run", "native-two-cores")
    assert {"model/model.safetensors", "model/training_summary.json", "adv.jsonl", "adv.stats.json"} <= set(first)
    changed = sorted(path for path in first if first[path] != second.get(path))
    assert not changed and first == second, f"bytes differ between the emulated CPUs: {changed}"


def test_the_environment_pins_threads_kernels_hash_seed_and_hides_a_gpu():
    env = numerics.environment(numerics.Numerics(threads=1, isa="avx2", hash_seed=0, device="cpu"))
    assert env["PYTHONHASHSEED"] == "0" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert {env[name] for name in numerics.THREAD_VARIABLES} == {"1"}
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_CBWR"] == "AVX2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["OPENBLAS_CORETYPE"] == "Haswell"
    gpu = numerics.environment(numerics.Numerics(threads=2, isa="native", hash_seed=0, device="cuda"))
    assert "CUDA_VISIBLE_DEVICES" not in gpu and "ATEN_CPU_CAPABILITY" not in gpu


def test_the_project_settings_are_params_yaml_numerics_and_compute_on_the_cpu():
    """The committed lock is computed at the level MKL promises across CPU vendors (COMPATIBLE)."""
    settings = numerics.settings()
    assert settings.device == "cpu" and settings.isa == "baseline"
    assert numerics.environment(settings)["MKL_CBWR"] == "COMPATIBLE"


@pytest.mark.parametrize(
    "block,message",
    [
        ({"threads": 0, "isa": "avx2", "hash_seed": 0, "device": "cpu"}, "numerics.threads"),
        ({"threads": 1, "isa": "avx512", "hash_seed": 0, "device": "cpu"}, "numerics.isa"),
        ({"threads": 1, "isa": "avx2", "hash_seed": -1, "device": "cpu"}, "numerics.hash_seed"),
        ({"threads": 1, "isa": "avx2", "hash_seed": 0, "device": "cuda"}, "isa: native"),
        ({"threads": 1, "isa": "avx2", "hash_seed": 0, "device": "cpu", "thread": 2}, "unknown keys"),
    ],
)
def test_a_wrong_setting_is_named(block, message):
    with pytest.raises(ValueError, match=message):
        numerics.Numerics.from_mapping(block)


def test_a_cpu_without_the_level_is_one_error_line_not_other_kernels(monkeypatch):
    level = numerics.settings().isa
    for name, value in numerics.environment(numerics.settings()).items():  # already pinned: no restart
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(numerics.REQUIRED_FEATURES, level, ("SSE2", "NO_SUCH_FEATURE"))
    with pytest.raises(ConfigError, match=f"^numerics.isa {level} needs NO_SUCH_FEATURE"):
        numerics.pin()


def test_a_command_restarts_itself_with_the_pinned_environment():
    """A ``src`` command started without the pinned environment (another hash seed, other kernels)
    starts again with it before computing: its set order is the pinned one on every start."""
    outputs = set()
    for seed, kernels in (("1", "default"), ("2", "avx2")):
        env = {k: v for k, v in os.environ.items() if k not in LIBRARY_VARIABLES}
        env |= {"PYTHONHASHSEED": seed, "ATEN_CPU_CAPABILITY": kernels}
        done = subprocess.run(
            [sys.executable, "-m", "src.numerics"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    [shown] = outputs
    pinned = subprocess.run(
        [sys.executable, "-c", "print(hash('tempgen'))"],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"hash('tempgen')={pinned.stdout.strip()}" in shown.splitlines()
    settings = numerics.settings()
    kernels = numerics.environment(settings)["ATEN_CPU_CAPABILITY"]
    assert f"ATEN_CPU_CAPABILITY={kernels}" in shown and f"OMP_NUM_THREADS={settings.threads}" in shown
    assert "PYTHONHASHSEED=0" in shown


def test_an_interpreter_that_ignores_the_environment_is_refused_not_run_with_a_random_hash_seed():
    """Regression: ``python -I`` ignores PYTHONHASHSEED, so a stage started with it computed with a
    random set order while its environment said it was pinned."""
    done = subprocess.run(
        [sys.executable, "-I", "-m", "src", "prepare", "--help"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "python -I or -E" in done.stderr and "usage" not in done.stdout
    assert done.stderr.startswith("error: this interpreter ignores PYTHON* variables")


def test_importing_a_stage_pins_nothing():
    """Pinning is the launcher's first call, never an import's side effect: a process that imports
    every stage module keeps its environment (and is not restarted)."""
    code = "import os, src.run, src.analyze, src.data.prepare, src.finetune.evaluate; print(os.environ.get('OMP_NUM_THREADS'))"
    env = {k: v for k, v in os.environ.items() if k not in LIBRARY_VARIABLES and k != "PYTHONHASHSEED"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"


@pytest.mark.skipif(not (REPO_ROOT / "data/raw/nltk_data").is_dir(), reason="data/raw not pulled: dvc pull data.dvc")
def test_counter_fitted_embeddings_in_the_cache_are_never_read_unless_asked_for(monkeypatch):
    """They are no dependency: a copy lying in ~/.cache/textattack on one machine must not change
    the word attack's candidates there."""
    from src.derive import attack_recipes

    monkeypatch.setattr(attack_recipes, "counter_fitted_available", lambda: True)
    transformation = attack_recipes.word_transformation(attack_recipes.WordAttackSettings())
    assert isinstance(transformation, attack_recipes.OfflineWordNetSwap)
    monkeypatch.setattr(attack_recipes, "counter_fitted_available", lambda: False)
    with pytest.raises(FileNotFoundError, match="paragramcf"):
        attack_recipes.word_transformation(attack_recipes.WordAttackSettings(use_counter_fitted=True))


def test_the_lock_pins_the_environment_the_project_runs_in():
    """requirements.lock is what scripts/write_lock.py reads from this environment: a dependency
    added or upgraded without a new lock is caught here (and in CI, after set-up from the lock)."""
    lock = (REPO_ROOT / "requirements.lock").read_text(encoding="utf-8")
    pinned = [line for line in lock.splitlines() if line and not line.startswith("#")]
    assert pinned and all(line.count("==") == 1 for line in pinned)
    assert {"torch==2.13.0", "llama-cpp-python==0.3.36"} <= set(pinned)
    done = subprocess.run(
        [sys.executable, "scripts/write_lock.py", "--check"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_stage_command_goes_through_the_launcher():
    """Each dvc.yaml stage runs ``python -m src STAGE``, which pins before the stage's module loads
    (and before numpy: the CPU's features are asked once the environment is set); no module of
    src pins at import time (the old ``src.numerics_first`` side effect)."""
    import ast
    import re

    from src.launch import STAGES

    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    launched = {re.search(r"python -m src (\w+)", s.get("do", s)["cmd"]).group(1) for s in stages.values()}
    assert launched == set(STAGES)
    for path in sorted((REPO_ROOT / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level_calls = [
            node.value.func for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
        ]
        names = {getattr(f, "id", getattr(f, "attr", "")) for f in top_level_calls}
        assert not names & {"pin", "launch", "dispatch"} or path.name == "__main__.py", path
        assert "numerics_first" not in path.read_text(encoding="utf-8"), path
    numerics_source = (REPO_ROOT / "src" / "numerics.py").read_text(encoding="utf-8")
    assert not re.search(r"^(import numpy|from numpy)", numerics_source, re.M)
