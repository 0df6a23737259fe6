"""Expose ``params.yaml`` (read by :mod:`src.core.settings`) to Hydra as the ``${params:key.path}`` resolver.

The pipeline's paths and seed are defined in ``params.yaml`` only (DVC reads them there);
Hydra configs refer to them instead of repeating them.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from src.core.settings import PARAMS_FILE, params_tree
from src.study import dimension_datasets


def lookup(dotted: str, path: str = str(PARAMS_FILE)) -> Any:
    """The value at ``a.b.c`` in the parameter file (checked by :mod:`src.core.settings`); a
    missing key is a KeyError naming it. Code reads the typed :func:`~src.core.settings.load_params`;
    this is for Hydra's ``${params:...}`` and the blocks another component types."""
    node: Any = params_tree(path)
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
