"""Read the runs the pipeline's summaries name into tidy tables and per-instance statistics.

The analysis needs two things from every configuration's run: its logged metrics (for
the results tables, which must equal what MLflow shows) and its ``bootstrap/{task}/
{dataset}.json`` artifacts (per-instance sufficient statistics, for paired tests). Which
runs: exactly those the summary files name (:mod:`src.report.provenance`). Each
configuration keeps the instance ids it was scored on; a pair of configurations is
compared on the ids both share (``src.report.rq.comparison_sets``).

Where a configuration's evidence folder exists (``--evidence``: the DVC output of its stage,
:mod:`src.tracking.evidence`) the run is read from it instead of the store, so a clone that pulled the
study re-runs the analysis with an empty MLflow store; the folder must name the summary's run.
:func:`load_hand_runs` reads runs chosen by hand (ids, or an experiment's newest runs) instead.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from src.redact import redact_uris
from src.report.provenance import (
    Summary,
    check_data_versions,
    check_unique_configurations,
    fetch_runs,
    metrics_usage,
    read_summaries,
    run_name,
    sweep_usage,
    total_of_usages,
)
from src.scoring.metrics import MATCH_CLASSES
from src.study import DATASET_ORDER, FINETUNED, PRIMARY_METRIC, RUN_KINDS, STRATEGY_ORDER, TASK_ORDER
from src.tracking.evidence import folder_for_summary, read_evidence

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

    ``summary`` is the summary file (relative to the summaries folder) that named the run.
    """
    row: dict[str, Any] = {"config": run_name, "run_id": run_id, "start_time": start_time, "summary": summary}
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


def read_bootstrap_artifacts(client, run_id: str, destination: Path) -> dict[tuple[str, str], dict]:
    """Download a run's ``bootstrap/`` folder and parse every ``{task}/{dataset}.json`` in it."""
    return _read_artifact_folder(client, run_id, "bootstrap", "json", destination, json.loads)


def read_prediction_artifacts(client, run_id: str, destination: Path) -> dict[tuple[str, str], list[dict]]:
    """Download a run's ``predictions/`` folder and parse every ``{task}/{dataset}.jsonl`` in it."""

    def rows(text: str) -> list[dict]:
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    return _read_artifact_folder(client, run_id, "predictions", "jsonl", destination, rows)


def _read_artifact_folder(client, run_id: str, folder: str, suffix: str, destination: Path, parse) -> dict:
    if not client.list_artifacts(run_id, folder):
        return {}
    local = Path(client.download_artifacts(run_id, folder, str(destination)))
    out = {}
    for path in sorted(local.glob(f"*/*.{suffix}")):
        try:
            out[path.parent.name, path.name[: -len(suffix) - 1]] = parse(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"run {run_id}: {folder}/{path.parent.name}/{path.name}: {error}") from error
    return out


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
    for column in ("run_id", "summary", *RUN_PARAM_COLUMNS):
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
        where = {c: f"run {run_table.loc[c, 'run_id']} ({c}) bootstrap/{task}/{dataset}.json" for c in have}
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


def load_results(
    experiment: str,
    tracking_uri: str,
    summaries: Path | str = Path("summaries"),
    expected: Sequence[str] | None = None,
    evidence: Path | str | None = None,
) -> RunResults:
    """Read exactly the runs the summary files under ``summaries`` name: from the configuration's
    evidence folder under ``evidence`` where it exists, else fetched by id from the store.

    Raises:
        ValueError: one line, naming the summary file or evidence folder at fault: a missing, unfinished,
            foreign or non-configuration run, a folder of another run, two summaries for one run or
            configuration, or runs that disagree on the data version (:mod:`src.report.provenance`).
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per run floods the log
    listed = read_summaries(Path(summaries), expected)
    shown_uri = redact_uris(tracking_uri)  # what the report and its errors show: no credential
    folders = {s.name: folder_for_summary(evidence, s.name) for s in listed} if evidence is not None else {}
    pulled = {
        s.name: _checked_evidence(s, folders[s.name], experiment)
        for s in listed
        if s.name in folders and folders[s.name].is_dir()
    }
    stored = [s for s in listed if s.name not in pulled]
    experiment_id = ""
    by_summary: dict[str, tuple[Any, dict, dict]] = {}
    if stored:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ValueError(f"no MLflow experiment named {experiment!r} at {shown_uri}")
        experiment_id = found.experiment_id
        runs = fetch_runs(client, stored, experiment_id, experiment)
        with tempfile.TemporaryDirectory(prefix="tempgen-analysis-") as scratch:
            for summary, run in zip(stored, runs):
                by_summary[summary.name] = (run, *_download(client, run.info.run_id, Path(scratch)))
    for name, loaded in pulled.items():
        by_summary[name] = (_as_run(loaded.run), loaded.bootstrap, loaded.predictions)
    ordered = [by_summary[s.name] for s in listed]
    check_unique_configurations(listed, [run for run, _, _ in ordered])
    rows, metrics, artifacts, instances = [], {}, {}, {}
    for summary, (run, bootstrap, predictions) in zip(listed, ordered):
        name = run_name(run)
        rows.append(run_row(name, run.info.run_id, run.data.params, run.data.tags, run.info.start_time, summary.name))
        metrics[name] = dict(run.data.metrics)
        artifacts[name] = bootstrap
        instances.update({(name, task, dataset): rows_ for (task, dataset), rows_ in predictions.items()})
    check_data_versions(rows, {name: scored_keys(values) for name, values in metrics.items()})
    results = build_results(rows, metrics, artifacts, shown_uri, experiment, experiment_id)
    results.checked = True
    results.instances = instances
    results.usage = sweep_usage(listed)
    return results


def _download(client, run_id: str, scratch: Path) -> tuple[dict, dict]:
    """A stored run's bootstrap and predictions artifacts, parsed."""
    destination = scratch / run_id
    destination.mkdir()
    return read_bootstrap_artifacts(client, run_id, destination), read_prediction_artifacts(client, run_id, destination)


def _checked_evidence(summary: Summary, folder: Path, experiment: str):
    """The evidence folder of ``summary``, which must be the evidence of the very run it names."""
    loaded = read_evidence(folder)
    run = loaded.run
    where = f"evidence folder {folder}"
    if loaded.run_id != summary.run_id:
        raise ValueError(
            f"{where} holds run {loaded.run_id} ({run.get('run_name')}), but {summary.path} names run "
            f"{summary.run_id}: a folder of another run (remove it, or `dvc checkout` the pipeline's)"
        )
    if run.get("experiment") not in (None, experiment):
        raise ValueError(
            f"{where}: run {loaded.run_id} belongs to experiment {run.get('experiment')!r}, not {experiment!r}"
        )
    if run.get("kind") not in RUN_KINDS:
        raise ValueError(f"{where}: run {loaded.run_id} is not a configuration run (kind {run.get('kind')!r})")
    if run.get("complete") is False or summary.complete is False:
        raise ValueError(f"{where}: run {loaded.run_id}: the configuration is incomplete")
    for field_name, stated in (
        ("model", summary.model),
        ("strategy", summary.strategy),
        ("run_name", summary.run_name),
    ):
        if stated is not None and run.get(field_name) is not None and str(run[field_name]) != stated:
            raise ValueError(f"{where}: {summary.path} says {field_name} {stated!r}, the folder {run[field_name]!r}")
    return loaded


def _as_run(run: Mapping[str, Any]):
    """An evidence ``run.json`` shaped like an MLflow run (``info``, ``data``) for the shared checks."""
    from types import SimpleNamespace

    tags = {**{k: str(v) for k, v in (run.get("tags") or {}).items()}, "kind": str(run.get("kind"))}
    info = SimpleNamespace(run_id=run["run_id"], run_name=run.get("run_name"), start_time=0, status="FINISHED")
    data = SimpleNamespace(
        params={k: str(v) for k, v in (run.get("params") or {}).items()},
        tags=tags,
        metrics={k: float(v) for k, v in (run.get("metrics") or {}).items()},
    )
    return SimpleNamespace(info=info, data=data)


HAND_RUNS_NOTE = (
    "Hand runs: the configurations were chosen by hand ({how}), not by the pipeline's summary files; "
    "their provenance was not checked against a sweep."
)


def load_hand_runs(tracking_uri: str, experiment: str | None = None, run_ids: Sequence[str] = ()) -> RunResults:
    """Runs chosen by hand: ``run_ids`` (any experiment), else the newest FINISHED configuration run of
    each name in ``experiment``. The results are labelled (``checked`` False and a note).

    Raises:
        ValueError: one line: an unknown experiment or run, a run not FINISHED or not a configuration run,
            two of the given runs of one configuration, or nothing to analyse.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = MlflowClient(tracking_uri)
    shown_uri = redact_uris(tracking_uri)
    notes: list[str] = []
    if run_ids:
        runs = []
        for run_id in run_ids:
            try:
                run = client.get_run(run_id)
            except MlflowException:
                raise ValueError(f"run {run_id} not found at {shown_uri}") from None
            if run.info.status != "FINISHED" or run.data.tags.get("kind") not in RUN_KINDS:
                raise ValueError(
                    f"run {run_id} ({run_name(run)}) is {run.info.status} with kind {run.data.tags.get('kind')!r}: "
                    f"a FINISHED configuration run (kind one of {RUN_KINDS}) is needed"
                )
            runs.append(run)
        names = [run_name(run) for run in runs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"--runs names two runs of configuration(s) {', '.join(twice)}: keep one of each")
        experiment_ids = sorted({run.info.experiment_id for run in runs})
        experiment = experiment or ", ".join(client.get_experiment(i).name for i in experiment_ids)
        experiment_id = ", ".join(experiment_ids)
        how = "--runs " + ",".join(run_ids)
    else:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise ValueError(f"no MLflow experiment named {experiment!r} at {shown_uri}")
        experiment_id = found.experiment_id
        candidates = client.search_runs(
            [experiment_id], filter_string="attributes.status = 'FINISHED'", order_by=["attributes.start_time DESC"]
        )
        runs, older = [], {}
        for run in candidates:
            if run.data.tags.get("kind") not in RUN_KINDS:
                continue
            name = run_name(run)
            if any(run_name(kept) == name for kept in runs):
                older[name] = older.get(name, 0) + 1
            else:
                runs.append(run)
        if older:
            listed = ", ".join(f"{name} ({n})" for name, n in sorted(older.items()))
            notes.append(f"Older runs of the same configuration were left out, the newest kept: {listed}.")
        how = f"the newest run of each configuration in experiment {experiment!r}"
    rows, metrics, artifacts, instances = [], {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="tempgen-analysis-") as scratch:
        for run in runs:
            name = run_name(run)
            rows.append(run_row(name, run.info.run_id, run.data.params, run.data.tags, run.info.start_time))
            metrics[name] = dict(run.data.metrics)
            artifacts[name], predictions = _download(client, run.info.run_id, Path(scratch))
            instances.update({(name, task, dataset): rows_ for (task, dataset), rows_ in predictions.items()})
    results = build_results(rows, metrics, artifacts, shown_uri, str(experiment), experiment_id)
    results.notes = [HAND_RUNS_NOTE.format(how=how), *notes, *results.notes]
    results.checked = False
    results.instances = instances
    results.usage = total_of_usages([metrics_usage(values) for values in metrics.values()])
    return results
