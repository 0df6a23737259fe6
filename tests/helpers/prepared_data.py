"""The prepare stage's output, built from ``data/raw`` into a tmp folder (never into ``data/prepared``).

The stage's own command (``dvc.yaml``'s ``prepare.cmd``) runs in the repository with a copy of
``params.yaml`` whose ``paths.prepared`` is the tmp folder, so the tests that read real prepared
records check what ``dvc repro`` builds, on a fresh clone as in CI.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.paths import REPO_ROOT

#: Every task's prepared sets (``src.data.datasets.build_datasets`` without the optional i2b2 set).
PREPARED_SETS = ("train", "val", "base", "len", "t2c")


def prepare_command(params: Path) -> list[str]:
    """``dvc.yaml``'s prepare command, reading ``params`` instead of the repository's ``params.yaml``."""
    cmd = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]["prepare"]["cmd"]
    words = shlex.split(cmd)
    assert words[0] == "python" and "params.yaml" in words, f"dvc.yaml's prepare command changed shape: {cmd}"
    return [sys.executable, *(str(params) if word == "params.yaml" else word for word in words[1:])]


def prepare_into(root: Path) -> Path:
    """Run the prepare stage with its output under ``root``; returns the prepared folder."""
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["paths"]["prepared"] = str(root / "prepared")
    copy = root / "params.yaml"
    copy.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    done = subprocess.run(prepare_command(copy), cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the prepare stage failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return root / "prepared"
