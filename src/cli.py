"""Small helpers shared by the command-line entry points."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable


def optional_int(value: Any) -> int | None:
    """An integer, or None for ``None``/``null``/``none``/empty (argparse type and config values).

    DVC renders a YAML null in a stage command as the word ``None``, and Hydra reads that
    word as a string, so every ``--limit``-like option goes through here.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or null, got {value!r}")
    if isinstance(value, int):
        value = str(value)
    text = str(value).strip()
    if text.lower() in ("", "null", "none"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"expected an integer or null, got {value!r}") from None
    if number < 0:
        raise ValueError(f"expected a non-negative integer or null, got {number}")
    return number


def print_json_report(build: Callable[[], dict]) -> int:
    """Run ``build`` and print its report as JSON; bad input is one line on stderr and exit code 2.

    ``src.score`` and ``src.compare`` share this so their output and error contract match.
    """
    from src.data.schema import DataError

    try:
        report = build()
    except (DataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
