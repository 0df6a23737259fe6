"""Answer-format sets and prompt forms: the study's structure, its one abductive example, the
completion form, request parts, and the registries read from src.study."""

from __future__ import annotations

import json
import re

import pytest

from src import study
from src.prompts import (
    STRATEGY_NAMES,
    PromptOptions,
    build_messages,
    build_request_parts,
    get_strategy,
    gold_answer,
    parsing,
    select_exemplars,
    strategies,
    target_spans,
    templates,
)
from src.prompts.answer_schema import answer_schema, final_span_list, request_schema
from src.study import TASK_ORDER as TASKS
from tests.helpers.records import build_train_records
from tests.helpers.schema_check import is_valid

INPUT = "The talks resumed on Tuesday, two weeks after the strike began."
ALL_CASES = [(name, task) for name in STRATEGY_NAMES for task in TASKS]


@pytest.fixture(scope="module")
def train_records():
    return build_train_records()


def _case(name, task, train_records, **kwargs):
    strategy = get_strategy(name, k=3 if "I" in name.split("+") else None)
    exemplars = select_exemplars(train_records, strategy.k, 0, task)
    return strategy, exemplars, build_messages(strategy, task, INPUT, exemplars, **kwargs)


def _parts_in_order(user, strategy, task, output_format):
    order = [user.index(templates.TASK_DEFINITIONS[task])]
    if strategy.deductive:
        order.append(user.index(templates.DEDUCTIVE[task]))
    if strategy.abductive:
        order.append(user.index("Abductive reasoning:"))
    if strategy.inductive:
        order.append(user.index("Inductive reasoning:"))
    order.append(user.index(output_format))
    if strategy.inductive:
        order.append(user.index(templates.EXAMPLES_HEADER))
    order.append(user.rindex(INPUT))
    return order


# ----- the study's answer formats -------------------------------------------------------------------


@pytest.mark.parametrize("name,task", ALL_CASES)
def test_study_prompts_keep_the_structure(name, task, train_records):
    strategy, exemplars, messages = _case(name, task, train_records, answer_format="study")
    assert [role for role, _ in messages] == ["system", "user"] and messages[0][1] == templates.SYSTEM_ROLE
    user = messages[1][1]
    output_format = templates.STUDY_OUTPUT_FORMATS[(task, strategy.abductive)]
    order = _parts_in_order(user, strategy, task, output_format)
    assert order == sorted(order)
    assert user.endswith("Text: " + INPUT)
    # exactly one structured example, in abductive prompts only; it validates
    assert user.count(templates.STUDY_EXAMPLE_TEXT) == (2 if strategy.abductive else 0)  # text + its "text" key
    if strategy.abductive:
        example = templates.study_example_answer(task)
        assert is_valid(example, answer_schema(task, True, "study"))
        assert json.dumps(example, ensure_ascii=False) in user
        assert user.count("An example of the format:") == 1
    # the exemplars' answers follow the study format and parse back, well-formed
    answers = re.findall(r"^Example \d+\nText: .*\nOutput: (.*)$", user, flags=re.MULTILINE)
    assert len(answers) == len(exemplars)
    for record, answer in zip(exemplars, answers):
        assert answer == gold_answer(record, task, strategy.abductive, "study")
        parsed = parsing.parse_answer(answer, task, strategy.abductive, answer_format="study")
        assert parsed.ok and parsed.well_formed
        if strategy.abductive:
            assert json.loads(answer)[0]["text"] == record.text


def test_study_formats_name_the_study_keys():
    formats = templates.STUDY_OUTPUT_FORMATS
    assert "JSON array of strings" in formats[("timex", False)] and "each listed once" in formats[("timex", False)]
    assert '"time_expressions": [...], "events": [...]' in formats[("comp", False)]
    for task, key in (("timex", '"time_expressions"'), ("eventx", '"events"')):
        assert key in formats[(task, True)] and '"reasoning_steps"' in formats[(task, True)]
        assert '"text"' in formats[(task, True)] and "JSON list" in formats[(task, True)]
    assert '"reasoning_steps"' not in formats[("comp", False)]
    # the example sentence is the project's own, and its spans occur in it
    for spans in templates.STUDY_EXAMPLE_SPANS.values():
        assert all(span in templates.STUDY_EXAMPLE_TEXT for span in spans)


# ----- the completion form ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["compact", "study"])
@pytest.mark.parametrize("name,task", ALL_CASES)
def test_completion_form(name, task, fmt, train_records):
    strategy, exemplars, messages = _case(name, task, train_records, answer_format=fmt, prompt_form="completion")
    assert len(messages) == 1 and messages[0][0] == "user"
    text = messages[0][1]
    assert text.startswith(templates.SYSTEM_ROLE + "\n\n")
    cue = templates.completion_cue(task, strategy.abductive)
    assert text.endswith("Text: " + INPUT + "\n" + cue) and text.count(INPUT) == 1
    assert "Example 1" not in text
    output_format = templates.completion_output_format(task, strategy.abductive, fmt)
    order = _parts_in_order(text, strategy, task, output_format)
    assert order == sorted(order)
    # exemplars are Text / answer-line pairs, and their answers parse back as continuations
    for record in exemplars:
        pair = "Text: " + record.text + "\n" + strategies.completion_answer(record, task, strategy.abductive, fmt)
        assert pair in text
        continuation = pair[len("Text: " + record.text + "\n" + cue) :]
        parsed = parsing.parse_answer(continuation + "\n\nText: more", task, strategy.abductive, fmt, "completion")
        assert parsed.ok and parsed.well_formed, continuation
        spans = target_spans(record, task)
        got = [p["text"] if isinstance(p, dict) else p for p in parsed.predictions]
        assert sorted(set(got)) == sorted({s.text for s in spans})
    if not strategy.abductive and task != "comp":
        label = templates.COMPLETION_LABELS[study.TASK_LABELS[task][0]]
        assert cue == label + ":"
        assert all(f"\n{label}: [" in text for _ in exemplars)
    if not strategy.abductive and task == "comp":  # one JSON object, constrained like every answer
        assert cue == "Time expressions and event triggers (JSON):"
        assert all(f"\n{cue} {{" in text for _ in exemplars)
    if strategy.abductive:
        assert cue.startswith("Reasoning steps and") and cue.endswith("(JSON):")


@pytest.mark.parametrize("fmt", ["compact", "study"])
@pytest.mark.parametrize("form", ["chat", "completion"])
@pytest.mark.parametrize("constrained", [False, True])
def test_request_parts(fmt, form, constrained, train_records):
    for name, task in ALL_CASES:
        strategy, exemplars, messages = _case(name, task, train_records, answer_format=fmt, prompt_form=form)
        parts = build_request_parts(strategy, task, INPUT, exemplars, PromptOptions(fmt, form, constrained))
        assert parts.messages == messages
        assert parts.completion is (form == "completion")
        assert parts.response_schema == request_schema(task, strategy, fmt, constrained, form)
        assert parts.stop_at_repeat is None
        hash(parts)
        stopping = build_request_parts(
            strategy, task, INPUT, exemplars, PromptOptions(fmt, form, constrained, stop_at_repeated_span=True)
        )
        assert stopping.stop_at_repeat == final_span_list(task, strategy.abductive, fmt)
        assert stopping.messages == parts.messages and stopping.response_schema == parts.response_schema


def test_bad_format_or_form(train_records):
    with pytest.raises(ValueError, match="answer format"):
        build_messages("D", "timex", INPUT, answer_format="json")
    with pytest.raises(ValueError, match="prompt form"):
        build_messages("D", "timex", INPUT, prompt_form="raw")


# ----- registries from src.study ------------------------------------------------------------------


#: What a strategy name's letters stand for, written out here: a wrong table in the code fails.
LETTER_PARTS = {"A": "abductive", "D": "deductive", "I": "inductive"}


@pytest.mark.parametrize("name", study.STRATEGY_ORDER)
def test_each_study_strategy_prompts_exactly_its_reasoning_parts(name, train_records):
    wanted = {LETTER_PARTS[letter] for letter in name.split("+")}
    for task in study.TASK_ORDER:
        for form in ("chat", "completion"):
            _, exemplars, messages = _case(name, task, train_records, prompt_form=form)
            user = messages[-1][1]
            present = {part for part in templates.REASONING_TEMPLATES if templates.reasoning_text(part, task) in user}
            assert present == wanted, (task, form)
            assert len(exemplars) == (3 if "inductive" in wanted else 0)


def test_study_tasks_are_the_prompted_ones_and_comp_answers_carry_its_labels():
    for task in study.TASK_ORDER:
        assert build_messages("D", task, INPUT)[-1][1].endswith(INPUT)
    with pytest.raises(ValueError, match="unknown task"):
        build_messages("D", "timex3", INPUT)
    parsed = parsing.parse_answer('{"time_expressions": ["Tuesday"], "events": ["resumed"]}', "comp", False)
    assert parsed.predictions == [{"text": "Tuesday", "label": "TIMEX"}, {"text": "resumed", "label": "EVENT"}]
    assert tuple(p["label"] for p in parsed.predictions) == study.TASK_LABELS["comp"] == ("TIMEX", "EVENT")


def test_every_reasoning_part_and_task_has_its_templates():
    assert set(templates.REASONING_TEMPLATES) == {part.name for part in study.REASONING_PARTS}
    for task in study.TASK_ORDER:
        assert task in templates.TASK_DEFINITIONS and task in templates.TARGET_NOUN
        for part in templates.REASONING_TEMPLATES:
            assert templates.reasoning_text(part, task)
        for abductive in (False, True):
            for fmt in templates.OUTPUT_FORMAT_SETS:
                assert (task, abductive) in templates.OUTPUT_FORMAT_SETS[fmt]
    for label in study.LABELS:
        assert label in templates.COMPLETION_LABELS and label in templates.LABEL_NOUN
