"""Values of a prompted run that would fail later, checked before a backend or a run starts.

Each check raises :class:`ConfigError` with one line naming the key and what it accepts, so
``python -m src.run`` stops with exit code 2 before the first request: a seed out of numpy's
range, a ``limit`` or token budget of 0, a ``tasks=timex`` that is not a list, a base URL that
is no URL, option values of the wrong type, an unknown config group choice, a provider that
has no id for the model (:func:`endpoint_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from omegaconf import DictConfig, ListConfig, OmegaConf

from src.cli import MAX_SEED, optional_int
from src.config.errors import ConfigError
from src.config.locate import conf_dir

CONF_DIR = conf_dir()
#: Config groups whose choice is a file ``conf/<group>/<name>.yaml``.
CHOICE_GROUPS = ("model", "strategy", "dimension", "condition", "provider")
#: Numeric options of the OpenAI-compatible backend: (smallest allowed, integer only).
OPENAI_NUMBERS = {
    "max_concurrency": (1, True),
    "timeout_s": (0.001, False),
    "max_retries": (0, True),
    "backoff_base_s": (0, False),
    "backoff_max_s": (0, False),
    "seed": (0, True),
    "min_tokens_per_s": (0.001, False),
    "stop_after_same_fault": (2, True),
    "batch_poll_s": (0.001, False),
    "batch_max_requests": (1, True),
    "batch_rounds": (0, True),
}
#: Numeric options that may also be null (the backend's own default).
NULLABLE_NUMBERS = frozenset({"min_tokens_per_s", "stop_after_same_fault"})
MODES = ("sync", "batch", "flex")


def unknown_choice_error(overrides: Sequence[str], conf_dir: Path = CONF_DIR) -> str | None:
    """The message for ``model=nope`` (or strategy, dimension, condition): the valid choices on one
    line, instead of Hydra's multi-line listing; None when every choice exists.

    A multirun sweep (``model=a,b``) is checked value by value; a sweep function or an
    interpolation (``choice(...)``, ``glob(*)``, ``${...}``) is left to Hydra.
    """
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if not sep or key not in CHOICE_GROUPS or value in ("", "null") or any(c in value for c in "()*$"):
            continue
        choices = sorted(path.stem for path in (conf_dir / key).glob("*.yaml"))
        for name in value.split(","):
            if name.strip() not in choices:
                return f"{key}: unknown {name.strip()!r}; choose one of {', '.join(choices)}"
    return None


def name_list(cfg: DictConfig, dotted: str) -> list[str] | None:
    """The list of names at ``dotted`` (null stays None); ``tasks=timex`` is an error naming the key."""
    value = OmegaConf.select(cfg, dotted)
    if value is None:
        return None
    if not isinstance(value, (list, tuple, ListConfig)):
        raise ConfigError(f"{dotted}: expected a list such as {dotted}=[{value}], got {value!r}")
    return [str(item) for item in value]


def positive_count(cfg: DictConfig, dotted: str) -> int | None:
    """A positive integer or null at ``dotted`` (``limit``, ``generation.max_tokens``)."""
    try:
        number = optional_int(OmegaConf.select(cfg, dotted))
    except ValueError as error:
        raise ConfigError(f"{dotted}: {error}") from None
    if number == 0:
        raise ConfigError(f"{dotted}: expected a positive integer or null, got 0")
    return number


def check_seed(value: Any, key: str) -> int:
    """A seed numpy accepts: an integer from 0 to 2**32 - 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{key}: expected an integer from 0 to {MAX_SEED:,}, got {value!r}")
    return value


def check_rate(value: Any, key: str) -> float:
    """A share from 0 to 1 (a warning threshold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{key}: expected a number from 0 to 1, got {value!r}")
    return float(value)


def check_seconds(value: Any, key: str) -> float:
    """A non-negative number of seconds, at most a day."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86_400:
        raise ConfigError(f"{key}: expected a number of seconds from 0 to 86400, got {value!r}")
    return float(value)


def check_http_url(value: Any, key: str) -> str:
    """An ``http(s)://HOST[:PORT][/PATH]`` URL (the message shows it without a credential)."""
    from src.redact import redact_uris

    text = value if isinstance(value, str) else ""
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:  # a port that is no number
        valid = False
    if not valid:
        shown = redact_uris(value) if isinstance(value, str) else value
        raise ConfigError(f"{key}: expected an http:// or https:// URL with a host, got {shown!r}")
    return text


def check_backend_options(backend: str, options: dict[str, Any]) -> None:
    """The OpenAI-compatible backend's options, by key, before the backend is built."""
    if backend != "openai":
        return
    prefix = "model.options"
    if "base_url" in options:
        check_http_url(options["base_url"], f"{prefix}.base_url")
    variable = options.get("api_key_env")
    if variable is not None and (not isinstance(variable, str) or not variable.strip()):
        raise ConfigError(
            f"{prefix}.api_key_env: expected the name of an environment variable or null, got {variable!r}"
        )
    for name, (low, integer) in OPENAI_NUMBERS.items():
        if name not in options:
            continue
        value = options[name]
        if value is None and name in NULLABLE_NUMBERS:
            continue
        kind = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or value < low:
            what = "an integer" if integer else "a number"
            raise ConfigError(f"{prefix}.{name}: expected {what} >= {low:g}, got {value!r}")
    from src.backends.openai_backend import SCHEMA_FORMATS

    schema_format = options.get("schema_format")
    if schema_format is not None and schema_format not in SCHEMA_FORMATS:
        raise ConfigError(f"{prefix}.schema_format: expected one of {', '.join(SCHEMA_FORMATS)}, got {schema_format!r}")
    mismatch = options.get("on_model_mismatch")
    if mismatch is not None and mismatch not in ("warn", "fail"):
        raise ConfigError(f"{prefix}.on_model_mismatch: expected warn or fail, got {mismatch!r}")
    from src.backends.batch_apis import DIALECTS

    dialect = options.get("batch_api")
    if dialect is not None and dialect not in DIALECTS:
        raise ConfigError(f"{prefix}.batch_api: expected one of {', '.join(DIALECTS)}, got {dialect!r}")
    mode = options.get("mode")
    if mode is not None and mode not in MODES:
        raise ConfigError(f"{prefix}.mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "batch" and options.get("batch_completion_window") not in (None, "24h"):
        raise ConfigError(
            f"{prefix}.batch_completion_window: the Batch API offers 24h only, got {options['batch_completion_window']!r}"
        )
    from src.backends.routing import checked_routing

    try:
        checked_routing(options.get("routing"), f"{prefix}.routing")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def endpoint_of(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """(model_id, backend options) the run's backend is built with: the model file's, redirected
    by ``provider`` when one is chosen (:func:`src.backends.endpoint.resolve_endpoint`), checked."""
    from src.backends.endpoint import EndpointError, resolve_endpoint

    model = OmegaConf.to_container(cfg.model, resolve=True)
    provider = OmegaConf.select(cfg, "provider")
    provider = OmegaConf.to_container(provider, resolve=True) if provider is not None else None
    try:
        model_id, options = resolve_endpoint(model, provider)
    except EndpointError as error:
        raise ConfigError(str(error)) from None
    check_backend_options(str(model.get("backend")), options)
    return model_id, options
