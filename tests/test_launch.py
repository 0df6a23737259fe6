"""The one launcher: ``python -m src STAGE`` pins the process, then runs the stage's ``main``."""

from __future__ import annotations

import os
import subprocess
import sys

from src.launch import STAGES
from tests.helpers.paths import REPO_ROOT


def _run(*arguments: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "OMP_NUM_THREADS")}
    return subprocess.run(
        [sys.executable, "-m", "src", *arguments],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unknown_stage_is_one_line_naming_the_stages():
    done = _run("bogus")
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.strip() == f"error: python -m src STAGE [ARGS]: bogus is no stage (the stages: {', '.join(STAGES)})"
    )
    assert _run().returncode == 2


def test_every_stage_is_a_module_with_a_main_and_answers_help_under_its_launcher_name():
    for module in STAGES.values():
        assert "def main(" in (REPO_ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"), module
    done = _run("prepare", "--help", PYTHONHASHSEED="7")  # not the pinned seed: the launcher restarts first
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m src prepare"), done.stderr[-2000:]
    hydra = _run("run", "--help")
    assert hydra.returncode == 0 and "Configuration groups" in hydra.stdout, hydra.stderr[-2000:]


def test_a_bad_settings_file_is_one_line_and_exit_2_in_every_stage(tmp_path):
    """Regression: a profile the loader refuses was a traceback in the stages that read it while
    parsing their arguments (the analysis, the fine-tuned evaluation)."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text((REPO_ROOT / "sweep.yaml").read_text(encoding="utf-8") + "  limt: 3\n", encoding="utf-8")
    for stage in ("analyze", "evaluate"):
        arguments = (
            ["--sweep", str(sweep), "--out", str(tmp_path)]
            if stage == "analyze"
            else ["--model", "minilm", "--sweep", str(sweep)]
        )
        done = _run(stage, *arguments)
        assert done.returncode == 2, (stage, done.stderr[-2000:])
        assert done.stderr.strip().splitlines() == [f"error: {sweep}: sweep.limt: no such setting"], stage
