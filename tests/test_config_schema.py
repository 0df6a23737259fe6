"""The typed configuration (src/config/schema.py) and ``conf/`` agree.

Every composition of ``conf/`` a researcher can ask for types without an unknown key or a bad
value, and every setting the schema reads is written in ``conf/`` (where its one default lives),
so no value falls back to a default hidden in code. The OpenAI backend's options are the one
exception by design: their defaults are :class:`~src.backends.options.OpenAIOptions`' fields,
registered with Hydra, so a model file lists only what it changes.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from src.backends.options import OpenAIOptions
from src.config import budget as budget_keys
from src.config.schema import RUN_KEYS, Dimension, Generation, Model, Paths, Provider, RunConfig, Scoring, Tracking
from src.core.errors import ConfigError
from src.runs.configure import endpoint
from tests.helpers.hydra_conf import CONF, DIMENSIONS, MODELS, STRATEGIES, compose_conf

PROVIDERS = sorted(p.stem for p in (CONF / "provider").glob("*.yaml"))
CONDITIONS = sorted(p.stem for p in (CONF / "condition").glob("*.yaml"))
#: Model keys a model file may leave out, and what their absence means.
OPTIONAL_MODEL_KEYS = {
    "tokenizer": "prompt tokens are counted with the model id's tokenizer, else estimated",
    "price": "a local model: it costs nothing",
}
SECTIONS = {"paths": Paths, "generation": Generation, "scoring": Scoring, "mlflow": Tracking, "dimension": Dimension}

CASES = (
    [(f"model={m}",) for m in MODELS]
    + [(f"strategy={s}",) for s in STRATEGIES]
    + [(f"dimension={d}",) for d in DIMENSIONS]
    + [(f"condition={c}",) for c in CONDITIONS]
    + [
        ("model=qwen25_7b", "provider=openrouter"),
        ("model=qwen25_7b", "provider=vllm"),
        ("model=gpt41", "provider=openai"),
    ]
    + [("model=qwen25_7b", "provider=custom", "provider.served_model=my-model")]
)


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: ",".join(o))
def test_every_composition_of_conf_types_and_its_backend_options_too(overrides):
    config = RunConfig.from_hydra(compose_conf(*overrides))
    assert config.model.name and config.strategy.name and config.dimension.name
    if config.model.backend == "openai":
        model_id, options = endpoint(config)
        assert model_id and OpenAIOptions.from_mapping(options).base_url.startswith("http")


def test_every_setting_the_schema_reads_is_written_in_conf():
    data = OmegaConf.to_container(compose_conf(), resolve=True)
    assert set(RUN_KEYS) <= set(data), set(RUN_KEYS) - set(data)
    for name, cls in SECTIONS.items():
        assert set(data[name]) == _names(cls), (name, set(data[name]) ^ _names(cls))
    assert set(data["budget"]) == set(budget_keys.KEYS)
    assert {f"provider={p}" for p in PROVIDERS} == {case[1] for case in CASES if len(case) > 1}
    for model in MODELS:
        written = set(OmegaConf.to_container(compose_conf(f"model={model}"), resolve=True)["model"])
        missing = _names(Model) - written - set(OPTIONAL_MODEL_KEYS)
        assert not missing, f"conf/model/{model}.yaml does not set {sorted(missing)}"
    for provider in PROVIDERS:
        written = set(OmegaConf.to_container(compose_conf(f"provider={provider}"))["provider"])
        assert written == _names(Provider), (provider, written ^ _names(Provider))


@pytest.mark.parametrize(
    "override, key",
    [
        ("+generation.temprature=0.5", "generation.temprature"),
        ("+scoring.lowercased=true", "scoring.lowercased"),
        ("+model.options.max_concurency=4", "model.options.max_concurency"),
        ("budget.stale_after_s=0", "budget.stale_after_s"),
        ("warn_rate=1.5", "warn_rate"),
    ],
)
def test_a_typo_or_bad_value_is_one_error_naming_its_key(override, key):
    with pytest.raises(ConfigError) as info:
        config = RunConfig.from_hydra(compose_conf("model=qwen25_7b", override))
        OpenAIOptions.from_mapping(endpoint(config)[1])
    assert key in str(info.value) and "\n" not in str(info.value)
