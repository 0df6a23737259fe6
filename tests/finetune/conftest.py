"""Fixtures of the fine-tuning tests: synthetic records and a tiny random model (builders in tests.helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.data.schema import Record, Span, check_spans
from tests.helpers.finetune_data import make_synthetic_records, minilm_folder


@pytest.fixture
def synthetic_records() -> list[Record]:
    return make_synthetic_records(64)


@pytest.fixture
def boundary_record() -> Record:
    """Spans that start or end inside a run of word characters."""
    text = "In the 1990s and mid-2000s, sales doubled within 3days of launch."
    pieces = [("1990", "TIMEX"), ("2000s", "TIMEX"), ("3days", "TIMEX"), ("doubled", "EVENT"), ("launch", "EVENT")]
    spans = []
    for piece, label in pieces:
        start = text.index(piece)
        spans.append(Span(start, start + len(piece), piece, label))
    spans[2] = Span(spans[2].start, spans[2].start + 1, "3", "TIMEX")
    check_spans(text, spans, "boundary")
    return Record("boundary", "doc-b", text, spans, "synthetic")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the MiniLM vocabulary, saved as a checkpoint."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    from src.finetune.bio import tag_set
    from src.finetune.predict import save_label_map

    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    labels = tag_set("TIMEX")
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny_checkpoint")
    BertForTokenClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    save_label_map(directory, labels, "TIMEX", max_length=24, task="timex", model="tiny-bert")
    return directory
