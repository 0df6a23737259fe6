"""MLflow conventions shared by prompted and fine-tuned configurations.

One run per configuration, metrics named ``{task}.{dataset}.{metric}``, artifacts under
``predictions/`` and ``bootstrap/``; the tracking store is ``$MLFLOW_TRACKING_URI`` when
set, else a SQLite store inside the project's ``mlruns/`` folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Mapping

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCAL_STORE = PROJECT_ROOT / "mlruns"
SECRET_KEY_PATTERN = re.compile(
    r"^(.*[_-])?(api[_-]?key|token|access[_-]token|secret|password|authorization)$", re.IGNORECASE
)
REDACTED = "***REDACTED***"


def tracking_uri(explicit: str | None = None) -> str:
    """The tracking URI: explicit config, else the environment, else the local SQLite store."""
    if explicit:
        return explicit
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    LOCAL_STORE.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{LOCAL_STORE / 'mlflow.db'}"


def start_experiment(name: str, uri: str | None = None) -> str:
    """Point MLflow at the store and the experiment (artifacts beside a local store); returns its id."""
    import mlflow

    resolved = tracking_uri(uri)
    mlflow.set_tracking_uri(resolved)
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        mlflow.set_experiment(name)
        return experiment.experiment_id
    location = None
    if resolved.startswith("sqlite:///") and Path(resolved[len("sqlite:///"):]).parent == LOCAL_STORE:
        location = (LOCAL_STORE / "artifacts").as_uri()
    experiment_id = mlflow.create_experiment(name, artifact_location=location)
    mlflow.set_experiment(name)
    return experiment_id


def redact(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """A copy of a config tree with secret-looking keys and any known secret value replaced."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            # Keys that *name* a variable (api_key_env) do not match; keys that hold one do.
            if SECRET_KEY_PATTERN.match(str(key)) and item is not None:
                out[key] = REDACTED
            else:
                out[key] = redact(item, secrets)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(item, secrets) for item in value]
    if isinstance(value, str):
        for secret in secrets:
            if secret:
                value = value.replace(secret, REDACTED)
    return value


def environment_secrets(names: tuple[str, ...] = ("OPENROUTER_API_KEY", "OPENAI_API_KEY")) -> tuple[str, ...]:
    """Values of the API-key variables in the environment, to scrub from anything written."""
    return tuple(os.environ[name] for name in names if os.environ.get(name))


def git_commit() -> str:
    """The project's current commit (with ``-dirty`` when the tree has changes), or ``unknown``."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT, capture_output=True, text=True
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
    digest = hashlib.md5()
    for path in sorted(files):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"raw:{raw}/datasets:{digest.hexdigest()[:12]}"


def log_json_artifact(obj: Any, artifact_path: str, secrets: tuple[str, ...] = ()) -> None:
    """Log ``obj`` as a JSON file at ``artifact_path`` (e.g. ``bootstrap/timex/base.json``)."""
    import mlflow

    text = json.dumps(redact(obj, secrets), ensure_ascii=False, indent=1)
    mlflow.log_text(text, artifact_path)


def log_jsonl_artifact(rows: list[dict[str, Any]], artifact_path: str, secrets: tuple[str, ...] = ()) -> None:
    """Log rows as a JSONL file at ``artifact_path`` (e.g. ``predictions/timex/base.jsonl``)."""
    import mlflow

    text = "".join(json.dumps(redact(row, secrets), ensure_ascii=False) + "\n" for row in rows)
    mlflow.log_text(text, artifact_path)
