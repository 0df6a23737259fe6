"""Name lookups in the project's registries (tasks, span labels, model specs) with one error form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

Value = TypeVar("Value")


def registry_entry(table: Mapping[str, Value], key: str, what: str) -> Value:
    """``table[key]``, or a one-line ValueError naming ``what`` and listing the known keys."""
    try:
        return table[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {what} {key!r}; choose one of {sorted(table)}") from None
