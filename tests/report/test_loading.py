"""Loading the runs the summaries name from a real MLflow SQLite store written with the project's own logging code.

``log_study`` builds the store (also used by ``test_report.py`` and ``test_provenance.py``):
runs are created with ``src.scoring.evaluate.evaluate_dataset`` + ``log_evaluation`` so the
artifact formats stay in sync with what ``src.run`` logs, and summary files shaped like the
pipeline's (``run_id``, ``model``, ``strategy``, ``complete``, ``metrics``) name them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import mlflow
import numpy as np
import pandas as pd
import pytest

from src.data.schema import Record, Span
from src.report.loading import build_study, dataset_stats, load_study
from src.scoring.evaluate import InstanceOutput, evaluate_dataset, log_evaluation

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
    ("small", "I"): 0.3,
    ("small", "D"): 0.5,
    ("large", "I"): 1.0,
    ("large", "D"): 0.6,
    ("sparse", "I"): 0.9,
    ("sparse", "D"): 0.1,
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
        wanted = {
            "timex": [("Monday", "TIMEX"), ("Friday", "TIMEX")],
            "eventx": [("met", "EVENT"), ("left", "EVENT")],
            "comp": [("Monday", "TIMEX"), ("met", "EVENT")],
        }[task]
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


def log_run(
    model: str,
    strategy: str,
    status: str = "FINISHED",
    quality: float | None = None,
    datasets=tuple(DATASETS),
    kind: str | None = "prompted",
    git_commit: str = "abc123",
    data_version: str = "raw:test/datasets:test",
) -> str:
    family, architecture, size, series = MODELS[model]
    quality = QUALITY[model, strategy] if quality is None else quality
    with mlflow.start_run(run_name=f"{model}-{strategy}") as run:
        mlflow.set_tags({"model": model, "strategy": strategy, **({"kind": kind} if kind else {})})
        params = {
            "model": model,
            "model_id": f"test/{model}",
            "family": family,
            "architecture": architecture,
            "params_total_b": size,
            "params_active_b": size / 4 if architecture == "moe" else size,
            "strategy": strategy,
            "inductive_plus": "I" in strategy,
            "seed": 13,
            "git_commit": git_commit,
            "data_version": data_version,
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


class Store(NamedTuple):
    uri: str
    ids: dict[str, str]  # configuration -> run id
    summaries: Path


def write_summary(directory: Path, config: str, run_id: str, complete: bool = True) -> Path:
    """A summary file like the pipeline's: ``runs/{config}.json``, or ``finetuned/{model}.json``."""
    model, strategy = config.rsplit("-", 1)
    path = directory / ("finetuned" if strategy == "finetuned" else "runs") / f"{config}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "run_id": run_id,
        "run_name": config,
        "model": model,
        "strategy": strategy,
        "complete": complete,
        "metrics": {},
    }
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def log_study(tmp_path) -> Store:
    """A SQLite store with six prompted and one fine-tuned configuration named by summaries, plus a stale,
    a failed and an untagged run that no summary names."""
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
    summaries = tmp_path / "summaries"
    for config, run_id in ids.items():
        write_summary(summaries, config, run_id)
    return Store(uri, ids, summaries)


_SHARED: dict[str, Store] = {}


def shared_store(tmp_path_factory) -> Store:
    """One store per test session (creating an MLflow database takes seconds); also used by test_report."""
    if "store" not in _SHARED:
        _SHARED["store"] = log_study(tmp_path_factory.mktemp("store"))
    return _SHARED["store"]


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


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
