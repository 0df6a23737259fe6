"""Where the repository, its test fixtures and its raw corpora are, for every test module."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
RAW = REPO_ROOT / "data" / "raw"
FIXTURES = REPO_ROOT / "tests" / "fixtures"


def requires_raw(relative: str):
    """Skip (with the command that fixes it) when a ``data/raw`` folder has not been pulled."""
    return pytest.mark.skipif(
        not (RAW / relative).is_dir(), reason=f"data/raw/{relative} missing: run `dvc pull data.dvc`"
    )
