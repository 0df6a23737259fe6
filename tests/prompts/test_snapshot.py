"""The default prompts (compact answers, chat form) are byte-identical to the snapshot taken
before answer formats and prompt forms existed (tests/prompts/snapshots/compact_chat.json).
The A+I and A+D+I entries were retaken once, on purpose, when the abductive exemplars' steps
became two short unquoted steps (``exemplars._reasoning_steps``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from src.prompts import (
    STRATEGY_NAMES,
    build_messages,
    build_request_parts,
    get_strategy,
    select_exemplars,
)
from src.study import TASK_ORDER as TASKS
from tests.helpers.records import build_train_records

SNAPSHOT = json.loads((Path(__file__).parent / "snapshots" / "compact_chat.json").read_text(encoding="utf-8"))
INPUT = "The talks resumed on Tuesday, two weeks after the strike began."


def _default_case(name, task):
    strategy = get_strategy(name, k=3 if "I" in name.split("+") else None)
    return strategy, select_exemplars(build_train_records(), strategy.k, 0, task)


def test_snapshot_covers_every_strategy_and_task():
    assert sorted(SNAPSHOT) == sorted(f"{name}/{task}" for name in STRATEGY_NAMES for task in TASKS)


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("task", TASKS)
def test_default_prompts_are_byte_identical(name, task):
    strategy, exemplars = _default_case(name, task)
    expected = SNAPSHOT[f"{name}/{task}"]
    for messages in (
        build_messages(strategy, task, INPUT, exemplars),
        build_messages(strategy, task, INPUT, exemplars, answer_format="compact", prompt_form="chat"),
        build_request_parts(strategy, task, INPUT, exemplars).messages,
    ):
        assert [list(m) for m in messages] == expected["messages"]
        assert hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode()).hexdigest() == expected["sha256"]
