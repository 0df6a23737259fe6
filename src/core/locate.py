"""Where the project's files are: the one place that knows the checkout's layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: The checkout (the folder holding ``src/``, ``conf/``, ``params.yaml`` and ``dvc.yaml``).
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def project_relative(path: Path | str) -> str | None:
    """``path`` relative to the project root (POSIX), or None when it lies outside the project."""
    try:
        return Path(path).resolve().relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        return None


def conf_dir(*parts: str) -> Path:
    """``conf/`` (Hydra's configuration), or a path inside it."""
    return PROJECT_ROOT.joinpath("conf", *parts)


def project_file(name: str) -> Path:
    """A file at the checkout's root (``params.yaml``, ``dvc.yaml``, ``sweep.yaml``)."""
    return PROJECT_ROOT / name


def config_default(dotted: str) -> Any:
    """A value of ``conf/config.yaml`` as written (``mlflow.experiment``, ``warn_rate``): for the
    entry points outside Hydra (fine-tuning, evaluation, analysis), which read the prompted runs'
    one definition instead of a copy."""
    node: Any = yaml.safe_load(conf_dir("config.yaml").read_text(encoding="utf-8")) or {}
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{dotted!r} is not defined in {conf_dir('config.yaml')}")
        node = node[part]
    return node
