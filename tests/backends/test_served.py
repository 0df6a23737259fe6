"""The served-model matching rule: provider spellings of one model match, other models do not."""

from __future__ import annotations

import pytest

from src.backends.served import is_mismatch, mismatch_counts, same_model, served_info


@pytest.mark.parametrize(
    "requested, served",
    [
        ("gpt-4o", "gpt-4o"),
        ("openai/gpt-4o", "gpt-4o-2024-08-06"),  # org prefix and a date suffix on one side
        ("gpt-4o-2024-08-06", "openai/gpt-4o"),
        ("claude-3-5-sonnet", "anthropic/claude-3-5-sonnet-20241022"),  # compact date
        ("meta-llama/llama-3.1-8b-instruct:free", "meta-llama/llama-3.1-8b-instruct"),  # routing tag
        ("meta-llama/llama-3.1-8b-instruct", "Meta-Llama/Llama-3.1-8B-Instruct:nitro"),  # case
        ("qwen/qwen-2.5-7b-instruct", None),  # nothing said: nothing to compare
        ("qwen/qwen-2.5-7b-instruct", ""),
    ],
)
def test_spellings_of_one_model_match(requested, served):
    assert same_model(requested, served) and not is_mismatch(requested, {"model": served} if served else {})


@pytest.mark.parametrize(
    "requested, served",
    [
        ("gpt-4o", "gpt-4o-mini"),
        ("gpt-4o-2024-05-13", "gpt-4o-2024-08-06"),  # two snapshots are two models
        ("qwen/qwen3-235b-a22b-2507", "qwen/qwen3-235b-a22b"),  # a version suffix is not a date
        ("qwen/qwen-2.5-7b-instruct", "fallback/other-model-7b"),
        ("meta-llama/llama-3.1-8b-instruct", "meta-llama/llama-3.1-70b-instruct:free"),
    ],
)
def test_other_models_do_not_match(requested, served):
    assert not same_model(requested, served) and is_mismatch(requested, {"model": served})


def test_served_info_keeps_only_what_the_provider_said():
    payload = {"model": "m", "system_fingerprint": "fp_1", "provider": "Together", "id": "x", "usage": {}}
    assert served_info(payload) == {"model": "m", "system_fingerprint": "fp_1", "provider": "Together"}
    assert served_info({"model": None, "provider": 3}) == {}


def test_mismatch_counts_by_served_model():
    records = [{"model": "a/m"}, {"model": "x"}, {"model": "x"}, {}, None, {"model": "m-20240101"}]
    assert mismatch_counts("m", records) == {"x": 2}


def test_off_pin_names_another_model_provider_or_quantization_and_on_a_pin_nothing_said_too():
    from src.backends.served import off_pin_reason

    pin = {"only": ["deepinfra"], "quantizations": ["fp8"], "allow_fallbacks": False}
    assert off_pin_reason("qwen/q", pin, {"model": "qwen/q", "provider": "DeepInfra", "quantization": "FP8"}) is None
    assert off_pin_reason("qwen/q", None, {"provider": "X"}) is None and off_pin_reason("qwen/q", None, {}) is None
    # issue 48: on a pinned run a reply that names nothing is named, not passed
    assert "names no provider" in off_pin_reason("qwen/q", pin, {})
    assert "names no provider" in off_pin_reason("qwen/q", pin, {"model": "qwen/q"})
    assert "names no model" in off_pin_reason("qwen/q", {"quantizations": ["fp8"]}, {})
    assert "quantization 'fp4'" in off_pin_reason("qwen/q", pin, {"provider": "DeepInfra", "quantization": "fp4"})
    assert "provider 'Together'" in off_pin_reason("qwen/q", pin, {"provider": "Together"})
    assert "served model 'other/m'" in off_pin_reason("qwen/q", pin, {"model": "other/m", "provider": "DeepInfra"})
    assert served_info({"provider": "DeepInfra", "quantization": "fp8", "cost": 1}) == {
        "provider": "DeepInfra",
        "quantization": "fp8",
    }
