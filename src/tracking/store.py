"""MLflow conventions shared by prompted and fine-tuned configurations.

One run per configuration, metrics named ``{task}.{dataset}.{metric}``, artifacts under
``predictions/`` and ``bootstrap/``; the tracking store is ``$MLFLOW_TRACKING_URI`` when
set, else a SQLite store inside the project's ``mlruns/`` folder.

Several processes may start on a fresh store at once (a Hydra multirun, parallel DVC stages):
MLflow creates and migrates a SQLite schema on first use without any locking, so that first
use and the experiment's get-or-create run under an inter-process file lock. Runs carry their
owner's pid and host (:func:`run_owner_tags`) so that :func:`close_stale_runs` can tell a run
left RUNNING by a killed process from one still going. :class:`RedactHydraOutputs` keeps
secrets out of Hydra's own ``.hydra/`` copies of the config, which MLflow redaction never sees.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from filelock import FileLock

from src.core.digest import digest, files_digest
from src.core.locate import PROJECT_ROOT
from src.core.settings import config_default
from src.redact import (
    REDACTED as REDACTED,  # re-exported: callers and tests name it here
    SECRET_KEY_PATTERN,
    redact_uris,
    scrub,
)

logger = logging.getLogger(__name__)


LOCAL_STORE = PROJECT_ROOT / "mlruns"
API_KEY_VARIABLES = ("OPENROUTER_API_KEY", "OPENAI_API_KEY")
PID_TAG = "tempgen.pid"
HOST_TAG = "tempgen.host"
STORE_LOCK_TIMEOUT_S = 600.0
MIN_SECRET_LENGTH = 4  # shorter "secrets" would redact ordinary words


def default_experiment() -> str:
    """The MLflow experiment every run logs to: ``mlflow.experiment`` of ``conf/config.yaml``,
    its one definition (prompted runs compose it; fine-tuning, evaluation and analysis read it here)."""
    return str(config_default("mlflow.experiment"))


def tracking_uri(explicit: str | None = None) -> str:
    """The tracking URI: explicit config, else the environment, else the local SQLite store.

    A server URI with a credential in it (``http://alice:TOKEN@host:5000``) comes back without
    it, the credential moved to MLflow's own basic-auth variables (:func:`credential_out_of_uri`).
    """
    if explicit:
        return credential_out_of_uri(explicit)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return credential_out_of_uri(os.environ["MLFLOW_TRACKING_URI"])
    LOCAL_STORE.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{LOCAL_STORE / 'mlflow.db'}"


def credential_out_of_uri(uri: str) -> str:
    """``uri`` without its user-info; for an http(s) store the user and password go to
    ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (unless set), which MLflow sends
    as basic auth. MLflow prints and stores its tracking URI (the "View run at" line, run links):
    the credential must not be part of it."""
    if not uri.lower().startswith(("http://", "https://")):
        return uri  # a database URI needs its password in the URI (SQLAlchemy reads it there)
    clean = redact_uris(uri)
    if clean == uri:
        return uri
    parts = urlsplit(uri)
    if parts.username is not None and not os.environ.get("MLFLOW_TRACKING_USERNAME"):
        os.environ["MLFLOW_TRACKING_USERNAME"] = unquote(parts.username)
    if parts.password is not None and not os.environ.get("MLFLOW_TRACKING_PASSWORD"):
        os.environ["MLFLOW_TRACKING_PASSWORD"] = unquote(parts.password)
    return clean


def store_lock_path(uri: str) -> Path:
    """The lock guarding first use of the store: beside a SQLite file, else in the temp dir."""
    if uri.startswith("sqlite:///"):
        database = Path(uri[len("sqlite:///") :].split("?", 1)[0])
        database.parent.mkdir(parents=True, exist_ok=True)
        return database.with_name(database.name + ".lock")
    return Path(tempfile.gettempdir()) / f"tempgen-mlflow-{digest(uri, 16)}.lock"


class StoreError(ValueError):
    """The tracking store cannot be opened: a bad URI, or a store MLflow refuses (one line)."""


def start_experiment(name: str, uri: str | None = None) -> str:
    """Point MLflow at the store and the experiment (artifacts beside a local store); returns its id.

    Safe when several processes do it at once on a fresh store (see the module docstring).
    Raises StoreError when MLflow refuses the store (e.g. a ``file:`` store, which MLflow 3
    keeps in maintenance mode: use ``sqlite:///PATH`` or an ``http://`` server).
    """
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    resolved = tracking_uri(uri)
    mlflow.set_tracking_uri(resolved)
    location = None
    if resolved.startswith("sqlite:///") and Path(resolved[len("sqlite:///") :]).parent == LOCAL_STORE:
        location = (LOCAL_STORE / "artifacts").as_uri()
    with FileLock(str(store_lock_path(resolved)), timeout=STORE_LOCK_TIMEOUT_S):
        # The first client call creates and migrates the schema: only one process at a time.
        try:
            experiment_id = _get_or_create_experiment(MlflowClient(resolved), name, location)
        except MlflowException as exc:
            first = str(exc.message if hasattr(exc, "message") else exc).strip().splitlines()[0]
            raise StoreError(f"tracking store {redact_uris(resolved)!r}: {redact_uris(first)}") from None
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


#: The experiment kind MLflow's UI opens an experiment on: its runs table, not the GenAI traces.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def _get_or_create_experiment(client: Any, name: str, location: str | None) -> str:
    """The experiment's id, tolerating a creation by another process (or host) in between; the
    experiment says it holds runs (:data:`EXPERIMENT_KIND`), so ``mlflow ui`` lands on them."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if EXPERIMENT_KIND_TAG not in experiment.tags:  # a store from before: say it once
            client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def run_owner_tags() -> dict[str, str]:
    """Tags naming the process that owns a run, for :func:`close_stale_runs`."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def close_stale_runs(experiment_id: str, run_name: str, client: Any) -> list[str]:
    """Mark RUNNING runs named ``run_name`` whose process is gone as FAILED; returns their ids.

    A run is stale when it has no owner pid tag (written before owners were recorded, or by
    a crash before tagging), or when its owner is on this host and that pid no longer exists.
    Runs owned by another host are left alone: their process cannot be checked from here.
    """
    running = client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'")
    closed = []
    for run in running:
        if run.info.run_name == run_name and _owner_is_gone(run.data.tags):
            client.set_tag(run.info.run_id, "tempgen.closed_as_stale", "true")
            client.set_terminated(run.info.run_id, status="FAILED")
            closed.append(run.info.run_id)
    if closed:
        logger.warning("marked %d stale RUNNING run(s) named %r as FAILED: %s", len(closed), run_name, closed)
    return closed


def _owner_is_gone(tags: Mapping[str, str]) -> bool:
    pid = tags.get(PID_TAG)
    if not pid:
        return True
    if tags.get(HOST_TAG) != socket.gethostname():
        return False
    try:
        return not _process_exists(int(pid))
    except ValueError:
        return True  # an unreadable owner cannot be running


def _process_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def redact(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """A copy of a config tree with secret-looking keys, known secret values and URI user-info
    removed (:func:`src.redact.scrub`, the one scrubber)."""
    return scrub(value, secrets)


def environment_secrets(names: tuple[str, ...] = API_KEY_VARIABLES) -> tuple[str, ...]:
    """Values of the API-key variables in the environment, to scrub from anything written."""
    return tuple(os.environ[name] for name in names if os.environ.get(name))


def git_commit() -> str:
    """The project's current commit (with ``-dirty`` when the tree has changes), or ``unknown``.

    ``dvc.lock`` does not count: ``dvc repro`` rewrites it while the pipeline runs, so every stage
    after the first would otherwise call a clean checkout dirty."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def data_version(files: list[Path]) -> str:
    """The raw-data DVC hash plus a short digest of the dataset files a run read.

    The first part ties a run to the ``data.dvc`` version of the corpora, the second to
    the exact prepared/derived files (which depend on seeds and parameters too).
    """
    raw = "unknown"
    pointer = PROJECT_ROOT / "data.dvc"
    if pointer.exists():
        match = re.search(r"md5:\s*([0-9a-f]+)", pointer.read_text(encoding="utf-8"))
        raw = match.group(1)[:12] if match else raw
    datasets = files_digest(((path.name, path) for path in sorted(files)), "md5")
    return f"raw:{raw}/datasets:{datasets[:12]}"


def log_json_artifact(obj: Any, artifact_path: str, secrets: tuple[str, ...] = ()) -> None:
    """Log ``obj`` as a JSON file at ``artifact_path`` (e.g. ``bootstrap/timex/base.json``)."""
    import mlflow

    text = json.dumps(redact(obj, secrets), ensure_ascii=False, indent=1)
    mlflow.log_text(text, artifact_path)


def log_file_artifact(path: Path, artifact_path: str) -> None:
    """Log a text file's bytes at ``artifact_path`` (a name of its own, unlike ``mlflow.log_artifact``)."""
    import mlflow

    mlflow.log_text(path.read_text(encoding="utf-8"), artifact_path)


def log_jsonl_artifact(rows: list[dict[str, Any]], artifact_path: str, secrets: tuple[str, ...] = ()) -> None:
    """Log rows as a JSONL file at ``artifact_path`` (e.g. ``predictions/timex/base.jsonl``)."""
    import mlflow

    text = "".join(json.dumps(redact(row, secrets), ensure_ascii=False) + "\n" for row in rows)
    mlflow.log_text(text, artifact_path)


def config_secrets(config: Any) -> tuple[str, ...]:
    """Every value a config dump must not show: ``extra_headers`` values, values of
    secret-looking keys, and the API keys in the environment (the configured variable too)."""
    found: list[str] = []

    def walk(node: Any, headers: bool) -> None:
        if isinstance(node, Mapping):
            for key, item in node.items():
                if (headers or SECRET_KEY_PATTERN.match(str(key))) and isinstance(item, (str, int, float)):
                    found.append(str(item))
                walk(item, headers or str(key) == "extra_headers")
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item, headers)

    walk(config, False)
    variables = set(API_KEY_VARIABLES) | _named_key_variables(config)
    found += environment_secrets(tuple(sorted(variables)))
    return tuple(sorted({value for value in found if len(value) >= MIN_SECRET_LENGTH}, key=len, reverse=True))


def _named_key_variables(node: Any) -> set[str]:
    """The values of every ``api_key_env`` in the config: variables whose content is a key."""
    if isinstance(node, Mapping):
        names = {str(node["api_key_env"])} if isinstance(node.get("api_key_env"), str) else set()
        for item in node.values():
            names |= _named_key_variables(item)
        return names
    if isinstance(node, (list, tuple)):
        return set().union(*(_named_key_variables(item) for item in node)) if node else set()
    return set()
