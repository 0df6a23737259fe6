"""A run's key: the deterministic name of what it computed, in place of MLflow's random run id.

A configuration's summary and evidence folder (DVC outputs) name their run by this key, never by
its run id, so the same configuration on the same code and data writes the same bytes on any
machine. The key hashes the run's kind, name and params (data version and code version among
them; the commit, which moves with every commit and marks a tree dirty while ``dvc repro``
rewrites ``dvc.lock``, left out). The MLflow run carries it as the tag :data:`KEY_TAG`, which is
how the analysis and the restore find a run (docs/mlflow.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from src.config.locate import PROJECT_ROOT

KEY_TAG = "tempgen.key"
#: Params that record the run's history, not what it computed.
HISTORY_PARAMS = ("git_commit",)
#: What the code version covers: the source and the Hydra configuration.
CODE_GLOBS = ("src/**/*.py", "conf/**/*.yaml")


@lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the project's code (every ``src/**/*.py`` and ``conf/**/*.yaml``, by path and
    bytes): the same checkout gives the same digest in any folder, on any machine."""
    digest = hashlib.sha256()
    files = sorted({path for pattern in CODE_GLOBS for path in PROJECT_ROOT.glob(pattern) if path.is_file()})
    for path in files:
        digest.update(path.relative_to(PROJECT_ROOT).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()[:12]


def without_history(params: Mapping[str, Any]) -> dict[str, str]:
    """Params as MLflow keeps them (strings), the history ones left out."""
    return {str(k): str(v) for k, v in sorted(params.items()) if k not in HISTORY_PARAMS}


def run_key(kind: str, run_name: str, params: Mapping[str, Any]) -> str:
    """The key of a run: a digest of its kind, name and params (history left out)."""
    payload = json.dumps(
        {"kind": kind, "run_name": run_name, "params": without_history(params)}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
