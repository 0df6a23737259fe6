"""The study vocabulary is the one place the study's tasks, datasets and strategies are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from src import study

ROOT = Path(__file__).resolve().parents[1]


def test_the_study_has_thirteen_task_dataset_pairs_in_four_dimensions():
    keys = study.dataset_keys()
    assert len(keys) == 13 and keys[0] == "timex/base" and keys[-1] == "comp/base"
    dims = study.dimension_keys()
    assert set(dims) == {"robustness", "domain", "compositional", "structural"}
    assert sorted(k for ks in dims.values() for k in ks) == sorted(
        k for k in keys if k.split("/")[1] != "base" or k.startswith("comp/")
    )


@pytest.mark.parametrize("dimension", ["all", "base", "robustness", "domain", "compositional", "structural"])
def test_each_dimension_config_reads_the_vocabulary(dimension: str):
    spec = yaml.safe_load((ROOT / f"conf/dimension/{dimension}.yaml").read_text())
    assert spec == {"name": dimension, "datasets": f"${{study:{dimension}}}"}
    resolved = study.dimension_datasets(dimension)
    assert set(resolved) == set(study.TASK_ORDER)
    if dimension not in ("all", "base", "compositional"):
        assert all(names[0] == "base" for names in resolved.values() if names), "base comes along for pairing"


def test_strategy_names_decompose_into_reasoning_parts():
    assert study.strategy_parts("A+D+I") == {"abductive": True, "deductive": True, "inductive": True}
    assert study.strategy_parts("D") == {"abductive": False, "deductive": True, "inductive": False}
    with pytest.raises(ValueError):
        study.strategy_parts("I+I")
    groups = study.strategy_groups()
    assert set(groups["inductive+"]) | set(groups["non-inductive"]) == set(study.STRATEGY_ORDER)


def test_every_dataset_file_is_a_pipeline_output():
    dvc = (ROOT / "dvc.yaml").read_text()
    for key in study.dataset_keys():
        task, name = key.split("/")
        where = study.dataset_path("data/prepared", "data/derived", task, name)
        if study.DATASETS[name].derived:
            assert f"data/derived/${{item}}/{name}.jsonl" in dvc, f"{where}: no derive stage writes it"
        else:
            assert "data/prepared/" in where
