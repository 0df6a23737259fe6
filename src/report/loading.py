"""Read the runs the pipeline's summaries name into tidy tables and per-instance statistics.

The analysis needs two things from every configuration's run: its logged metrics (for
the results tables, which must equal what MLflow shows) and its ``bootstrap/{task}/
{dataset}.json`` artifacts (per-instance sufficient statistics, for paired tests). Which
runs: exactly those the summary files name (:mod:`src.report.provenance`). Each
configuration keeps the instance ids it was scored on; a pair of configurations is
compared on the ids both share (``src.report.comparisons.comparison_sets``).

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
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from src.redact import redact_uris
from src.report.provenance import (
    Summary,
    check_data_versions,
    check_summary_metrics,
    check_unique_configurations,
    fetch_runs,
    metrics_usage,
    read_summaries,
    rewriting_usage,
    run_name,
    sweep_usage,
    total_of_usages,
)
from src.report.results import RunResults, build_results, run_row, scored_keys
from src.study import RUN_KINDS
from src.tracking.evidence import folder_for_summary, read_evidence
from src.tracking.history import HISTORY, read_history
from src.tracking.keys import KEY_TAG


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
        row = run_row(name, run.info.run_id, run.data.params, run.data.tags, run.info.start_time, summary.name)
        history = read_history(summary.path, summary.key)  # this machine's record of the run (none if pulled)
        row["run_id"] = row["run_id"] or str(history.get("run_id") or "")
        row["git_commit"] = row["git_commit"] or history.get("git_commit")
        rows.append(row)
        metrics[name] = dict(run.data.metrics)
        artifacts[name] = bootstrap
        instances.update({(name, task, dataset): rows_ for (task, dataset), rows_ in predictions.items()})
    check_data_versions(rows, {name: scored_keys(values) for name, values in metrics.items()})
    results = build_results(rows, metrics, artifacts, shown_uri, experiment, experiment_id)
    results.checked = True
    results.instances = instances
    results.usage = sweep_usage(listed)
    results.rewriting_usage = rewriting_usage(Path(summaries).parent / HISTORY / "derive")
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
    if loaded.key != summary.key:
        raise ValueError(
            f"{where} holds run {loaded.key} ({run.get('run_name')}), but {summary.path} names run "
            f"{summary.key}: a folder of another run (remove it, or `dvc checkout` the pipeline's)"
        )
    if run.get("experiment") not in (None, experiment):
        raise ValueError(
            f"{where}: run {loaded.key} belongs to experiment {run.get('experiment')!r}, not {experiment!r}"
        )
    if run.get("kind") not in RUN_KINDS:
        raise ValueError(f"{where}: run {loaded.key} is not a configuration run (kind {run.get('kind')!r})")
    if run.get("complete") is False or summary.complete is False:
        raise ValueError(f"{where}: run {loaded.key}: the configuration is incomplete")
    check_summary_metrics(summary, run.get("metrics") or {}, f"{loaded.key} of {where}")
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

    tags = {
        **{k: str(v) for k, v in (run.get("tags") or {}).items()},
        "kind": str(run.get("kind")),
        KEY_TAG: str(run["key"]),
    }
    info = SimpleNamespace(run_id="", run_name=run.get("run_name"), start_time=0, status="FINISHED")
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
