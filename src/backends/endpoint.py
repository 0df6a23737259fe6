"""Which endpoint an API model is sent to: its own model file's, or the chosen provider's.

A provider (``conf/provider/*.yaml``, chosen with ``provider=vllm``) redirects every API model of
a run, a multirun or a profile without editing model files: it sets ``base_url`` and
``api_key_env``, maps each model file's ``name`` to the id the provider serves it under
(``model_ids``; null keeps each file's own ``model_id``; ``served_model`` is the id for a model
the map does not name, e.g. the one model a local server serves), and may set backend options
of its own (``options``, e.g. ``schema_format: auto``), which win over the model file's, and
OpenRouter's ``routing`` keys, added under each model file's own (a provider whose ``routing``
is null, a self-hosted server, sends none: :mod:`src.backends.routing`).
Local backends (llama.cpp, transformers) ignore it. The endpoint and id enter the response
cache key through the backend (``base_url`` in its cache identity, ``model_id`` in every key),
so answers from different providers never mix.
"""

from __future__ import annotations

from typing import Any

from src.backends.routing import merged_routing

API_BACKENDS = ("openai",)  # backends that talk to an endpoint a provider can redirect


class EndpointError(ValueError):
    """A provider that cannot serve a model: one line naming both."""


def resolve_endpoint(model_cfg: dict[str, Any], provider_cfg: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """(model_id, backend options) of ``model_cfg`` (a resolved model file) under ``provider_cfg``.

    ``provider_cfg`` None (``provider: null``), or a model whose backend is local, leaves the
    model file as it is.
    """
    model_id = str(model_cfg.get("model_id") or "")
    options = dict(model_cfg.get("options") or {})
    if not provider_cfg or model_cfg.get("backend") not in API_BACKENDS:
        return model_id, options
    provider = str(provider_cfg.get("name") or "?")
    name = str(model_cfg.get("name") or "?")
    ids = provider_cfg.get("model_ids")
    if ids is not None and not isinstance(ids, dict):
        raise EndpointError(f"provider {provider}: model_ids must be a mapping of model name to id or null")
    if ids is None:
        served = model_id
    elif ids.get(name):
        served = str(ids[name])
    elif provider_cfg.get("served_model"):
        served = str(provider_cfg["served_model"])
    else:
        known = ", ".join(sorted(ids)) or "none"
        raise EndpointError(
            f"provider {provider} has no id for model {name}: add provider.model_ids.{name}=<served id> "
            f"(or provider.served_model=<id>); it names {known}"
        )
    if not provider_cfg.get("base_url"):
        raise EndpointError(f"provider {provider}: base_url is empty")
    options.update(base_url=str(provider_cfg["base_url"]), api_key_env=provider_cfg.get("api_key_env"))
    options.update(provider_cfg.get("options") or {})
    # a provider without routing (a self-hosted server) sends none; one with routing adds its keys
    # under the model's own (which say what the model file bought)
    routing = provider_cfg.get("routing")
    options["routing"] = None if routing is None else merged_routing(routing, options.get("routing"))
    return served, options


def provider_name(provider_cfg: dict[str, Any] | None) -> str | None:
    """The name the run records (None: each model file's own endpoint)."""
    return str(provider_cfg.get("name")) if provider_cfg else None
