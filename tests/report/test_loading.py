"""Loading an experiment from a real MLflow SQLite store written with the project's own logging code.

``log_study`` builds the store (also used by ``test_report.py``): runs are created with
``src.scoring.evaluate.evaluate_dataset`` + ``log_evaluation`` so the artifact formats stay in
sync with what ``src.run`` logs.
"""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest

from src.data.schema import Record, Span
from src.scoring.evaluate import InstanceOutput, evaluate_dataset, log_evaluation
from src.report.loading import build_study, load_study, stack_dataset

INSTANCES = 20
EXPERIMENT = "analysis-test"
# model -> (family, architecture, total size in B, size series)
MODELS = {
    "small": ("fam", "dense", 1.0, "fam-sizes"),
    "large": ("fam", "dense", 8.0, "fam-sizes"),
    "sparse": ("fam", "moe", 40.0, None),
    "bert": ("encoder", "dense", 0.1, None),
}
# (model, strategy) -> share of instances answered correctly (the rest get a wrong span)
QUALITY = {
    ("small", "I"): 0.3, ("small", "D"): 0.5,
    ("large", "I"): 1.0, ("large", "D"): 0.6,
    ("sparse", "I"): 0.9, ("sparse", "D"): 0.1,
}
DATASETS = [("timex", "base"), ("timex", "adv_p"), ("timex", "t2c"), ("eventx", "base"), ("comp", "base")]
TARGETS = {"timex": ("Monday", "Friday"), "eventx": ("met", "left")}


def make_records(task: str, dataset: str) -> list[Record]:
    """Twenty sentences with two targets each (comp: one time and one event)."""
    records = []
    for k in range(INSTANCES):
        if dataset == "adv_p" and k == INSTANCES - 1:
            continue  # a paraphrase that was rejected: adv_p drops an instance
        text = f"Case {k}: we met on Monday and left on Friday."
        wanted = {"timex": [("Monday", "TIMEX"), ("Friday", "TIMEX")], "eventx": [("met", "EVENT"), ("left", "EVENT")],
                  "comp": [("Monday", "TIMEX"), ("met", "EVENT")]}[task]
        spans = [Span(text.index(s), text.index(s) + len(s), s, label) for s, label in wanted]
        records.append(Record(f"{dataset}-{k}", f"doc{k}", text, spans, "test"))
    return records


def outputs_for(records: list[Record], task: str, quality: float, dataset: str) -> list[InstanceOutput]:
    """Gold spans for the first ``quality`` share of instances, a wrong and a partial span otherwise."""
    shift = 0.2 if dataset == "t2c" else 0.0  # every configuration does better on t2c, ranks unchanged
    correct = round(min(1.0, quality + shift) * len(records))
    outputs = []
    for k, record in enumerate(records):
        if k < correct:
            preds = [s.text for s in record.spans]
        else:
            preds = ["Case", record.spans[0].text + " and"]
        if task == "comp":
            preds = [{"text": p, "label": "TIMEX" if p in ("Monday", "Friday") else "EVENT"} for p in preds]
        outputs.append(InstanceOutput(preds, raw=str(preds)))
    return outputs


def log_run(model: str, strategy: str, status: str = "FINISHED", quality: float | None = None,
            datasets=tuple(DATASETS), kind: str | None = "prompted") -> str:
    family, architecture, size, series = MODELS[model]
    quality = QUALITY[model, strategy] if quality is None else quality
    with mlflow.start_run(run_name=f"{model}-{strategy}") as run:
        mlflow.set_tags({"model": model, "strategy": strategy, **({"kind": kind} if kind else {})})
        params = {
            "model": model, "model_id": f"test/{model}", "family": family, "architecture": architecture,
            "params_total_b": size, "params_active_b": size / 4 if architecture == "moe" else size,
            "strategy": strategy, "inductive_plus": "I" in strategy, "seed": 13,
            "git_commit": "abc123", "data_version": "raw:test/datasets:test",
        }
        if series:
            params["size_series"] = series
        mlflow.log_params(params)
        for task, dataset in datasets:
            records = make_records(task, dataset)
            evaluation = evaluate_dataset(task, dataset, records, outputs_for(records, task, quality, dataset), 50, 13)
            log_evaluation(evaluation)
        mlflow.end_run(status=status)
    return run.info.run_id


def log_study(tmp_path) -> tuple[str, dict[str, str]]:
    """A SQLite store with six prompted and one fine-tuned configuration, plus a stale, a failed and an
    untagged run; returns (uri, configuration -> run id)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.create_experiment(EXPERIMENT, artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(EXPERIMENT)
    log_run("large", "I", quality=0.0, datasets=DATASETS[:1])  # an older run of the same name: must be superseded
    ids = {}
    for model, strategy in QUALITY:
        ids[f"{model}-{strategy}"] = log_run(model, strategy)
    log_run("small", "I", status="FAILED", quality=0.0, datasets=DATASETS[:1])  # newer but failed: ignored
    ids["bert-finetuned"] = log_run("bert", "finetuned", quality=0.8, datasets=DATASETS[:3], kind="finetuned")
    log_run("bert", "train", quality=0.5, datasets=DATASETS[:1], kind=None)  # a training run: not a configuration
    return uri, ids


_SHARED: dict[str, tuple[str, dict[str, str]]] = {}


def shared_store(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """One store per test session (creating an MLflow database takes seconds); also used by test_report."""
    if "store" not in _SHARED:
        _SHARED["store"] = log_study(tmp_path_factory.mktemp("store"))
    return _SHARED["store"]


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


def test_latest_finished_run_per_name_with_params_and_metrics(store):
    uri, ids = store
    study = load_study(EXPERIMENT, uri)
    assert sorted(study.runs.index) == sorted(ids)
    assert list(study.runs.index[:2]) == ["large-I", "large-D"]  # model, then the study's strategy order
    assert study.runs.index[-1] == "bert-finetuned" and study.runs.loc["bert-finetuned", "kind"] == "finetuned"
    assert study.runs.loc["large-I", "run_id"] == ids["large-I"]
    assert study.runs.loc["sparse-D", "architecture"] == "moe"
    assert study.runs.loc["small-D", "params_total_b"] == 1.0
    assert study.runs.loc["small-I", "inductive_plus"] and not study.runs.loc["small-D", "inductive_plus"]
    assert study.runs.loc["large-I", "size_series"] == "fam-sizes"
    assert pd.isna(study.runs.loc["sparse-I", "size_series"])
    client = mlflow.tracking.MlflowClient(uri)
    logged = client.get_run(ids["large-I"]).data.metrics
    row = study.scores[(study.scores["config"] == "large-I") & (study.scores["task"] == "timex")
                       & (study.scores["dataset"] == "base")].iloc[0]
    assert row["f1"] == logged["timex.base.f1"] == 1.0
    assert row["errors.missing"] == logged["timex.base.errors.missing"]
    comp = study.scores[(study.scores["config"] == "large-I") & (study.scores["task"] == "comp")].iloc[0]
    assert comp["TIMEX.f1"] == logged["comp.base.TIMEX.f1"]
    assert not any(c.startswith("usage.") for c in study.scores.columns)


def test_stacked_statistics_follow_the_artifacts(store):
    uri, ids = store
    study = load_study(EXPERIMENT, uri)
    assert set(study.datasets) == {f"{t}/{d}" for t, d in DATASETS}
    base = study.datasets["timex/base"]
    assert base.stats.shape == (7, INSTANCES, 3)
    assert base.configs == list(study.runs.index)
    large = base.configs.index("large-I")
    np.testing.assert_allclose(base.stats[large].sum(axis=0), [2 * INSTANCES, 2 * INSTANCES, 2 * INSTANCES])
    assert base.errors["missing"][large].sum() == 0
    # adv_p drops an instance for every configuration alike: nothing is left out
    assert len(study.datasets["timex/adv_p"].ids) == INSTANCES - 1
    assert study.notes == ["Skipped 1 FINISHED run(s) without a `kind` tag of ('prompted', 'finetuned') "
                           "(not configuration runs): bert-train."]


def test_stack_restricts_to_common_ids_and_reorders():
    a = {"ids": ["x", "y", "z"], "stats": {"lcs": [[1, 1, 1], [0, 1, 1], [2, 2, 2]]}, "errors": {"missing": [0, 1, 0]}}
    b = {"ids": ["z", "x"], "stats": {"lcs": [[5, 5, 5], [3, 3, 3]]}, "errors": {"missing": [4, 2]}}
    stacked = stack_dataset("timex", "base", {"a": a, "b": b})
    assert stacked.ids == ["x", "z"]
    np.testing.assert_array_equal(stacked.stats[1], [[3, 3, 3], [5, 5, 5]])
    np.testing.assert_array_equal(stacked.errors["missing"], [[0, 0], [2, 4]])
    assert stacked.dropped == {"a": 1, "b": 0}


def test_dropped_instances_are_reported():
    runs = [{"config": c, "run_id": f"id-{c}", "start_time": 0, "model": c, "strategy": "I", "kind": "prompted",
             "inductive_plus": True} for c in ("a", "b")]
    artifacts = {
        "a": {("timex", "base"): {"ids": ["x", "y"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}},
        "b": {("timex", "base"): {"ids": ["x"], "stats": {"lcs": [[1, 1, 1]]}}},
    }
    study = build_study(runs, {"a": {"timex.base.f1": 1.0}, "b": {"timex.base.f1": 1.0}}, artifacts)
    assert study.notes == ["timex/base: paired tests use the 1 instances all 2 configurations share; left out: a (1)."]


@pytest.mark.parametrize(
    "artifact, message",
    [
        ({"ids": ["x", "x"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}, "duplicated instance ids"),
        ({"ids": ["x"], "stats": {"lcs": [[1, 1, 1], [1, 1, 1]]}}, "1 ids but 2 rows"),
        ({"ids": ["x"]}, "a bootstrap artifact needs 'ids'"),
    ],
)
def test_malformed_artifacts_name_their_origin(artifact, message):
    with pytest.raises(ValueError, match=f"run 42 timex/base.json: {message}"):
        stack_dataset("timex", "base", {"a": artifact}, {"a": "run 42 timex/base.json"})


def test_missing_experiment_is_a_clear_error(store):
    with pytest.raises(ValueError, match="no MLflow experiment named 'nope'"):
        load_study("nope", store[0])
