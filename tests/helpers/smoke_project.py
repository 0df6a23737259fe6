"""One smoke-profile ``dvc repro`` in a copy of the project, shared by every end-to-end test.

The chain (prepare, derive, fine-tune, prompted runs, analysis) takes minutes of CPU, so the
session runs it once (``smoke_project`` in ``tests/conftest.py``) and the end-to-end tests read
or extend that copy instead of each running its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT


def project_files() -> list[str]:
    """The files git would commit (tracked and untracked-but-not-ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [path for path in listed if (REPO_ROOT / path).is_file()]


def copy_project(target: Path) -> Path:
    """A fresh git repository at ``target`` with the project's files and the raw data, no lock."""
    for relative in project_files():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, destination)
    shutil.copytree(REPO_ROOT / "data/raw", target / "data/raw")
    (target / "dvc.lock").unlink(missing_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    return target


def pipeline_env() -> dict[str, str]:
    """The environment of a pipeline subprocess: offline, no key, the local MLflow store."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def dvc(project: Path, *args: str, timeout: int = 3000) -> subprocess.CompletedProcess:
    """``dvc ARGS`` in ``project`` with :func:`pipeline_env`, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=project,
        env=pipeline_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def commit_all(project: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message],
        cwd=project,
        check=True,
        capture_output=True,
    )


def smoke_repro(target: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """Copy the project to ``target``, switch to the smoke profile and ``dvc repro`` it once."""
    project = copy_project(target)
    shutil.copy(project / "conf/profiles/smoke.yaml", project / "sweep.yaml")  # the DVC-native profile switch
    return project, dvc(project, "repro")
