"""A real MLflow SQLite store of a small study, written with the project's own logging code.

Runs are created with ``src.scoring.evaluate.evaluate_dataset`` + ``src.tracking.evaluation.log_evaluation`` so the
artifact formats stay in sync with what ``src.run`` logs, and summary files shaped like the
pipeline's (``key``, ``model``, ``strategy``, ``complete``, ``metrics``) name them. The
report tests share one per session: the ``store`` fixture of ``tests/report/conftest.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import mlflow

from src.data.schema import Record
from src.scoring.evaluate import InstanceOutput, evaluate_dataset
from src.tracking.evaluation import log_evaluation
from src.tracking.history import write_history
from src.tracking.keys import KEY_TAG
from tests.helpers.records import make_record

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


def study_records(task: str, dataset: str) -> list[Record]:
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
        records.append(make_record(f"{dataset}-{k}", text, wanted, doc_id=f"doc{k}"))
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
        # the run's key is its id here: unique, as a real key is per configuration, code and data
        tags = {"model": model, "strategy": strategy, KEY_TAG: run.info.run_id, **({"kind": kind} if kind else {})}
        mlflow.set_tags(tags)
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
            records = study_records(task, dataset)
            evaluation = evaluate_dataset(task, dataset, records, outputs_for(records, task, quality, dataset), 50, 13)
            log_evaluation(evaluation)
        mlflow.end_run(status=status)
    return run.info.run_id


class Store(NamedTuple):
    uri: str
    ids: dict[str, str]  # configuration -> run id
    summaries: Path


def write_summary(directory: Path, config: str, run_id: str, complete: bool = True, usage: dict | None = None) -> Path:
    """A summary file like the pipeline's: ``runs/{config}.json``, or ``finetuned/{model}.json``,
    naming the run by its key (its id in these stores); ``usage`` goes to its history file."""
    model, strategy = config.rsplit("-", 1)
    path = directory / ("finetuned" if strategy == "finetuned" else "runs") / f"{config}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "key": run_id,
        "run_name": config,
        "model": model,
        "strategy": strategy,
        "complete": complete,
        "metrics": {},
    }
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if usage is not None:
        write_history(path, {"key": run_id, "run_id": run_id, "usage": usage})  # a history carries its key
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
