"""Switching the sweep profile rewrites only the marked block of params.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from src import profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", profile.available())
def test_every_profile_can_be_made_active(tmp_path: Path, name: str):
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    before = yaml.safe_load(params.read_text())
    profile.use(name, params)
    after = yaml.safe_load(params.read_text())
    assert after["sweep"]["profile"] == name
    assert {k: v for k, v in after.items() if k != "sweep"} == {k: v for k, v in before.items() if k != "sweep"}
    assert set(after["sweep"]) == set(before["sweep"])  # every profile defines the same keys


def test_profiles_cover_the_study():
    names = profile.available()
    assert {"default", "paper", "smoke"} <= set(names)
    paper = yaml.safe_load((profile.PROFILES / "paper.yaml").read_text())["sweep"]
    assert {"qwen3_moe", "llama4_maverick", "mixtral_8x7b", "ministral_8b", "llama3_8b", "qwen25_7b"} <= set(paper["models"])
    assert len(paper["strategies"]) == 7 and paper["limit"] is None


def test_unknown_profile_is_a_clear_error(tmp_path: Path):
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    with pytest.raises(SystemExit, match="unknown profile"):
        profile.use("nope", params)
