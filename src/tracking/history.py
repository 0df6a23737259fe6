"""A stage's history: what a run did on this machine, kept beside the DVC outputs, never in them.

The run id MLflow drew, the commit (``-dirty`` or not), the store, the wall time and what the run
sent and spent depend on when and where it ran, not on code, data and seed. DVC outputs hold none
of them (docs/mlflow.md), so a fresh clone reproduces ``dvc.lock``; each stage writes them to one
history file here instead, which the report's provenance page reads
(``reports/provenance.md``). The folder mirrors the summaries (``summaries/runs/m-I.json`` ->
``history/runs/m-I.json``), is in ``.gitignore`` and in no DVC output: it describes this
machine's runs (a pulled study has none until its stages re-run here).

A history file is found by path, so after a ``git checkout`` or a ``dvc pull`` the file beside a
summary may describe another run: each carries the key of its run, and :func:`read_history`
returns it only for the key the summary names (else one warning naming both, and nothing).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from src.redact import redact_uris

log = logging.getLogger(__name__)

SUMMARIES = "summaries"
HISTORY = "history"


def history_path(summary: Path | str) -> Path:
    """The history file of a summary file: its ``summaries`` folder swapped for ``history``
    (a summary outside any ``summaries`` folder: ``<name>.history.json`` beside it)."""
    summary = Path(summary)
    parts = summary.parts
    if SUMMARIES in parts:
        at = len(parts) - 1 - parts[::-1].index(SUMMARIES)
        return Path(*parts[:at], HISTORY, *parts[at + 1 :])
    return summary.with_name(summary.stem + ".history.json")


def write_history(summary: Path | str, record: dict[str, Any]) -> Path:
    """Write ``record`` (run id, commit, store without credentials, usage, times) as the history of
    the stage whose summary is ``summary``."""
    path = history_path(summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    shown = {k: redact_uris(v) if k == "tracking_uri" and isinstance(v, str) else v for k, v in record.items()}
    path.write_text(json.dumps(shown, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_history(summary: Path | str, key: str | None = None) -> dict[str, Any]:
    """The history of a summary's stage; empty where this machine has none (a pulled study).

    ``key``: the run the summary names; a history file of another run (or of none) is not that
    run's: one warning naming both keys, and an empty history, never another run's id or spend.
    """
    path = history_path(summary)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    if key is not None and data.get("key") != key:
        log.warning(
            "history %s is of run %s, not of run %s that %s names: left out (re-run the stage to write its history)",
            path,
            data.get("key") or "(no key)",
            key,
            summary,
        )
        return {}
    return data
