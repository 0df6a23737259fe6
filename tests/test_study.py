"""The study vocabulary is the one place the study's tasks, datasets and strategies are named."""

from __future__ import annotations

import pytest
import yaml

from src import study
from tests.helpers.paths import REPO_ROOT


def test_the_study_has_thirteen_task_dataset_pairs_in_four_dimensions():
    keys = study.dataset_keys()
    assert len(keys) == 13 and keys[0] == "timex/base" and keys[-1] == "comp/base"
    dims = study.dimension_keys()
    assert set(dims) == {"robustness", "domain", "compositional", "structural"}
    assert sorted(k for ks in dims.values() for k in ks) == sorted(
        k for k in keys if k.split("/")[1] != "base" or k.startswith("comp/")
    )


#: Task -> datasets each dimension config runs, written out: ``base`` comes along for pairing.
EVERY = ["base", "adv", "adv_p", "t2c", "voc", "len"]
DIMENSION_DATASETS = {
    "all": {"timex": EVERY, "eventx": EVERY, "comp": ["base"]},
    "base": {"timex": ["base"], "eventx": ["base"], "comp": ["base"]},
    "robustness": {"timex": ["base", "adv", "adv_p"], "eventx": ["base", "adv", "adv_p"], "comp": []},
    "domain": {"timex": ["base", "t2c", "voc"], "eventx": ["base", "t2c", "voc"], "comp": []},
    "compositional": {"timex": [], "eventx": [], "comp": ["base"]},
    "structural": {"timex": ["base", "len"], "eventx": ["base", "len"], "comp": []},
}


@pytest.mark.parametrize("dimension", ["all", "base", "robustness", "domain", "compositional", "structural"])
def test_each_dimension_config_reads_the_vocabulary(dimension: str):
    spec = yaml.safe_load((REPO_ROOT / f"conf/dimension/{dimension}.yaml").read_text())
    assert spec == {"name": dimension, "datasets": f"${{study:{dimension}}}"}
    assert study.dimension_datasets(dimension) == DIMENSION_DATASETS[dimension]


def test_strategy_names_decompose_into_reasoning_parts():
    assert study.strategy_parts("A+D+I") == {"abductive": True, "deductive": True, "inductive": True}
    assert study.strategy_parts("D") == {"abductive": False, "deductive": True, "inductive": False}
    with pytest.raises(ValueError):
        study.strategy_parts("I+I")
    groups = study.strategy_groups()
    assert groups["inductive+"] == ("I", "D+I", "A+I", "A+D+I")
    assert groups["non-inductive"] == ("D", "A", "A+D")
    assert groups["all"] == study.STRATEGY_ORDER == ("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I")


def test_every_dataset_file_is_a_pipeline_output():
    dvc = (REPO_ROOT / "dvc.yaml").read_text()
    for key in study.dataset_keys():
        task, name = key.split("/")
        where = study.dataset_path("data/prepared", "data/derived", task, name)
        if name in ("adv", "adv_p", "voc"):  # the derived sets, written out
            assert where == f"data/derived/{task}/{name}.jsonl"
            assert f"data/derived/${{item}}/{name}.jsonl" in dvc, f"{where}: no derive stage writes it"
        else:
            assert where == f"data/prepared/{task}/{name}.jsonl"
