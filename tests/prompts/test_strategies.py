"""Every strategy x task prompt: structure, exemplars iff inductive, format, determinism."""

from __future__ import annotations

import json
import re

import pytest

from src.prompts import (
    STRATEGY_NAMES,
    Strategy,
    build_messages,
    components_of,
    get_strategy,
    gold_answer,
    select_exemplars,
    strategy_from_config,
    target_spans,
    templates,
)
from src.prompts.answer_schema import REASONING_MAX_CHARS, REASONING_MAX_STEPS
from src.study import TASK_ORDER as TASKS
from tests.helpers.records import build_train_records, make_record


@pytest.fixture
def train_records():
    return build_train_records()


INPUT = "The talks resumed on Tuesday, two weeks after the strike began."
ALL_CASES = [(name, task) for name in STRATEGY_NAMES for task in TASKS]


def _messages(name, task, train_records, k=3, seed=0):
    strategy = get_strategy(name, k=k if "I" in name.split("+") else None)
    exemplars = select_exemplars(train_records, strategy.k, seed, task)
    return strategy, exemplars, build_messages(strategy, task, INPUT, exemplars)


@pytest.mark.parametrize("name,task", ALL_CASES)
def test_prompt_structure_and_input_last(name, task, train_records):
    strategy, exemplars, messages = _messages(name, task, train_records)
    assert [role for role, _ in messages] == ["system", "user"]
    system, user = messages[0][1], messages[1][1]
    assert system == templates.SYSTEM_ROLE
    assert user.endswith("Text: " + INPUT)
    assert user.count(INPUT) == 1
    # the parts come in the study's order: task, reasoning, format, exemplars, input
    order = [user.index(templates.TASK_DEFINITIONS[task])]
    if strategy.deductive:
        order.append(user.index(templates.DEDUCTIVE[task]))
    if strategy.abductive:
        order.append(user.index("Abductive reasoning:"))
    if strategy.inductive:
        order.append(user.index("Inductive reasoning:"))
    order.append(user.index(templates.OUTPUT_FORMATS[(task, strategy.abductive)]))
    if strategy.inductive:
        order.append(user.index(templates.EXAMPLES_HEADER))
    order.append(user.index(INPUT))
    assert order == sorted(order)


@pytest.mark.parametrize("name,task", ALL_CASES)
def test_exemplars_present_iff_inductive(name, task, train_records):
    strategy, exemplars, messages = _messages(name, task, train_records, k=3)
    user = messages[1][1]
    shown = re.findall(r"^Example (\d+)$", user, flags=re.MULTILINE)
    if strategy.inductive:
        assert shown == ["1", "2", "3"]
        for record in exemplars:
            assert f"Text: {record.text}\nOutput: " in user
    else:
        assert shown == [] and templates.EXAMPLES_HEADER not in user
        assert "Inductive reasoning:" not in user


@pytest.mark.parametrize("name,task", ALL_CASES)
def test_asks_for_the_answer_format_and_exemplars_follow_it(name, task, train_records):
    strategy, exemplars, messages = _messages(name, task, train_records, k=3)
    user = messages[1][1]
    abductive = strategy.abductive
    assert templates.OUTPUT_FORMATS[(task, abductive)] in user
    assert ('"reasoning_steps"' in user) is abductive
    if task == "comp":
        assert '"timex"' in user and '"eventx"' in user
    else:
        assert ("JSON array" in user) is not abductive
    answers = [
        json.loads(line[len("Output: ") :])
        for line in user.splitlines()
        if line.startswith("Output: {") or line.startswith("Output: [")
    ]
    assert len(answers) == len(exemplars)
    for record, answer in zip(exemplars, answers):
        timex = [s.text for s in target_spans(record, "timex")]
        events = [s.text for s in target_spans(record, "eventx")]
        if task == "comp":
            expected_keys = {"timex", "eventx"} | ({"reasoning_steps"} if abductive else set())
            assert set(answer) == expected_keys
            assert answer["timex"] == list(dict.fromkeys(timex))
            assert answer["eventx"] == list(dict.fromkeys(events))
        else:
            strings = timex if task == "timex" else events
            spans = answer["spans"] if abductive else answer
            assert spans == list(dict.fromkeys(strings))
            if abductive:
                assert set(answer) == {"reasoning_steps", "spans"}
        if abductive:
            steps = answer["reasoning_steps"]
            assert 1 <= len(steps) <= 3 and all(isinstance(step, str) and step for step in steps)


@pytest.mark.parametrize("name,task", ALL_CASES)
def test_messages_are_deterministic_and_hashable(name, task, train_records):
    first = _messages(name, task, train_records)[2]
    second = _messages(name, task, list(reversed(train_records)))[2]
    assert first == second
    hash(first)


def test_definitions_differ_by_reasoning_type(train_records):
    user = {name: _messages(name, "eventx", train_records)[2][1][1] for name in STRATEGY_NAMES}
    assert "head word" in user["D"] and "head word" not in user["I"] and "head word" not in user["A"]
    assert "candidate" in user["A"] and "candidate" not in user["D"]
    timex_d = _messages("D", "timex", train_records)[2][1][1]
    assert "determiners" in timex_d and "preposition" in timex_d
    comp_d = _messages("D", "comp", train_records)[2][1][1]
    assert "A valid time expression span" in comp_d and "A valid event trigger span" in comp_d


def test_abductive_exemplar_steps_name_the_gold_candidates():
    record = make_record(
        "r",
        "Sales rose last week and fell on Friday.",
        [("rose", "EVENT"), ("last week", "TIMEX"), ("fell", "EVENT"), ("Friday", "TIMEX")],
    )
    answer = json.loads(gold_answer(record, "timex", abductive=True))
    assert answer["spans"] == ["last week", "Friday"]
    assert answer["reasoning_steps"] == ["Candidates: last week, Friday", "No overlap: keep all 2."]
    comp = json.loads(gold_answer(record, "comp", abductive=False))
    assert comp == {"timex": ["last week", "Friday"], "eventx": ["rose", "fell"]}


def test_gold_answer_lists_a_repeated_string_once():
    record = make_record("r", "He said it and she said no.", [("said", "EVENT"), ("said", "EVENT")])
    assert json.loads(gold_answer(record, "eventx", abductive=False)) == ["said"]


def test_bad_calls_fail_clearly(train_records):
    exemplars = select_exemplars(train_records, 3, 0, "timex")
    with pytest.raises(ValueError, match="no exemplars"):
        build_messages("I", "timex", INPUT, ())
    with pytest.raises(ValueError, match="takes no exemplars"):
        build_messages("D", "timex", INPUT, exemplars)
    with pytest.raises(ValueError, match="unknown task"):
        build_messages("D", "dates", INPUT)
    with pytest.raises(ValueError, match="empty"):
        build_messages("D", "timex", "  ")
    with pytest.raises(ValueError, match="strategy name"):
        build_messages("I+X", "timex", INPUT)


def test_strategy_names_and_components():
    assert components_of("A+D+I") == {"inductive": True, "deductive": True, "abductive": True}
    assert components_of("D") == {"inductive": False, "deductive": True, "abductive": False}
    for bad in ("", "I+I", "DI", "B", "D+"):
        with pytest.raises(ValueError):
            components_of(bad)
    assert [get_strategy(n).inductive_plus for n in STRATEGY_NAMES] == [True, False, False, True, True, False, True]
    assert get_strategy("A+I").max_tokens > get_strategy("I").max_tokens
    with pytest.raises(ValueError, match="needs components"):
        Strategy(name="D+I", inductive=False, deductive=True, abductive=False)
    with pytest.raises(ValueError, match="k must be 0"):
        Strategy(name="D", inductive=False, deductive=True, abductive=False, k=5)
    with pytest.raises(ValueError, match="k >= 1"):
        Strategy(name="I", inductive=True, deductive=False, abductive=False, k=0)


def test_strategy_from_config_derives_the_reasoning_types_from_the_name():
    cfg = {"name": "A+I", "k": 8, "max_tokens": 1024}
    strategy = strategy_from_config(cfg)
    assert (strategy.k, strategy.max_tokens_document) == (8, 1024)
    assert (strategy.inductive, strategy.deductive, strategy.abductive, strategy.inductive_plus) == (
        True,
        False,
        True,
        True,
    )
    deductive = strategy_from_config({"name": "D", "k": 0, "max_tokens": 512, "max_tokens_document": 1024})
    assert (deductive.inductive, deductive.deductive, deductive.abductive, deductive.inductive_plus) == (
        False,
        True,
        False,
        False,
    )
    with pytest.raises(ValueError, match="missing key"):
        strategy_from_config({k: v for k, v in cfg.items() if k != "k"})
    # what the name fixes cannot be restated (and silently contradict it)
    for key, value in (("components", {"inductive": True}), ("inductive_plus", True), ("display_name", "A+I")):
        with pytest.raises(ValueError, match=f"unknown key.*{key}"):
            strategy_from_config({**cfg, key: value})
    with pytest.raises(ValueError, match="strategy name"):
        strategy_from_config({**cfg, "name": "A+X"})


def test_abductive_exemplar_steps_fit_the_bound_a_constrained_answer_allows():
    """The 135M model copies its exemplars' steps: steps longer than the schema's bound, or
    quoted candidates (each quote two characters), left it no tokens for the spans."""
    long_names = ["every month", "the last three years", "this month"]
    spans = [(name, "TIMEX") for name in long_names]
    record = make_record("r", "Sales every month for the last three years until this month.", spans)
    steps = json.loads(gold_answer(record, "timex", abductive=True))["reasoning_steps"]
    assert steps == ["Candidates: every month ...", "No overlap: keep all 3."]
    text = "It ran the two and a half years since the first quarter of 1998."
    one_long = make_record("s", text, [("the two and a half years since the first quarter of 1998", "TIMEX")])
    steps = json.loads(gold_answer(one_long, "timex", abductive=True))["reasoning_steps"]
    assert steps == ["Candidates: the two and a half ...", "No overlap: keep it."]
    empty = make_record("t", "Nothing happened.", [])
    assert json.loads(gold_answer(empty, "eventx", abductive=True))["reasoning_steps"] == [
        "No candidates.",
        "Nothing to keep.",
    ]
    for record_, task in ((record, "timex"), (one_long, "timex"), (empty, "comp")):
        steps = json.loads(gold_answer(record_, task, abductive=True))["reasoning_steps"]
        assert len(steps) <= REASONING_MAX_STEPS
        assert all(len(step) <= REASONING_MAX_CHARS and '"' not in step for step in steps)
