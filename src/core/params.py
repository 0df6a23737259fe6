"""Read ``params.yaml`` once and expose it to Hydra as the ``${params:key.path}`` resolver.

The pipeline's paths and seed are defined in ``params.yaml`` only (DVC reads them there);
Hydra configs refer to them instead of repeating them.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from src.core.locate import project_file
from src.study import dimension_datasets

PARAMS_FILE = project_file("params.yaml")


@cache
def load_params(path: str = str(PARAMS_FILE)) -> dict[str, Any]:
    """The parsed parameter file (cached: it is read once per process)."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def lookup(dotted: str, path: str = str(PARAMS_FILE)) -> Any:
    """The value at ``a.b.c`` in the parameter file; a missing key is a KeyError naming it."""
    node: Any = load_params(path)
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{dotted!r} is not defined in {path}")
        node = node[part]
    return node


def register_resolver() -> None:
    """Make ``${params:...}`` and ``${study:DIMENSION}`` available in Hydra configs (idempotent)."""

    if not OmegaConf.has_resolver("params"):
        OmegaConf.register_new_resolver("params", lambda key: lookup(key))
    if not OmegaConf.has_resolver("study"):
        OmegaConf.register_new_resolver("study", dimension_datasets)
