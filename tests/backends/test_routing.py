"""Pinned routing: declared per model and provider, sent as OpenRouter's ``provider`` object, part
of the cache key and the run's params, and a reply from another provider is a mismatch."""

from __future__ import annotations

import json

import pytest
import yaml

from src.backends.endpoint import resolve_endpoint
from src.backends.openai_backend import OpenAIBackend
from src.backends.routing import checked_routing, provider_mismatch
from src.core.requests import ChatRequest
from src.runs.configure import endpoint
from src.runs.offline import load_config
from tests.helpers.openai_server import OpenAIServer, quoted_words_answer
from tests.helpers.paths import REPO_ROOT

PIN = {"only": ["deepinfra"], "quantizations": ["fp8"], "allow_fallbacks": False, "require_parameters": True}
REQUEST = ChatRequest(messages=(("user", 'Find "Friday"'),), request_id="r")


def test_the_paper_profile_pins_every_api_model_to_one_provider():
    profile = yaml.safe_load((REPO_ROOT / "conf/profiles/paper.yaml").read_text())["sweep"]
    models = [*profile["models"], profile["adv_p_generator"]]
    for model in models:
        config = load_config([f"model={model}", f"provider={profile['provider']}"])
        routing = endpoint(config)[1]["routing"]
        assert len(routing["only"]) == 1 and routing["allow_fallbacks"] is False, model
        assert routing["require_parameters"] is True, model


def test_a_provider_adds_routing_keys_and_a_self_hosted_one_sends_none():
    model = {"name": "q", "backend": "openai", "model_id": "qwen/x", "options": {"routing": PIN}}
    provider = {
        "name": "openrouter",
        "base_url": "https://openrouter.ai/api/v1",
        "model_ids": None,
        "routing": {"sort": "price"},
    }
    assert resolve_endpoint(model, provider)[1]["routing"] == {**PIN, "sort": "price"}
    assert resolve_endpoint(model, {**provider, "routing": None})[1]["routing"] is None
    assert resolve_endpoint(model, None)[1]["routing"] == PIN  # the model file's own endpoint
    with pytest.raises(ValueError, match="model.options.routing.order: expected a list of names"):
        checked_routing({"order": "deepinfra"}, "model.options.routing")
    with pytest.raises(ValueError, match="unknown routing key"):
        checked_routing({"onyl": ["x"]}, "model.options.routing")


def test_routing_is_sent_kept_in_the_cache_key_and_another_provider_is_a_mismatch():
    with OpenAIServer(answer=quoted_words_answer, extra_fields={"provider": "Together"}) as server:
        pinned = OpenAIBackend(model_id="m", base_url=server.base_url, routing=PIN, max_retries=1, backoff_base_s=0)
        (kept,) = pinned.generate([REQUEST])
        assert server.bodies[-1]["provider"] == PIN
        strict = OpenAIBackend(
            model_id="m",
            base_url=server.base_url,
            routing=PIN,
            on_model_mismatch="fail",
            max_retries=1,
            backoff_base_s=0,
        )
        (refused,) = strict.generate([REQUEST])
    plain = OpenAIBackend(model_id="m", base_url=server.base_url)
    assert "routing" not in plain.cache_identity() and pinned.cache_identity()["routing"] == PIN
    assert kept.text == '["Friday"]' and provider_mismatch(PIN, kept.served)  # warn: kept, counted
    assert (
        refused.text is None
        and "served off the pinned routing: provider 'Together' outside ['deepinfra']" in refused.error
    )
    assert not provider_mismatch(PIN, {"provider": "DeepInfra"})
    assert provider_mismatch(PIN, {})  # issue 48: under a provider pin, naming none is no pass


def test_the_run_logs_its_mode_and_routing_as_params():
    from src.runs.configure import run_record

    record = run_record(load_config(["model=qwen3_moe", "model.options.mode=batch"]), [])
    assert record.params["mode"] == "batch"
    assert json.loads(record.params["routing"])["only"] == ["deepinfra"]
    local = run_record(load_config(["model=smollm2_135m"]), [])
    assert "mode" not in local.params and "routing" not in local.params
