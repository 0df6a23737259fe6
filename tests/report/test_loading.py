"""Loading the runs the summaries name from a real MLflow SQLite store written with the project's own logging code.

The store is ``tests.helpers.mlflow_study.log_study``'s (the ``store`` fixture of ``tests/report/conftest.py``).
"""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest

from src.report.loading import load_results as load_study
from src.report.results import build_results as build_study, dataset_stats
from tests.helpers.mlflow_study import DATASETS, EXPERIMENT, INSTANCES


def test_exactly_the_runs_the_summaries_name_with_params_and_metrics(store):
    study = load_study(EXPERIMENT, store.uri, store.summaries)
    ids = store.ids
    assert sorted(study.runs.index) == sorted(ids)  # not the stale, failed or untagged runs
    assert study.checked and study.notes == []
    assert list(study.runs.index[:2]) == ["large-I", "large-D"]  # model, then the study's strategy order
    assert study.runs.index[-1] == "bert-finetuned" and study.runs.loc["bert-finetuned", "kind"] == "finetuned"
    assert study.runs.loc["large-I", "run_id"] == ids["large-I"]
    assert study.runs.loc["large-I", "summary"] == "runs/large-I.json"
    assert study.runs.loc["bert-finetuned", "summary"] == "finetuned/bert-finetuned.json"
    assert study.runs.loc["large-I", "git_commit"] == "abc123"
    assert study.runs.loc["large-I", "data_version"] == "raw:test/datasets:test"
    assert study.runs.loc["sparse-D", "architecture"] == "moe"
    assert study.runs.loc["small-D", "params_total_b"] == 1.0
    assert study.runs.loc["small-I", "inductive_plus"] and not study.runs.loc["small-D", "inductive_plus"]
    assert study.runs.loc["large-I", "size_series"] == "fam-sizes"
    assert pd.isna(study.runs.loc["sparse-I", "size_series"])
    client = mlflow.tracking.MlflowClient(store.uri)
    logged = client.get_run(ids["large-I"]).data.metrics
    row = study.scores[
        (study.scores["config"] == "large-I") & (study.scores["task"] == "timex") & (study.scores["dataset"] == "base")
    ].iloc[0]
    assert row["f1"] == logged["timex.base.f1"] == 1.0
    assert row["errors.missing"] == logged["timex.base.errors.missing"]
    comp = study.scores[(study.scores["config"] == "large-I") & (study.scores["task"] == "comp")].iloc[0]
    assert comp["TIMEX.f1"] == logged["comp.base.TIMEX.f1"]
    assert not any(c.startswith("usage.") for c in study.scores.columns)


def test_statistics_follow_the_artifacts(store):
    study = load_study(EXPERIMENT, store.uri, store.summaries)
    assert set(study.datasets) == {f"{t}/{d}" for t, d in DATASETS}
    base = study.datasets["timex/base"]
    assert base.configs == list(study.runs.index)
    assert all(len(base.ids[c]) == INSTANCES for c in base.configs)
    np.testing.assert_allclose(base.stats["large-I"].sum(axis=0), [2 * INSTANCES, 2 * INSTANCES, 2 * INSTANCES])
    assert base.errors["large-I"]["missing"].sum() == 0
    assert base.instance_groups() == [(INSTANCES, list(study.runs.index))]
    # adv_p drops an instance for every configuration alike: one instance set
    assert [n for n, _ in study.datasets["timex/adv_p"].instance_groups()] == [INSTANCES - 1]
    # the predictions rows, per (config, task, dataset), in the order of the bootstrap ids
    scored = {(c, *key.split("/")) for key, data in study.datasets.items() for c in data.configs}
    assert set(study.instances) == scored and len(scored) > len(DATASETS)
    rows = study.instances["large-I", "timex", "base"]
    assert [row["id"] for row in rows] == base.ids["large-I"] and {"gold", "predictions", "served"} <= set(rows[0])


def test_each_configuration_keeps_its_own_instances_and_stacks_on_request():
    a = {"ids": ["x", "y", "z"], "stats": {"lcs": [[1, 1, 1], [0, 1, 1], [2, 2, 2]]}, "errors": {"missing": [0, 1, 0]}}
    b = {"ids": ["z", "x"], "stats": {"lcs": [[5, 5, 5], [3, 3, 3]]}, "errors": {"missing": [4, 2]}}
    data = dataset_stats("timex", "base", {"a": a, "b": b})
    assert data.ids == {"a": ["x", "y", "z"], "b": ["z", "x"]}
    np.testing.assert_array_equal(
        data.stacked(["b", "a"], ["x", "z"]), [[[3, 3, 3], [5, 5, 5]], [[1, 1, 1], [2, 2, 2]]]
    )
    np.testing.assert_array_equal(data.errors["b"]["missing"], [4, 2])
    assert data.instance_groups() == [(3, ["a"]), (2, ["b"])]
    assert data.subset(["b"]).configs == ["b"]


def test_differing_instance_sets_are_reported():
    runs = [
        {
            "config": c,
            "run_id": f"id-{c}",
            "start_time": 0,
            "model": c,
            "strategy": "I",
            "kind": "prompted",
            "inductive_plus": True,
        }
        for c in ("a", "b")
    ]
    artifacts = {
        "a": {("timex", "base"): {"ids": ["x", "y"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}},
        "b": {("timex", "base"): {"ids": ["x"], "stats": {"lcs": [[1, 1, 1]]}}},
    }
    study = build_study(runs, {"a": {"timex.base.f1": 1.0}, "b": {"timex.base.f1": 1.0}}, artifacts)
    assert study.notes == [
        "timex/base: the configurations were scored on 2 different instance sets (1 on 2 (a); "
        "1 on 1 (b)); each pair is compared on the instances both were scored on."
    ]
    assert not study.checked


@pytest.mark.parametrize(
    "artifact, message",
    [
        ({"ids": ["x", "x"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}, "duplicated instance ids"),
        ({"ids": ["x"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}, "1 ids but 2 rows"),
        ({"ids": ["x"]}, "a bootstrap artifact needs 'ids'"),
        ({"ids": ["x"], "stats": {"lcs": [[1, 1, 1]]}, "errors": {"missing": [1, 2]}}, "1 ids but 2 'missing'"),
    ],
)
def test_malformed_artifacts_name_their_origin(artifact, message):
    with pytest.raises(ValueError, match=f"run 42 timex/base.json: {message}"):
        dataset_stats("timex", "base", {"a": artifact}, {"a": "run 42 timex/base.json"})


def test_missing_experiment_is_a_clear_error(store):
    with pytest.raises(ValueError, match="no MLflow experiment named 'nope'"):
        load_study("nope", store.uri, store.summaries)
