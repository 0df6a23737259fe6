"""Sweep profiles are DVC params files: switching is a copy, and every profile has the same keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "conf/profiles").glob("*.yaml"))


def _sweep(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert set(data) == {"sweep"}, f"{path}: one `sweep:` mapping"
    return data["sweep"]


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_profile_defines_the_same_keys_and_names_itself(path: Path):
    sweep = _sweep(path)
    assert sweep["profile"] == path.stem
    assert set(sweep) == set(_sweep(ROOT / "conf/profiles/default.yaml"))
    assert (ROOT / f"conf/experiment/{sweep['experiment']}.yaml").exists()
    for model in sweep["models"]:
        assert (ROOT / f"conf/model/{model}.yaml").exists(), model


def test_the_active_sweep_is_a_profile():
    active = _sweep(ROOT / "sweep.yaml")
    assert active == _sweep(ROOT / f"conf/profiles/{active['profile']}.yaml")


def test_the_default_profile_is_a_study_and_the_paper_profile_the_studys_condition():
    default = _sweep(ROOT / "conf/profiles/default.yaml")
    assert len(default["strategies"]) == 7 and default["limit"] >= 40 and default["derive_limit"] >= 40
    paper = _sweep(ROOT / "conf/profiles/paper.yaml")
    assert {"qwen3_moe", "llama4_maverick", "mixtral_8x7b", "ministral_8b", "llama3_8b", "qwen25_7b"} <= set(
        paper["models"]
    )
    assert paper["limit"] is None and paper["derive_limit"] is None and paper["experiment"] == "study_condition"


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_the_abductive_allowance_is_the_reasoning_budget_of_the_models_that_set_one(path: Path):
    """A model file that bounds its reasoning list (``list_token_budgets.reasoning_steps``) gets
    exactly that many tokens added to its abductive answers: one number, said twice."""
    sweep = _sweep(path)
    for model in sweep["models"]:
        options = yaml.safe_load((ROOT / f"conf/model/{model}.yaml").read_text()).get("options") or {}
        budget = (options.get("list_token_budgets") or {}).get("reasoning_steps")
        if budget is not None:
            assert sweep["max_tokens_reasoning"] == budget, (path.stem, model)
