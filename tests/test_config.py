"""The real ``conf/`` composes for every model, strategy and dimension, as ``src.run`` would."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from src.core.params import lookup
from src.prompts import strategy_from_config
from tests.helpers.hydra_conf import CONF, DIMENSIONS, MODELS, STRATEGIES, compose_conf


def test_default_configuration_is_the_embedded_model_and_reads_params_yaml():
    cfg = compose_conf()
    assert cfg.model.name == "smollm2_135m" and cfg.model.backend == "llamacpp"
    # the embedded model's own condition reaches the run config (conf/model/smollm2_135m.yaml)
    assert cfg.prompt.form == "completion" and cfg.generation.constrained and cfg.generation.spans_from_input
    assert cfg.generation.stop_at_repeated_span
    assert cfg.seed == lookup("seed")
    assert cfg.paths.prepared == lookup("paths.prepared")
    assert cfg.mlflow.run_name == "smollm2_135m-I"


@pytest.mark.parametrize("model", MODELS)
def test_every_model_composes_with_the_required_fields(model):
    cfg = compose_conf(f"model={model}")
    for key in ("name", "family", "backend", "model_id"):
        assert cfg.model[key] is not None, f"{model}: {key} missing"
    undisclosed = ("architecture", "params_total_b", "params_active_b")
    if cfg.model.architecture is None:  # a provider that does not say (GPT-4.1): all three unknown, none invented
        assert all(cfg.model[key] is None for key in undisclosed), f"{model}: architecture null but sizes given"
    else:
        assert cfg.model.architecture in ("dense", "moe")
        assert cfg.model.params_active_b <= cfg.model.params_total_b
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_composes_and_validates(strategy):
    cfg = compose_conf(f"strategy={strategy}")
    parsed = strategy_from_config(cfg.strategy)
    assert parsed.name == strategy
    assert parsed.inductive_plus == ("I" in strategy.split("+"))


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_every_dimension_lists_known_tasks_and_datasets(dimension):
    cfg = compose_conf(f"dimension={dimension}")
    assert set(cfg.dimension.datasets) == {"timex", "eventx", "comp"}
    known = {"base", "adv", "adv_p", "t2c", "voc", "len"}
    for datasets in cfg.dimension.datasets.values():
        assert set(datasets) <= known


def test_the_study_has_thirteen_task_dataset_pairs():
    cfg = compose_conf("dimension=all")
    assert sum(len(v) for v in cfg.dimension.datasets.values()) == 13


def test_an_api_model_keeps_the_chat_form_and_free_decoding():
    cfg = compose_conf("model=qwen3_moe")
    assert cfg.prompt.form == "chat" and not cfg.generation.constrained and not cfg.generation.spans_from_input
    assert not cfg.generation.stop_at_repeated_span


def test_the_study_condition():
    cfg = compose_conf("model=qwen3_moe", "condition=study_condition")
    assert cfg.prompt.answer_format == "study" and cfg.generation.constrained and cfg.generation.temperature == 0
    assert list(cfg.scoring.variants) == ["released", "released_best", "released_char", "released_char_best"]


def test_the_reasoning_allowance_is_the_model_files_reasoning_bound():
    """One number: the model file bounds its reasoning list; the run adds that bound to the
    abductive budget (no profile restates it)."""
    import yaml

    model_file = yaml.safe_load((CONF / "model" / "smollm2_135m.yaml").read_text(encoding="utf-8"))
    bound = model_file["options"]["list_token_budgets"]["reasoning_steps"]
    assert compose_conf("model=smollm2_135m").generation.max_tokens_reasoning == bound == 16
    assert compose_conf("model=qwen3_moe").generation.max_tokens_reasoning is None  # no bound: nothing added
    assert compose_conf("generation.max_tokens_reasoning=8").generation.max_tokens_reasoning == 8  # an override wins


def test_the_old_experiment_group_name_is_a_clear_error():
    from src.config.overrides import renamed_group_error

    message = renamed_group_error(["model=qwen3_moe", "experiment=study_condition"])
    assert message is not None and "'condition=study_condition'" in message
    assert renamed_group_error(["+experiment=x"]) is not None
    assert renamed_group_error(["condition=study_condition", "mlflow.experiment=other"]) is None


def test_every_prompt_condition_composes():
    names = sorted(p.stem for p in (CONF / "condition").glob("*.yaml"))
    assert names == ["model_default", "study_condition"]
    for name in names:
        OmegaConf.to_container(compose_conf(f"condition={name}"), resolve=True)
