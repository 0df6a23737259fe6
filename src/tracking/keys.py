"""A run's key: the deterministic name of what it computed, in place of MLflow's random run id.

A configuration's summary and evidence folder (DVC outputs) name their run by this key, never by
its run id, so the same configuration on the same code and data writes the same bytes on any
machine. The key hashes the run's kind, name and params (data version and code version,
:func:`code_version`, among them; the commit, which moves with every commit and marks a tree
dirty while ``dvc repro`` rewrites ``dvc.lock``, left out). The MLflow run carries it as the tag :data:`KEY_TAG`, which is
how the analysis and the restore find a run (docs/mlflow.md).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from src.config.locate import PROJECT_ROOT
from src.tracking.code_closure import code_deps

KEY_TAG = "tempgen.key"
#: Params that record the run's history, not what it computed.
HISTORY_PARAMS = ("git_commit",)


def entry_module() -> str | None:
    """The ``src`` module this process runs (``python -m src.run``: ``src.run``), or None."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return name if isinstance(name, str) and name.startswith("src.") else None


@lru_cache(maxsize=8)
def code_version(module: str | None = None) -> str:
    """A digest of the code a stage runs, by path and bytes: the import closure of ``module``
    (default: the running ``python -m`` module; every ``src/**/*.py`` outside one), the same
    files DVC lists as the stage's code deps. So the same checkout gives the same digest in any
    folder, on any machine, and a change to code a stage does not import leaves its outputs alone."""
    module = module or entry_module()
    if module is None:
        files = set(PROJECT_ROOT.glob("src/**/*.py"))
    else:
        files = set()
        for dep in code_deps(module):
            path = PROJECT_ROOT / dep
            files |= set(path.glob("**/*.py")) if path.is_dir() else {path}
    digest = hashlib.sha256()
    for path in sorted(files):
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
