"""A run's key: the deterministic name of what it computed, in place of MLflow's random run id.

A configuration's summary and evidence folder (DVC outputs) name their run by this key, never by
its run id, so the same configuration on the same code and data writes the same bytes on any
machine. The key hashes the run's kind, name and params (data version and code version,
:func:`code_version`, among them; the commit, which moves with every commit and marks a tree
dirty while ``dvc repro`` rewrites ``dvc.lock``, left out). The MLflow run carries it as the tag :data:`KEY_TAG`, which is
how the analysis and the restore find a run (docs/mlflow.md).

A prompted run's params also carry :func:`settings_digest`: a digest of every leaf of its resolved
configuration (``generation.max_tokens``, the condition's answer format and scorers, the
resamples, the backend's options...) except those in :data:`NOT_IN_KEY`, each excluded with the
reason it changes no answer and no number; so two runs with one key computed the same thing
(``tests/test_keys.py`` compares the two). No key holds an absolute path (:func:`key_value`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path, PureWindowsPath
from typing import Any

from src.core.digest import digest, files_digest
from src.core.locate import PROJECT_ROOT
from src.tracking.code_closure import code_deps

KEY_TAG = "tempgen.key"
#: Params that record the run's history, not what it computed.
HISTORY_PARAMS = ("git_commit",)
#: Settings of a run's resolved configuration (dotted prefixes) that change no answer and no
#: number, with why; every other leaf is in the run's key (:func:`key_settings`).
NOT_IN_KEY = {
    "paths": "where inputs are read and the response cache kept (the data's content is the data version)",
    "evidence": "the folder the run's evidence is written to",
    "summary": "the file the run's summary is written to",
    "k_selection_output": "the file `python -m src.tune_k` writes",
    "profile": "the MLflow parent run the run is filed under",
    "mlflow": "where, and under which run name, the run is logged (the name is in the key apart)",
    "budget": "caps stop a run before it sends; they never change an answer",
    "provider.base_url": "in the key as the param `endpoint`, without credentials in the URL",
    "model.options.base_url": "the same, for a model file's own endpoint",
    "provider.api_key_env": "the name of the variable holding the key",
    "model.options.api_key_env": "the same, for a model file's own endpoint",
    "provider.options.extra_headers": "request headers (credentials); routing is its own setting",
    "model.options.extra_headers": "the same, for a model file's own endpoint",
}
_WINDOWS_ABSOLUTE = re.compile(r"^[A-Za-z]:[\\/]")


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
    named = (
        (path.relative_to(PROJECT_ROOT).as_posix(), path.read_bytes().replace(b"\r\n", b"\n")) for path in sorted(files)
    )
    return files_digest(named)[:12]


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested mapping by its dotted name (a list is one leaf)."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for name, inner in value.items():
            out.update(_leaves(inner, f"{prefix}{name}."))
        return out
    return {prefix.rstrip("."): value}


def excluded(name: str) -> str | None:
    """Why the setting ``name`` (dotted) is left out of the key, or None when it is in it."""
    for prefix, why in NOT_IN_KEY.items():
        if name == prefix or name.startswith(prefix + "."):
            return why
    return None


def key_settings(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The leaves of a resolved configuration that a run's key covers: all but :data:`NOT_IN_KEY`."""
    return {name: value for name, value in sorted(_leaves(resolved).items()) if excluded(name) is None}


def settings_digest(resolved: Mapping[str, Any]) -> str:
    """A digest of :func:`key_settings`: the param that puts every setting of a run in its key."""
    payload = json.dumps(key_settings(resolved), sort_keys=True, ensure_ascii=True, default=str)
    return digest(payload, 16)


def key_value(value: str) -> str:
    """A param's value as the key hashes it: an absolute path made project-relative, or (outside
    the project) reduced to its name, so no key depends on where a checkout or a file lies."""
    if Path(value).is_absolute():  # a path of this system: relative to the checkout if it lies inside
        try:
            return Path(value).resolve().relative_to(PROJECT_ROOT.resolve()).as_posix()
        except (ValueError, OSError):
            pass
    elif not _WINDOWS_ABSOLUTE.match(value):
        return value
    return f"<outside the project>/{PureWindowsPath(value).name}"  # either separator


def without_history(params: Mapping[str, Any]) -> dict[str, str]:
    """Params as MLflow keeps them (strings), the history ones left out."""
    return {str(k): str(v) for k, v in sorted(params.items()) if k not in HISTORY_PARAMS}


def run_key(kind: str, run_name: str, params: Mapping[str, Any]) -> str:
    """The key of a run: a digest of its kind, name and params (history left out)."""
    hashed = {name: key_value(value) for name, value in without_history(params).items()}
    payload = json.dumps({"kind": kind, "run_name": run_name, "params": hashed}, sort_keys=True, ensure_ascii=False)
    return digest(payload, 16)
