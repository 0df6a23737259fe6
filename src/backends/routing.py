"""Pinned provider routing: which upstream provider and weights may answer, sent and checked.

OpenRouter routes a model to any of its providers, at any quantisation, and drops request
parameters a provider does not support unless told otherwise; two runs of one configuration can
then be answered by different weights. A ``routing`` block (in ``conf/provider/*.yaml`` for all
models, or in a model file for one model, which wins key by key) is sent as OpenRouter's
``provider`` request object:

* ``order``: providers to try, in order; ``only``: the providers allowed at all;
* ``allow_fallbacks: false``: never go past ``order``; ``require_parameters: true``: only
  providers that honour every parameter sent (``response_format``, ``seed``);
* ``quantizations``: the weight formats allowed (``fp8``, ``bf16``, ...).

It is part of the response-cache key (another route may give another answer) and of the run's
params. Every reply names the provider that served it (OpenRouter's ``provider`` field), and
some the weight format (``quantization``); one outside the pinned set (:func:`off_pin`), or one
that names no provider under a provider pin, is a mismatch under ``on_model_mismatch``, like a
fallback model, whatever form the reply takes.
"""

from __future__ import annotations

from typing import Any

ROUTING_KEYS = ("order", "only", "ignore", "allow_fallbacks", "require_parameters", "quantizations", "sort")
LIST_KEYS = ("order", "only", "ignore", "quantizations")
FLAG_KEYS = ("allow_fallbacks", "require_parameters")


def checked_routing(block: Any, where: str) -> dict[str, Any] | None:
    """A routing block with its nulls dropped (None when empty); ValueError naming the key otherwise."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError(f"{where}: expected a mapping of OpenRouter provider routing, got {block!r}")
    routing = {}
    for key, value in block.items():
        if key not in ROUTING_KEYS:
            raise ValueError(f"{where}.{key}: unknown routing key; choose from {', '.join(ROUTING_KEYS)}")
        if value is None:
            continue
        if key in LIST_KEYS and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
            raise ValueError(f"{where}.{key}: expected a list of names, got {value!r}")
        if key in FLAG_KEYS and not isinstance(value, bool):
            raise ValueError(f"{where}.{key}: expected true or false, got {value!r}")
        if key == "sort" and value not in ("price", "throughput", "latency"):
            raise ValueError(f"{where}.sort: expected price, throughput or latency, got {value!r}")
        routing[key] = value
    return routing or None


def merged_routing(provider_block: Any, model_block: Any) -> dict[str, Any] | None:
    """The provider config's routing with the model file's keys on top (both checked)."""
    merged = {**(checked_routing(provider_block, "provider.routing") or {})}
    merged.update(checked_routing(model_block, "model.routing") or {})
    return merged or None


def allowed_providers(routing: dict[str, Any] | None) -> set[str] | None:
    """The providers a reply may name under ``routing`` (lower case), or None when any may."""
    if not routing:
        return None
    if routing.get("only"):
        return {name.lower() for name in routing["only"]}
    if routing.get("order") and routing.get("allow_fallbacks") is False:
        return {name.lower() for name in routing["order"]}
    return None


def provider_mismatch(routing: dict[str, Any] | None, served: dict | None) -> bool:
    """True when the reply names a provider outside the pinned set (or none, under a provider pin),
    or a weight format outside the pinned ``quantizations`` (a reply naming no format is no mismatch:
    OpenRouter's replies seldom name one)."""
    return off_pin(routing, served) is not None


def off_pin(routing: dict[str, Any] | None, served: dict | None) -> str | None:
    """Why the reply is outside the pinned routing (its provider, none named under a provider pin, or
    its quantization where it names one), in a few words; None when it is inside."""
    served = served or {}
    allowed = allowed_providers(routing)
    name = served.get("provider")
    if allowed is not None and not name:  # nothing to check is not a check passed
        return f"the reply names no provider (pinned to {sorted(allowed)})"
    if allowed is not None and _slug(name) not in {_slug(a) for a in allowed}:
        return f"provider {name!r} outside {sorted(allowed)}"
    formats = (routing or {}).get("quantizations")
    quantization = served.get("quantization")
    if formats and quantization and _slug(quantization) not in {_slug(f) for f in formats}:
        return f"quantization {quantization!r} outside {sorted(formats)}"
    return None


def _slug(name: str) -> str:
    """OpenRouter names a provider ``DeepInfra`` in replies and ``deepinfra`` in routing."""
    return "".join(ch for ch in name.lower() if ch.isalnum())
