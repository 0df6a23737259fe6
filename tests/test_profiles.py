"""Sweep profiles are DVC params files: sweep.yaml is the default profile itself, the others live
in conf/profiles/ (switching is a copy, `git checkout sweep.yaml` switches back), and every
profile has the same keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ACTIVE = ROOT / "sweep.yaml"
PROFILES = sorted((ROOT / "conf/profiles").glob("*.yaml"))
ALL_PROFILES = [ACTIVE, *PROFILES]


def _sweep(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert set(data) == {"sweep"}, f"{path}: one `sweep:` mapping"
    return data["sweep"]


def _name(path: Path) -> str:
    return "default" if path == ACTIVE else path.stem


def _switched() -> bool:
    """True after `cp conf/profiles/NAME.yaml sweep.yaml` (the default profile is then in git only)."""
    return _sweep(ACTIVE)["profile"] != "default"


def test_the_sweep_file_is_the_default_profile_or_a_copy_of_another():
    assert not (ROOT / "conf/profiles/default.yaml").exists()  # the default profile lives once
    assert {p.stem for p in PROFILES} == {"paper", "smoke"}
    active = _sweep(ACTIVE)
    if _switched():
        assert active == _sweep(ROOT / f"conf/profiles/{active['profile']}.yaml")


@pytest.mark.parametrize("path", ALL_PROFILES, ids=[_name(p) for p in ALL_PROFILES])
def test_every_profile_defines_the_same_keys_and_names_itself(path: Path):
    sweep = _sweep(path)
    assert sweep["profile"] == (_sweep(ACTIVE)["profile"] if path == ACTIVE else path.stem)
    assert set(sweep) == set(_sweep(ACTIVE))
    assert (ROOT / f"conf/condition/{sweep['condition']}.yaml").exists()
    for model in sweep["models"]:
        assert (ROOT / f"conf/model/{model}.yaml").exists(), model


def test_the_default_profile_is_a_study_and_the_paper_profile_the_studys_condition():
    if _switched():
        pytest.skip("sweep.yaml holds another profile (`git checkout sweep.yaml` restores the default)")
    default = _sweep(ACTIVE)
    assert len(default["strategies"]) == 7 and default["limit"] >= 40 and default["derive_limit"] >= 40
    paper = _sweep(ROOT / "conf/profiles/paper.yaml")
    assert {"qwen3_moe", "llama4_maverick", "mixtral_8x7b", "ministral_8b", "llama3_8b", "qwen25_7b"} <= set(
        paper["models"]
    )
    assert paper["limit"] is None and paper["derive_limit"] is None and paper["condition"] == "study_condition"


@pytest.mark.parametrize("path", ALL_PROFILES, ids=[_name(p) for p in ALL_PROFILES])
def test_no_profile_restates_the_reasoning_budget(path: Path):
    """The reasoning allowance is the model file's own bound (conf/config.yaml derives it)."""
    assert "max_tokens_reasoning" not in _sweep(path)
