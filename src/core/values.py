"""Checks of single configuration values: each returns the value typed, or raises one line naming its key.

The typed configuration (:mod:`src.config.schema`) is built from these, so every bad value of
every group is reported the same way: ``<key>: expected ..., got ...`` (exit code 2 before any
request or MLflow run).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

from src.core.errors import ConfigError
from src.redact import redact_uris

MAX_SEED = 2**32 - 1
#: The most bootstrap resamples any setting or flag may ask for (memory and time stay bounded).
MAX_RESAMPLES = 1_000_000


def optional_int(value: Any) -> int | None:
    """An integer, or None for null (YAML's ``null``, an empty value, Python's None): the argparse
    type and config check of every ``--limit``-like option. The word ``None`` is no null: no stage
    command templates a setting (``tests/test_dvc_graph.py``), so it can only be a typo."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or null, got {value!r}")
    if isinstance(value, int):
        value = str(value)
    text = str(value).strip()
    if text in ("", "null"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"expected an integer or null, got {value!r}") from None
    if number < 0:
        raise ValueError(f"expected a non-negative integer or null, got {number}")
    return number


def count(value: Any, key: str, positive: bool = False) -> int | None:
    """A non-negative (``positive``: > 0) integer or null."""
    try:
        number = optional_int(value)
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    if positive and number == 0:
        raise ConfigError(f"{key}: expected a positive integer or null, got 0")
    return number


def seed(value: Any, key: str) -> int:
    """A seed numpy accepts: an integer from 0 to 2**32 - 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{key}: expected an integer from 0 to {MAX_SEED:,}, got {value!r}")
    return value


def rate(value: Any, key: str) -> float:
    """A share from 0 to 1 (a warning threshold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{key}: expected a number from 0 to 1, got {value!r}")
    return float(value)


def seconds(value: Any, key: str) -> float:
    """A non-negative number of seconds, at most a day."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ConfigError(f"{key}: expected a number of seconds from 0 to 86400, got {value!r}")
    return float(value)


def flag(value: Any, key: str) -> bool:
    """true or false; ``=yes`` or ``=1`` is an error, not silently true."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    return value


def number(value: Any, key: str, low: float = 0.0, integer: bool = False, nullable: bool = False) -> Any:
    """A number (``integer``: an int) of at least ``low``, or null where ``nullable``."""
    if value is None and nullable:
        return None
    kind = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value < low:
        what = "an integer" if integer else "a number"
        raise ConfigError(f"{key}: expected {what} >= {low:g}{' or null' if nullable else ''}, got {value!r}")
    return value if integer else float(value)


def choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def names(value: Any, key: str) -> list[str] | None:
    """A list of names, or null; ``tasks=timex`` (not a list) names the form that works."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list such as {key}=[{value}], got {value!r}")
    return [str(item) for item in value]


def text(value: Any, key: str, nullable: bool = True) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected a string{' or null' if nullable else ''}, got {value!r}")
    return str(value)


def http_url(value: Any, key: str) -> str:
    """An ``http(s)://HOST[:PORT][/PATH]`` URL (the message shows it without a credential)."""
    candidate = value if isinstance(value, str) else ""
    try:
        parts = urlsplit(candidate)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:  # a port that is no number
        valid = False
    if not valid:
        shown = redact_uris(value) if isinstance(value, str) else value
        raise ConfigError(f"{key}: expected an http:// or https:// URL with a host, got {shown!r}")
    return candidate


def mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {value!r}")
    return dict(value)
