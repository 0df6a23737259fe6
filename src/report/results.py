"""The study's results as tables: one row per configuration's run (its params), its metrics,
and per dataset the instance statistics the paired tests resample (:class:`DatasetStats`).

:mod:`src.report.loading` reads them from MLflow or from the evidence folders; the analysis
reads them from here. A pair of configurations is compared on the ids both share
(:func:`src.report.comparisons.comparison_sets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from src.redact import redact_uris
from src.scoring.metrics import MATCH_CLASSES
from src.study import DATASET_ORDER, FINETUNED, PRIMARY_METRIC, STRATEGY_ORDER, TASK_ORDER
from src.tracking.keys import KEY_TAG

#: Strategies in table order, fine-tuned configurations last.
CONFIG_STRATEGY_ORDER = (*STRATEGY_ORDER, FINETUNED)


RUN_PARAM_COLUMNS = (
    "model",
    "model_id",
    "family",
    "architecture",
    "params_total_b",
    "params_active_b",
    "strategy",
    "inductive_plus",
    "size_series",
    "seed",
    "warn_rate",
    "limit",
    "git_commit",
    "data_version",
    "code_version",
)


@dataclass
class DatasetStats:
    """Per-instance statistics of every configuration scored on one (task, dataset).

    Each configuration keeps its own instances: configurations need not share them all.

    Attributes:
        configs: configuration (run) names, in the study's order.
        ids: configuration -> its instance ids (artifact order).
        stats: configuration -> (N_c, 3) word-LCS ``(matched, n_pred, n_gold)`` per instance.
        errors: configuration -> error type -> (N_c,) counts.
    """

    task: str
    dataset: str
    configs: list[str]
    ids: dict[str, list[str]]
    stats: dict[str, np.ndarray]
    errors: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.dataset}"

    def subset(self, configs: Sequence[str]) -> DatasetStats:
        """The same dataset restricted to ``configs`` (kept in this object's order)."""
        keep = [c for c in self.configs if c in set(configs)]
        return DatasetStats(
            self.task,
            self.dataset,
            keep,
            {c: self.ids[c] for c in keep},
            {c: self.stats[c] for c in keep},
            {c: self.errors.get(c, {}) for c in keep},
        )

    def stacked(self, configs: Sequence[str], ids: Sequence[str]) -> np.ndarray:
        """(S, N, 3) statistics of ``configs`` on ``ids`` (every configuration must have every id)."""
        out = np.empty((len(configs), len(ids), 3))
        for s, config in enumerate(configs):
            position = {instance: n for n, instance in enumerate(self.ids[config])}
            out[s] = self.stats[config][np.array([position[i] for i in ids], dtype=np.int64)].reshape(len(ids), 3)
        return out

    def instance_groups(self) -> list[tuple[int, list[str]]]:
        """(number of instances, configurations scored on exactly that id set), largest first."""
        groups: dict[frozenset, list[str]] = {}
        for config in self.configs:
            groups.setdefault(frozenset(self.ids[config]), []).append(config)
        return sorted(((len(ids), members) for ids, members in groups.items()), key=lambda g: (-g[0], g[1]))


@dataclass
class RunResults:
    """Everything the analysis reads from one experiment.

    Attributes:
        runs: one row per configuration (index: run name) with its params, tags, run id and summary file.
        scores: one row per (config, task, dataset) with the logged metrics as columns.
        datasets: ``"task/dataset"`` -> per-configuration statistics.
        notes: facts about the input worth stating in the report (differing instance sets, gaps).
        checked: the runs were read through summaries and their provenance checked (:func:`load_results`).
        instances: ``(config, task, dataset)`` -> the predictions rows (gold, predictions, raw output...).
        usage: requests, tokens and cost summed over the summaries (:func:`sweep_usage`); empty if none reported.
        rewriting_usage: the same for the paid rewriting stages (``history/derive``, :func:`rewriting_usage`).
    """

    runs: pd.DataFrame
    scores: pd.DataFrame
    datasets: dict[str, DatasetStats]
    tracking_uri: str
    experiment_name: str
    experiment_id: str
    notes: list[str] = field(default_factory=list)
    checked: bool = False
    instances: dict[tuple[str, str, str], list[dict]] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    rewriting_usage: dict[str, float] = field(default_factory=dict)


def ordered_keys(keys) -> list[str]:
    """``task/dataset`` keys in the study's order (tasks, then base before generalization sets)."""

    def rank(key: str) -> tuple:
        task, dataset = key.split("/", 1)
        return (
            TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER),
            task,
            DATASET_ORDER.index(dataset) if dataset in DATASET_ORDER else len(DATASET_ORDER),
            dataset,
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
    order = CONFIG_STRATEGY_ORDER
    rank = order.index(strategy) if strategy in order else len(order)
    return (kind != "prompted", model, rank, strategy)


def run_row(
    run_name: str,
    run_id: str,
    params: Mapping[str, str],
    tags: Mapping[str, str],
    start_time: int,
    summary: str | None = None,
) -> dict:
    """One configuration's row: params first, tags where a param is absent, typed values.

    ``summary`` is the summary file (relative to the summaries folder) that named the run;
    ``run_id`` is empty where this machine did not log the run (a pulled study read from evidence).
    """
    row: dict[str, Any] = {
        "config": run_name,
        "run_id": run_id,
        "key": tags.get(KEY_TAG, ""),
        "start_time": start_time,
        "summary": summary,
    }
    for column in RUN_PARAM_COLUMNS:
        row[column] = params.get(column, tags.get(column))
    row["kind"] = tags.get("kind") or ("finetuned" if row["strategy"] == "finetuned" else "prompted")
    row["model"] = row["model"] or tags.get("model") or run_name
    row["strategy"] = row["strategy"] or tags.get("strategy") or ""
    row["params_total_b"] = _as_float(row["params_total_b"])
    row["params_active_b"] = _as_float(row["params_active_b"])
    row["warn_rate"] = _as_float(row["warn_rate"])
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
                row[key[len(prefix) :]] = float(value)
        rows.append(row)
    return rows


def _check_artifact(artifact: Mapping[str, Any], where: str) -> tuple[list[str], np.ndarray]:
    ids = artifact.get("ids")
    stats = (artifact.get("stats") or {}).get(PRIMARY_METRIC)
    if not isinstance(ids, list) or stats is None:
        raise ValueError(f"{where}: a bootstrap artifact needs 'ids' and 'stats.{PRIMARY_METRIC}'")
    array = np.asarray(stats, dtype=np.float64).reshape(-1, 3)
    if array.shape[0] != len(ids):
        raise ValueError(f"{where}: {len(ids)} ids but {array.shape[0]} rows of statistics")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: duplicated instance ids")
    return [str(i) for i in ids], array


def dataset_stats(
    task: str, dataset: str, artifacts: Mapping[str, Mapping[str, Any]], where: Mapping[str, str] | None = None
) -> DatasetStats:
    """Every configuration's bootstrap artifact of one dataset, checked, each on its own instances.

    Args:
        artifacts: configuration -> parsed ``bootstrap/{task}/{dataset}.json``.
        where: configuration -> a description of the artifact's origin, for error messages.

    Raises:
        ValueError: an artifact is malformed (naming it).
    """
    where = where or {}
    configs = list(artifacts)
    ids, stats, errors = {}, {}, {}
    for config in configs:
        origin = where.get(config, f"{config}:{task}/{dataset}")
        ids[config], stats[config] = _check_artifact(artifacts[config], origin)
        errors[config] = {}
        for name in MATCH_CLASSES:
            values = (artifacts[config].get("errors") or {}).get(name)
            if values is not None:
                values = np.asarray(values, dtype=np.float64).reshape(-1)
                if values.size != len(ids[config]):
                    raise ValueError(f"{origin}: {len(ids[config])} ids but {values.size} '{name}' error counts")
                errors[config][name] = values
    return DatasetStats(task, dataset, configs, ids, stats, errors)


def _sorted_runs(runs: pd.DataFrame) -> pd.DataFrame:
    keys = [config_sort_key(r.kind, str(r.model), str(r.strategy)) for r in runs.itertuples()]
    order = sorted(range(len(runs)), key=lambda n: keys[n])
    return runs.iloc[order].set_index("config")


def _instance_note(data: DatasetStats) -> str | None:
    """A note when a dataset's configurations were scored on different instance sets."""
    groups = data.instance_groups()
    if len(groups) < 2:
        return None
    listed = "; ".join(f"{len(members)} on {n} ({', '.join(members)})" for n, members in groups)
    return (
        f"{data.key}: the configurations were scored on {len(groups)} different instance sets ({listed}); "
        "each pair is compared on the instances both were scored on."
    )


def build_results(
    runs: list[dict],
    metrics: Mapping[str, Mapping[str, float]],
    artifacts: Mapping[str, Mapping[tuple[str, str], dict]],
    tracking_uri: str = "",
    experiment_name: str = "",
    experiment_id: str = "",
) -> RunResults:
    """Assemble a :class:`RunResults` from run rows, their metrics and their bootstrap artifacts."""
    if not runs:
        raise ValueError(
            f"experiment {experiment_name!r} at {redact_uris(tracking_uri)}: no configuration run to analyse"
        )
    frame = pd.DataFrame(runs)
    for column in ("run_id", "key", "summary", *RUN_PARAM_COLUMNS):
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
    datasets = {}
    for key in ordered_keys(present):
        task, dataset = key.split("/", 1)
        have = {c: artifacts[c][task, dataset] for c in configs if (task, dataset) in artifacts.get(c, {})}
        where = {
            c: f"run {run_table.loc[c, 'key'] or run_table.loc[c, 'run_id']} ({c}) bootstrap/{task}/{dataset}.json"
            for c in have
        }
        data = dataset_stats(task, dataset, have, where)
        note = _instance_note(data)
        if note:
            notes.append(note)
        datasets[key] = data
    missing = [c for c in configs if not artifacts.get(c)]
    if missing:
        notes.append("No bootstrap artifacts (left out of the significance tests): " + ", ".join(missing) + ".")
    return RunResults(run_table, scores, datasets, tracking_uri, experiment_name, experiment_id, notes)


def scored_keys(metrics: Mapping[str, float]) -> set[str]:
    """The ``task/dataset`` keys a run logged an F1 for."""
    return {f"{row['task']}/{row['dataset']}" for row in metric_rows("", metrics)}
