"""One setting chooses the endpoint (``provider=``), and every backend option has a declared
default, so overrides of ``model.options.*`` need no ``+`` or ``++``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from src.backends.endpoint import EndpointError, resolve_endpoint
from src.config.schema import RunConfig
from src.core.errors import ConfigError
from src.runs.configure import endpoint

CONF = Path(__file__).resolve().parents[2] / "conf"
API_MODELS = sorted(
    path.stem for path in (CONF / "model").glob("*.yaml") if yaml.safe_load(path.read_text())["backend"] == "openai"
)


def endpoint_of(cfg):
    """The run's endpoint of a composition, typed as the entry point types it."""
    return endpoint(RunConfig.from_hydra(cfg))


def _compose(*overrides: str):
    # `provider=` once conf/config.yaml lists `- provider: null` in its defaults, `+provider=` before
    defaults = yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
    listed = any(isinstance(entry, dict) and "provider" in entry for entry in defaults)
    fixed = [o if listed or not o.startswith("provider=") else "+" + o for o in overrides]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=fixed)


MODEL = {"name": "qwen25_7b", "backend": "openai", "model_id": "qwen/qwen-2.5-7b-instruct"}
MODEL["options"] = {"base_url": "https://openrouter.ai/api/v1", "api_key_env": "OPENROUTER_API_KEY", "max_retries": 2}
PROVIDER = {
    "name": "vllm",
    "base_url": "http://10.0.0.5:8000/v1",
    "api_key_env": None,
    "model_ids": {"qwen25_7b": "Qwen/Qwen2.5-7B-Instruct"},
    "served_model": None,
    "options": {"schema_format": "auto"},
}


def test_no_provider_or_a_local_model_keeps_the_model_files_endpoint():
    assert resolve_endpoint(MODEL, None) == (MODEL["model_id"], MODEL["options"])
    local = {"name": "smollm2_135m", "backend": "llamacpp", "model_id": "smollm2-135m-gguf", "options": {"n_ctx": 8}}
    assert resolve_endpoint(local, PROVIDER) == ("smollm2-135m-gguf", {"n_ctx": 8})


def test_a_provider_redirects_url_key_and_id_and_its_options_win():
    model_id, options = resolve_endpoint(MODEL, PROVIDER)
    assert model_id == "Qwen/Qwen2.5-7B-Instruct"
    assert options == {
        "base_url": "http://10.0.0.5:8000/v1",
        "api_key_env": None,
        "max_retries": 2,
        "schema_format": "auto",
        "routing": None,  # a provider without routing (a self-hosted server) sends none
    }


def test_a_model_the_provider_does_not_name_is_one_line_naming_both():
    other = {**MODEL, "name": "llama3_8b"}
    with pytest.raises(EndpointError) as caught:
        resolve_endpoint(other, PROVIDER)
    message = str(caught.value)
    assert "provider vllm has no id for model llama3_8b" in message and "\n" not in message
    assert resolve_endpoint(other, {**PROVIDER, "served_model": "one-model"})[0] == "one-model"
    assert resolve_endpoint(other, {**PROVIDER, "model_ids": None})[0] == MODEL["model_id"]


def test_every_api_model_composes_to_valid_backend_options_at_their_one_default():
    """The defaults live in OpenAIOptions only; Hydra merges them under each model file's options."""
    from src.backends.options import OpenAIOptions

    defaults = OpenAIOptions().as_dict()
    for model in API_MODELS:
        options = _compose(f"model={model}").model.options
        composed = OmegaConf.to_container(options, resolve=True)
        assert set(composed) == set(defaults), model
        built = OpenAIOptions.from_mapping(composed)
        assert built.max_concurrency == defaults["max_concurrency"] and built.mode == "sync", model


@pytest.mark.parametrize("provider", ["vllm", "custom", "openrouter"])
def test_every_provider_serves_every_api_model_or_says_which_it_cannot(provider, monkeypatch):
    monkeypatch.setenv("TEMPGEN_BASE_URL", "http://gpu-node:8000/v1")
    monkeypatch.delenv("TEMPGEN_SERVED_MODEL", raising=False)
    monkeypatch.delenv("TEMPGEN_API_KEY_ENV", raising=False)
    mapped = yaml.safe_load((CONF / "provider" / f"{provider}.yaml").read_text())["model_ids"]
    if provider == "vllm":  # every open-weights model of the study has a served id
        open_weights = {m for m in API_MODELS if not _model_id(m).startswith("openai/")}
        assert open_weights <= set(mapped), sorted(open_weights - set(mapped))
    for model in API_MODELS:
        cfg = _compose(f"model={model}", f"provider={provider}")
        if mapped is not None and model not in mapped:  # e.g. custom without TEMPGEN_SERVED_MODEL: exit 2
            with pytest.raises(ConfigError, match=f"provider {provider} has no id for model {model}"):
                endpoint_of(cfg)
            continue
        model_id, options = endpoint_of(cfg)
        if provider == "vllm":
            assert options["base_url"] == "http://gpu-node:8000/v1" and options["api_key_env"] is None
            assert model_id == mapped[model] and "/" in model_id
        else:
            assert options["base_url"] == "https://openrouter.ai/api/v1" and model_id == cfg.model.model_id


def test_the_custom_provider_reads_its_endpoint_and_served_model_from_the_environment(monkeypatch):
    monkeypatch.setenv("TEMPGEN_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("TEMPGEN_SERVED_MODEL", "smollm2")
    monkeypatch.setenv("TEMPGEN_API_KEY_ENV", "MY_SERVER_KEY")
    cfg = _compose("model=qwen3_moe", "provider=custom", "model.options.max_concurrency=4")
    model_id, options = endpoint_of(cfg)
    assert model_id == "smollm2" and options["base_url"] == "http://127.0.0.1:8080/v1"
    assert options["api_key_env"] == "MY_SERVER_KEY" and options["schema_format"] == "auto"
    assert options["max_concurrency"] == 4  # the model's own options still apply


def test_without_a_provider_nothing_changes():
    cfg = _compose("model=qwen25_7b")
    assert endpoint_of(cfg) == ("qwen/qwen-2.5-7b-instruct", _options(cfg))


def test_a_bad_provider_base_url_is_a_config_error(monkeypatch):
    monkeypatch.setenv("TEMPGEN_BASE_URL", "gpu-node:8000")
    with pytest.raises(ConfigError, match="model.options.base_url: expected an http"):
        endpoint_of(_compose("model=qwen25_7b", "provider=vllm"))


def _model_id(model: str) -> str:
    return yaml.safe_load((CONF / "model" / f"{model}.yaml").read_text())["model_id"]


def _options(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.model.options, resolve=True)


def test_backend_options_override_without_plus_in_a_run_and_in_every_job_of_a_multirun():
    cfg = _compose("model=qwen25_7b", "model.options.max_concurrency=4", "model.options.min_tokens_per_s=null")
    assert cfg.model.options.max_concurrency == 4 and cfg.model.options.min_tokens_per_s is None
    # as the basic sweeper does: split the sweep into one override list per job, compose each
    sweep = [
        "model=qwen25_7b,llama3_8b",
        "model.options.base_url=http://a:1/v1,http://b:2/v1",
        "model.options.timeout_s=5",
    ]
    [batch] = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(sweep), None)
    assert len(batch) == 4
    seen = set()
    for job in batch:
        cfg = _compose(*job)
        seen.add((cfg.model.name, cfg.model.options.base_url))
        assert cfg.model.options.timeout_s == 5
        assert endpoint_of(cfg)[1]["base_url"] == cfg.model.options.base_url
    assert seen == {(m, u) for m in ("qwen25_7b", "llama3_8b") for u in ("http://a:1/v1", "http://b:2/v1")}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.options.schema_format=jsonschema", "model.options.schema_format: expected one of auto, strict"),
        ("model.options.min_tokens_per_s=0", "model.options.min_tokens_per_s: expected a number >= 0.001"),
    ],
)
def test_bad_option_values_are_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        endpoint_of(_compose("model=qwen25_7b", override))


def test_an_unknown_provider_is_one_line_listing_the_choices():
    from src.config.overrides import unknown_choice_error

    assert (
        unknown_choice_error(["provider=vlm"])
        == "provider: unknown 'vlm'; choose one of custom, openai, openrouter, vllm"
    )
    assert unknown_choice_error(["provider=null", "provider=vllm"]) is None
