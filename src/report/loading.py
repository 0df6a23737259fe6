"""Read an experiment's MLflow runs into tidy tables and stacked per-instance statistics.

The analysis needs two things from every configuration's run: its logged metrics (for
the results tables, which must equal what MLflow shows) and its ``bootstrap/{task}/
{dataset}.json`` artifacts (per-instance sufficient statistics, for paired tests).
Configurations scored on the same dataset are stacked into one (S, N, 3) array over the
instance ids they all share, so that one resample matrix serves every pair.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

STRATEGY_ORDER = ("I", "D", "A", "D+I", "A+I", "A+D", "A+D+I", "finetuned")
TASK_ORDER = ("timex", "eventx", "comp")
DATASET_ORDER = ("base", "adv", "adv_p", "t2c", "voc", "len")
KINDS = ("prompted", "finetuned")  # the ``kind`` tag of configuration runs (src.run, src.finetune.evaluate)
ERROR_COLUMNS = ("missing", "spurious", "boundary", "exact")
RUN_PARAM_COLUMNS = (
    "model", "model_id", "family", "architecture", "params_total_b", "params_active_b", "strategy",
    "inductive_plus", "size_series", "seed", "limit", "git_commit", "data_version",
)


@dataclass
class DatasetStats:
    """Per-instance statistics of every configuration scored on one (task, dataset).

    Attributes:
        configs: configuration (run) names, in the order of the first axis.
        ids: instance ids shared by all configurations (the second axis).
        stats: (S, N, 3) word-LCS ``(matched, n_pred, n_gold)``.
        errors: error type -> (S, N) counts.
        dropped: configuration -> number of its instances outside ``ids`` (left out).
    """

    task: str
    dataset: str
    configs: list[str]
    ids: list[str]
    stats: np.ndarray
    errors: dict[str, np.ndarray] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.dataset}"


@dataclass
class Study:
    """Everything the analysis reads from one experiment.

    Attributes:
        runs: one row per configuration (index: run name) with its params, tags and run id.
        scores: one row per (config, task, dataset) with the logged metrics as columns.
        datasets: ``"task/dataset"`` -> stacked statistics.
        notes: facts about the input worth stating in the report (dropped instances, gaps).
    """

    runs: pd.DataFrame
    scores: pd.DataFrame
    datasets: dict[str, DatasetStats]
    tracking_uri: str
    experiment_name: str
    experiment_id: str
    notes: list[str] = field(default_factory=list)


def ordered_keys(keys) -> list[str]:
    """``task/dataset`` keys in the study's order (tasks, then base before generalization sets)."""

    def rank(key: str) -> tuple:
        task, dataset = key.split("/", 1)
        return (
            TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER), task,
            DATASET_ORDER.index(dataset) if dataset in DATASET_ORDER else len(DATASET_ORDER), dataset,
        )

    return sorted(set(keys), key=rank)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _as_bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def config_sort_key(kind: str, model: str, strategy: str) -> tuple:
    """Prompted before fine-tuned, then model name, then the study's strategy order."""
    rank = STRATEGY_ORDER.index(strategy) if strategy in STRATEGY_ORDER else len(STRATEGY_ORDER)
    return (kind != "prompted", model, rank, strategy)


def run_row(run_name: str, run_id: str, params: Mapping[str, str], tags: Mapping[str, str], start_time: int) -> dict:
    """One configuration's row: params first, tags where a param is absent, typed values."""
    row: dict[str, Any] = {"config": run_name, "run_id": run_id, "start_time": start_time}
    for column in RUN_PARAM_COLUMNS:
        row[column] = params.get(column, tags.get(column))
    row["kind"] = tags.get("kind") or ("finetuned" if row["strategy"] == "finetuned" else "prompted")
    row["model"] = row["model"] or tags.get("model") or run_name
    row["strategy"] = row["strategy"] or tags.get("strategy") or ""
    row["params_total_b"] = _as_float(row["params_total_b"])
    row["params_active_b"] = _as_float(row["params_active_b"])
    row["inductive_plus"] = _as_bool(row["inductive_plus"])
    if row["size_series"] in (None, "", "None", "null"):
        row["size_series"] = None
    return row


def metric_rows(config: str, metrics: Mapping[str, float]) -> list[dict]:
    """Tidy rows ``{config, task, dataset, <metric>: value}`` from flat ``task.dataset.metric`` keys.

    A (task, dataset) is one with an ``f1`` metric; usage and request counters are left out.
    """
    pairs = sorted({tuple(key.split(".")[:2]) for key in metrics if key.count(".") == 2 and key.endswith(".f1")})
    rows = []
    for task, dataset in pairs:
        prefix = f"{task}.{dataset}."
        row: dict[str, Any] = {"config": config, "task": task, "dataset": dataset}
        for key, value in metrics.items():
            if key.startswith(prefix) and not key.startswith(prefix + "usage."):
                row[key[len(prefix):]] = float(value)
        rows.append(row)
    return rows


def _check_artifact(artifact: Mapping[str, Any], where: str) -> tuple[list[str], np.ndarray]:
    ids = artifact.get("ids")
    stats = (artifact.get("stats") or {}).get("lcs")
    if not isinstance(ids, list) or stats is None:
        raise ValueError(f"{where}: a bootstrap artifact needs 'ids' and 'stats.lcs'")
    array = np.asarray(stats, dtype=np.float64).reshape(-1, 3)
    if array.shape[0] != len(ids):
        raise ValueError(f"{where}: {len(ids)} ids but {array.shape[0]} rows of statistics")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: duplicated instance ids")
    return [str(i) for i in ids], array


def stack_dataset(
    task: str, dataset: str, artifacts: Mapping[str, Mapping[str, Any]], where: Mapping[str, str] | None = None
) -> DatasetStats:
    """Stack configurations' bootstrap artifacts over the instance ids they all share.

    Args:
        artifacts: configuration -> parsed ``bootstrap/{task}/{dataset}.json``.
        where: configuration -> a description of the artifact's origin, for error messages.

    Raises:
        ValueError: an artifact is malformed (naming it).
    """
    where = where or {}
    configs = list(artifacts)
    checked = {c: _check_artifact(artifacts[c], where.get(c, f"{c}:{task}/{dataset}")) for c in configs}
    shared = set.intersection(*(set(ids) for ids, _ in checked.values())) if configs else set()
    ids = [i for i in checked[configs[0]][0] if i in shared] if configs else []
    stats = np.zeros((len(configs), len(ids), 3))
    errors = {name: np.zeros((len(configs), len(ids))) for name in ERROR_COLUMNS}
    dropped = {}
    for s, config in enumerate(configs):
        config_ids, array = checked[config]
        position = {instance: n for n, instance in enumerate(config_ids)}
        order = np.array([position[i] for i in ids], dtype=np.int64)
        stats[s] = array[order] if ids else stats[s]
        for name in ERROR_COLUMNS:
            values = (artifacts[config].get("errors") or {}).get(name)
            if values is not None and ids:
                errors[name][s] = np.asarray(values, dtype=np.float64)[order]
        dropped[config] = len(config_ids) - len(ids)
    return DatasetStats(task, dataset, configs, ids, stats, errors, dropped)


def latest_finished_runs(client, experiment_id: str) -> list:
    """The most recent FINISHED run of every run name in the experiment."""
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string="attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"], max_results=1000, page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    latest: dict[str, Any] = {}
    for run in runs:
        name = run.info.run_name or run.data.tags.get("mlflow.runName") or run.info.run_id
        if name not in latest or run.info.start_time > latest[name].info.start_time:
            latest[name] = run
    return list(latest.values())


def read_bootstrap_artifacts(client, run_id: str, destination: Path) -> dict[tuple[str, str], dict]:
    """Download a run's ``bootstrap/`` folder and parse every ``{task}/{dataset}.json`` in it."""
    if not client.list_artifacts(run_id, "bootstrap"):
        return {}
    local = Path(client.download_artifacts(run_id, "bootstrap", str(destination)))
    out = {}
    for path in sorted(local.glob("*/*.json")):
        try:
            out[path.parent.name, path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"run {run_id}: bootstrap/{path.parent.name}/{path.name}: {error}") from error
    return out


def _sorted_runs(runs: pd.DataFrame) -> pd.DataFrame:
    keys = [config_sort_key(r.kind, str(r.model), str(r.strategy)) for r in runs.itertuples()]
    order = sorted(range(len(runs)), key=lambda n: keys[n])
    return runs.iloc[order].set_index("config")


def build_study(
    runs: list[dict],
    metrics: Mapping[str, Mapping[str, float]],
    artifacts: Mapping[str, Mapping[tuple[str, str], dict]],
    tracking_uri: str = "",
    experiment_name: str = "",
    experiment_id: str = "",
) -> Study:
    """Assemble a :class:`Study` from run rows, their metrics and their bootstrap artifacts."""
    if not runs:
        raise ValueError(f"experiment {experiment_name!r} at {tracking_uri} has no FINISHED runs to analyse")
    frame = pd.DataFrame(runs)
    for column in ("run_id", *RUN_PARAM_COLUMNS):
        if column not in frame.columns:
            frame[column] = None
    if "kind" not in frame.columns:
        frame["kind"] = "prompted"
    run_table = _sorted_runs(frame)
    configs = list(run_table.index)
    score_rows = [row for config in configs for row in metric_rows(config, metrics.get(config, {}))]
    scores = pd.DataFrame(score_rows)
    if scores.empty:
        scores = pd.DataFrame(columns=["config", "task", "dataset", "f1"])
    notes = []
    present = {f"{t}/{d}" for config in configs for t, d in artifacts.get(config, {})}
    pairs = [tuple(key.split("/", 1)) for key in ordered_keys(present)]
    datasets = {}
    for task, dataset in pairs:
        have = {c: artifacts[c][task, dataset] for c in configs if (task, dataset) in artifacts.get(c, {})}
        where = {c: f"run {run_table.loc[c, 'run_id']} ({c}) bootstrap/{task}/{dataset}.json" for c in have}
        stacked = stack_dataset(task, dataset, have, where)
        if not stacked.ids:
            notes.append(f"{task}/{dataset}: the configurations share no instance id, so no paired test is run on it.")
            continue
        left_out = {c: n for c, n in stacked.dropped.items() if n}
        if left_out:
            listed = ", ".join(f"{c} ({n})" for c, n in left_out.items())
            notes.append(
                f"{task}/{dataset}: paired tests use the {len(stacked.ids)} instances all {len(have)} configurations "
                f"share; left out: {listed}."
            )
        datasets[stacked.key] = stacked
    missing = [c for c in configs if not artifacts.get(c)]
    if missing:
        notes.append("No bootstrap artifacts (left out of the significance tests): " + ", ".join(missing) + ".")
    return Study(run_table, scores, datasets, tracking_uri, experiment_name, experiment_id, notes)


def load_study(experiment: str, tracking_uri: str) -> Study:
    """Read the latest FINISHED configuration run per run name of ``experiment`` from the tracking store.

    Runs without a ``kind`` tag (e.g. training runs logged to the same experiment) are
    skipped and listed in the study's notes.
    """
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per run floods the log
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no MLflow experiment named {experiment!r} at {tracking_uri}")
    latest = latest_finished_runs(client, found.experiment_id)
    runs = [r for r in latest if r.data.tags.get("kind") in KINDS]
    skipped = sorted(r.info.run_name or r.info.run_id for r in latest if r.data.tags.get("kind") not in KINDS)
    rows, metrics, artifacts = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="tempgen-analysis-") as scratch:
        for run in runs:
            name = run.info.run_name or run.info.run_id
            rows.append(run_row(name, run.info.run_id, run.data.params, run.data.tags, run.info.start_time))
            metrics[name] = dict(run.data.metrics)
            destination = Path(scratch) / run.info.run_id
            destination.mkdir()
            artifacts[name] = read_bootstrap_artifacts(client, run.info.run_id, destination)
    study = build_study(rows, metrics, artifacts, tracking_uri, experiment, found.experiment_id)
    if skipped:
        study.notes.append(
            f"Skipped {len(skipped)} FINISHED run(s) without a `kind` tag of {KINDS} (not configuration runs): "
            + ", ".join(skipped) + "."
        )
    return study
