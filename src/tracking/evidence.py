"""A configuration run's evidence: the files a DVC stage writes so the run travels with ``dvc push``.

The MLflow store is in no DVC remote, so everything the analysis needs from a run lives in one
folder per configuration too (``evidence/runs/{model}-{strategy}/``,
``evidence/finetuned/{model}/``), a cached DVC output beside the summary:

* ``run.json``: the run's key (:mod:`src.tracking.keys`), name, experiment, kind, model,
  strategy, params (strings, as MLflow keeps them), metrics and tags, without anything machine-
  or history-specific (no run id, commit, timings, owner pid/host, usage counters or tracking URI:
  those are in the stage's history file, :mod:`src.tracking.history`);
* ``predictions/{task}/{dataset}.jsonl.gz``: the predictions rows (the MLflow artifact's content);
* ``bootstrap/{task}/{dataset}.json.gz``: the bootstrap artifact (per-instance statistics).

Files are gzip with a zero mtime and sorted JSON keys, so the same run gives the same bytes
(DVC hashes). ``python -m src.evidence restore`` rebuilds MLflow runs from these folders; the
analysis reads them instead of the store (:mod:`src.report.loading`).
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from src.core.locate import PROJECT_ROOT
from src.tracking.keys import KEY_TAG
from src.tracking.run_tree import PROFILE_TAG, parent_tags
from src.tracking.store import default_experiment, start_experiment, tracking_uri

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
PREDICTIONS = "predictions"
BOOTSTRAP = "bootstrap"
#: Tags and metrics that describe the machine or the run's history, never the result.
MACHINE_TAGS = ("tempgen.pid", "tempgen.host", "tempgen.closed_as_stale", "checkpoint")
#: Tags naming other runs by id (their keys are kept instead).
RUN_ID_TAG = re.compile(r"^training_run\.")
MACHINE_METRIC = re.compile(
    r"(^wall_time_s$|latency_s$|(^|\.)usage\.|^concurrency_|_time_s$|_per_s$|runtime$|_per_second$|^total_flos$)"
)
#: A live run's artifacts a restore does not rebuild: history (what the run spent, planned and
#: found in the cache, which requests failed) or machine paths (the resolved config), docs/mlflow.md.
UNRESTORED_ARTIFACTS = ("usage.json", "plan.json", "served/", "failures/", "config/")
RESTORED_TAG = "tempgen.restored_from"  # on a restored run: the evidence folder it was rebuilt from


@dataclass
class Evidence:
    """One folder's content: ``run`` is ``run.json``; keys of the others are ``(task, dataset)``."""

    folder: Path
    run: dict[str, Any]
    bootstrap: dict[tuple[str, str], dict] = field(default_factory=dict)
    predictions: dict[tuple[str, str], list[dict]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.run.get("key") or "")


def _gzip_bytes(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def clean_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags worth keeping: MLflow's own (``mlflow.*``: user, source, parent), owner tags and
    tags naming other runs by id left out."""
    return {
        k: str(v)
        for k, v in sorted(tags.items())
        if not k.startswith("mlflow.") and k not in MACHINE_TAGS and not RUN_ID_TAG.match(k)
    }


def clean_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics that depend only on code, data and seed: timings and usage counters left out."""
    return {k: float(v) for k, v in sorted(metrics.items()) if not MACHINE_METRIC.search(k)}


def write_evidence(
    folder: Path | str,
    run: Mapping[str, Any],
    predictions: Mapping[tuple[str, str], list[dict]],
    bootstrap: Mapping[tuple[str, str], dict],
) -> Path:
    """Replace ``folder`` with ``run.json`` and the compressed per-dataset files (see the module doc)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / RUN_FILE).write_text(json.dumps(dict(run), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for (task, dataset), rows in sorted(predictions.items()):
        path = folder / PREDICTIONS / task / f"{dataset}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_gzip_bytes("".join(_dumps(row) + "\n" for row in rows)))
    for (task, dataset), artifact in sorted(bootstrap.items()):
        path = folder / BOOTSTRAP / task / f"{dataset}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_gzip_bytes(_dumps(artifact)))
    return folder


def _read_gzip(path: Path) -> str:
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a readable gzip file ({error})") from None


def read_run(folder: Path | str) -> dict[str, Any]:
    """``run.json`` of ``folder``, checked to name a run (one-line ValueError naming the folder)."""
    path = Path(folder) / RUN_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"evidence folder {folder}: no {RUN_FILE}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("key"), str) or not data["key"]:
        raise ValueError(f"{path}: no 'key' (the run's key; written by this version's stages: `dvc repro` again)")
    for key in ("params", "metrics", "tags"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"{path}: '{key}' is not a mapping")
    return data


def read_evidence(folder: Path | str, predictions: bool = True) -> Evidence:
    """Everything in ``folder``: ``run.json``, the bootstrap artifacts and (optionally) the predictions."""
    folder = Path(folder)
    out = Evidence(folder, read_run(folder))
    for path in sorted((folder / BOOTSTRAP).glob("*/*.json.gz")):
        try:
            out.bootstrap[path.parent.name, path.name[: -len(".json.gz")]] = json.loads(_read_gzip(path))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not JSON ({error})") from None
    if predictions:
        for path in sorted((folder / PREDICTIONS).glob("*/*.jsonl.gz")):
            try:
                rows = [json.loads(line) for line in _read_gzip(path).splitlines() if line.strip()]
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not JSON lines ({error})") from None
            out.predictions[path.parent.name, path.name[: -len(".jsonl.gz")]] = rows
    return out


def evidence_folders(root: Path | str) -> list[Path]:
    """Every folder under ``root`` holding a ``run.json``, sorted."""
    return sorted(path.parent for path in Path(root).glob(f"**/{RUN_FILE}"))


def folder_for_summary(root: Path | str, summary_name: str) -> Path:
    """The evidence folder of a summary: its path relative to the summaries folder, without ``.json``
    (``runs/m-I.json`` -> ``ROOT/runs/m-I``), as ``dvc.yaml`` names both."""
    name = summary_name[: -len(".json")] if summary_name.endswith(".json") else summary_name
    return Path(root) / name


def restore_runs(
    root: Path | str, experiment: str | None = None, uri: str | None = None
) -> tuple[list[str], list[str]]:
    """Rebuild in the store the runs of every evidence folder under ``root`` (:mod:`src.tracking.evidence`).

    Each becomes a run with the original name, params, metrics (a training's with its history,
    step by step), tags and artifacts (a configuration's ``predictions/`` and ``bootstrap/``; the
    files a training or an analysis named), nested under its profile's parent run where the
    original was, FINISHED (FAILED when the folder says the run was incomplete). A folder whose
    run is already there (its key, :data:`~src.tracking.keys.KEY_TAG`, in the target experiment)
    is skipped, so a second call adds nothing; no other run is read or changed.
    ``experiment`` defaults to each folder's own. Returns (new run ids, skipped keys).
    """
    from mlflow.tracking import MlflowClient

    folders = evidence_folders(root)
    if not folders:
        raise ValueError(f"no evidence folder (*/run.json) under {root} (`dvc pull` first)")
    resolved = tracking_uri(uri)
    client = MlflowClient(resolved)
    created, skipped = [], []
    experiments: dict[str, str] = {}
    for folder in folders:
        evidence = read_evidence(folder)
        run = evidence.run
        name = experiment or str(run.get("experiment") or default_experiment())
        if name not in experiments:
            experiments[name] = start_experiment(name, resolved)
        found = client.search_runs(
            [experiments[name]], filter_string=f"tags.`{KEY_TAG}` = '{evidence.key}'", max_results=1
        )
        if found:
            skipped.append(evidence.key)
            continue
        created.append(_restore_one(client, experiments[name], evidence))
        log.info("restored %s (key %s) as run %s", run.get("run_name"), evidence.key, created[-1])
    return created, skipped


def _restore_one(client: Any, experiment_id: str, evidence: Evidence) -> str:
    """One evidence folder as a new run of ``experiment_id``; never left RUNNING (deleted on a failure)."""
    from mlflow.entities import Metric, Param, RunTag

    run = evidence.run
    tags = {**{k: str(v) for k, v in run.get("tags", {}).items()}, KEY_TAG: evidence.key}
    tags["kind"] = str(run.get("kind") or tags.get("kind"))
    tags[RESTORED_TAG] = evidence.folder.as_posix()
    tags.update(parent_tags(client, experiment_id, tags.get(PROFILE_TAG)))  # nested as in the original
    new = client.create_run(experiment_id, tags=tags, run_name=str(run.get("run_name") or evidence.key))
    run_id = new.info.run_id
    try:
        params = [Param(k, str(v)) for k, v in sorted(run.get("params", {}).items())]
        metrics = [Metric(k, float(v), 0, 0) for k, v in sorted(run.get("metrics", {}).items())]
        for key, points in sorted((run.get("history") or {}).items()):  # a point per log: the timestamp
            metrics += [Metric(key, float(value), n, int(step)) for n, (step, value) in enumerate(points)]
        for start in range(0, max(len(params), len(metrics)), 100):  # MLflow's batch limits
            client.log_batch(run_id, metrics=metrics[start : start + 100], params=params[start : start + 100])
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        for (task, dataset), rows in sorted(evidence.predictions.items()):
            text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
            client.log_text(run_id, text, f"predictions/{task}/{dataset}.jsonl")
        for (task, dataset), artifact in sorted(evidence.bootstrap.items()):
            client.log_text(
                run_id, json.dumps(artifact, ensure_ascii=False, indent=1), f"bootstrap/{task}/{dataset}.json"
            )
        for source, destination in run.get("artifacts") or []:
            _log_artifact(client, run_id, evidence.folder, source, destination)
        client.set_terminated(run_id, status="FAILED" if run.get("complete") is False else "FINISHED")
    except BaseException:
        client.set_terminated(run_id, status="FAILED")  # never left RUNNING; a rerun retries the folder
        client.delete_run(run_id)
        raise
    return run_id


def _log_artifact(client: Any, run_id: str, folder: Path, source: str, destination: str) -> None:
    """A file or folder a run.json names (relative to the project: a DVC output the stage wrote or
    read) logged where the original run logged it (``destination``: its artifact folder, "" the
    root, or a file's artifact path when it has a suffix: the file logged under that name)."""
    path = PROJECT_ROOT / source
    if not path.exists():
        raise ValueError(f"{folder / RUN_FILE}: names artifact {source}, which is not here (`dvc pull` it)")
    if path.is_file() and Path(destination).suffix:
        client.log_text(run_id, path.read_text(encoding="utf-8"), destination)
    elif path.is_dir():
        client.log_artifacts(run_id, str(path), destination or None)
    else:
        client.log_artifact(run_id, str(path), destination or None)
