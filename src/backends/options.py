"""Every option of the OpenAI-compatible backend, with its default: the one place either lives.

Hydra gets these defaults from here (:mod:`src.config.store` registers them as the config group
``backend_options/openai`` that each API model file merges under its ``options``), so
``model.options.max_concurrency=4`` needs no ``+``; the backend is built from an
:class:`OpenAIOptions` (:class:`~src.backends.openai_backend.OpenAIBackend`). Adding an option is
one field here. How they work: docs/scaling-out.md, docs/cost.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from src.backends.batch_apis import DIALECTS
from src.backends.openai_body import SCHEMA_FORMATS
from src.backends.routing import checked_routing
from src.backends.served import ON_MISMATCH
from src.core import values
from src.core.errors import ConfigError

MODES = ("sync", "batch", "flex")
WHERE = "model.options"


@dataclass(frozen=True)
class OpenAIOptions:
    """The OpenAI-compatible backend's options (``model.options`` of an API model file)."""

    #: the endpoint root (``.../v1``)
    base_url: str = "https://openrouter.ai/api/v1"
    #: the environment variable holding the key (src/backends/openai_keys.py); null: no key
    api_key_env: str | None = "OPENROUTER_API_KEY"
    #: null: a key is required unless base_url is a loopback address
    require_api_key: bool | None = None
    #: requests in flight at the start; halved on a timeout, 429 or 503, grown back by one after a
    #: window of successes (src/backends/concurrency.py)
    max_concurrency: int = 16
    #: an attempt's timeout: max(timeout_s, bound * max_tokens / min_tokens_per_s), one slow answer
    #: for every request that may be queued ahead of it (null min_tokens_per_s: timeout_s alone)
    timeout_s: float = 120.0
    min_tokens_per_s: float | None = 10.0
    #: retries after the first attempt, and the backoff's scale and cap (src/backends/retry.py)
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    #: sent with every request (e.g. OpenRouter's HTTP-Referer)
    extra_headers: dict[str, str] = field(default_factory=dict)
    #: extra JSON fields of every request; part of the cache key
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: ask for usage.cost with OpenRouter's usage: {include: true}; null: only on openrouter.ai
    request_cost: bool | None = None
    #: seeds the retry jitter (each request carries its own generation seed)
    seed: int = 0
    #: auto (json_schema, then json_object, then none, once per run), strict (= json_schema, fails on
    #: a refusal), json_schema, json_object, none; part of the cache key
    schema_format: str = "json_schema"
    #: warn: keep an answer from another model or provider and count it; fail: retry, then fail it
    on_model_mismatch: str = "warn"
    #: OpenRouter's provider routing (src/backends/routing.py), declared per model (what was bought,
    #: beside its price); conf/provider/*.yaml adds keys for every model. Sent as the request's
    #: provider object, a param of the run and part of the cache key
    routing: dict[str, Any] | None = None
    #: how requests are bought (docs/cost.md): sync, batch (the Batch API: about half price, within
    #: batch_completion_window) or flex (OpenAI's flex tier). Not part of the cache key
    mode: str = "sync"
    #: the Batch API: poll interval, completion window, most requests per batch, how many more
    #: batches a request that failed in one gets before the synchronous path, and its dialect
    #: (src/backends/batch_apis.py: openai, openrouter, or auto by host)
    batch_poll_s: float = 30.0
    batch_completion_window: str = "24h"
    batch_max_requests: int = 50_000
    batch_rounds: int = 1
    batch_api: str = "auto"
    #: stop a call when this many attempts in a row, over more than one request, failed the same
    #: way (a reply that is no answer, a non-overload HTTP error); null: never early
    stop_after_same_fault: int | None = 20

    def __post_init__(self) -> None:
        checked(self)

    @classmethod
    def from_mapping(cls, given: dict[str, Any], where: str = WHERE) -> OpenAIOptions:
        """The options of ``given`` (unset ones at their defaults); an unknown or bad one is a
        ConfigError naming ``where.<key>``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: no such option of the openai backend")
        try:
            return cls(**{key: value for key, value in given.items() if value is not None or key in NULLABLE})
        except ConfigError as error:
            raise ConfigError(str(error).replace(WHERE, where, 1)) from None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Options whose null is a value of its own (not "the default").
NULLABLE = frozenset(
    {"api_key_env", "require_api_key", "min_tokens_per_s", "request_cost", "routing", "stop_after_same_fault"}
)


def checked(options: OpenAIOptions) -> None:
    """Every option's type and range, one ConfigError naming the first bad one."""
    key = f"{WHERE}."
    values.http_url(options.base_url, key + "base_url")
    if options.api_key_env is not None and (
        not isinstance(options.api_key_env, str) or not options.api_key_env.strip()
    ):
        raise ConfigError(
            f"{key}api_key_env: expected the name of an environment variable or null, got {options.api_key_env!r}"
        )
    values.number(options.max_concurrency, key + "max_concurrency", 1, integer=True)
    values.number(options.timeout_s, key + "timeout_s", 0.001)
    values.number(options.min_tokens_per_s, key + "min_tokens_per_s", 0.001, nullable=True)
    values.number(options.max_retries, key + "max_retries", 0, integer=True)
    values.number(options.backoff_base_s, key + "backoff_base_s", 0)
    values.number(options.backoff_max_s, key + "backoff_max_s", 0)
    values.number(options.seed, key + "seed", 0, integer=True)
    values.choice(options.schema_format, key + "schema_format", SCHEMA_FORMATS)
    if options.on_model_mismatch not in ON_MISMATCH:
        raise ConfigError(f"{key}on_model_mismatch: expected warn or fail, got {options.on_model_mismatch!r}")
    values.choice(options.mode, key + "mode", MODES)
    values.number(options.batch_poll_s, key + "batch_poll_s", 0.001)
    if options.batch_completion_window != "24h":
        raise ConfigError(
            f"{key}batch_completion_window: the Batch API offers 24h only, got {options.batch_completion_window!r}"
        )
    values.number(options.batch_max_requests, key + "batch_max_requests", 1, integer=True)
    values.number(options.batch_rounds, key + "batch_rounds", 0, integer=True)
    values.choice(options.batch_api, key + "batch_api", DIALECTS)
    values.number(options.stop_after_same_fault, key + "stop_after_same_fault", 2, integer=True, nullable=True)
    for name in ("extra_headers", "extra_body"):
        values.mapping(getattr(options, name), key + name)
    for name in ("require_api_key", "request_cost"):
        if getattr(options, name) is not None:
            values.flag(getattr(options, name), key + name)
    try:
        checked_routing(options.routing, key + "routing")
    except ValueError as error:
        raise ConfigError(str(error)) from None


#: The ``backend_options`` config groups defined in code: name -> its options' defaults.
GROUPS = {"openai": lambda: OpenAIOptions().as_dict()}
