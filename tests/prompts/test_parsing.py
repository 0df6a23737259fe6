"""Parser cases: every malformed form the models produce, and the failures it must report."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from src.prompts.parsing import ParsedAnswer, parse_answer

SPAN_CASES = [
    # (raw answer, expected predictions)
    ('["last week", "Friday"]', ["last week", "Friday"]),
    ("[]", []),
    ('```json\n["last week", "Friday"]\n```', ["last week", "Friday"]),
    ('```\n["1998"]\n```', ["1998"]),
    ('Here are the time expressions:\n["last week"]\nI hope this helps.', ["last week"]),
    ("['last week', 'Friday']", ["last week", "Friday"]),
    ('["last week", "Friday",]', ["last week", "Friday"]),
    ("['last week', 'Friday', ]", ["last week", "Friday"]),
    ('[  " last week ", "Friday\\n"]', ["last week", "Friday"]),
    ('["Friday", "last week", "Friday"]', ["Friday", "last week"]),
    ('["Friday", 3, null, ["nested"], {"text": "x"}, "today"]', ["Friday", "today"]),
    ('["", "   ", "now"]', ["now"]),
    ('{"spans": ["last week"]}', ["last week"]),
    ('{"answer": ["Monday"]}', ["Monday"]),
    ('{"Time Expressions": ["Monday"]}', ["Monday"]),
    ('{"timex": ["Monday"], "eventx": ["said"]}', ["Monday"]),
    ('{"result": {"spans": ["Monday"]}}', ["Monday"]),
    ('{"answer": "[\\"Monday\\"]"}', ["Monday"]),
    ('{"whatever": ["Monday"]}', ["Monday"]),
    ("{spans: ['Monday', 'Tuesday']}", ["Monday", "Tuesday"]),
    ("[\"the company's fiscal year\"]", ["the company's fiscal year"]),
    ("['the company\\'s year']", ["the company's year"]),
    ('\u201c[\u201cMonday\u201d]', ["Monday"]),
    ("[\u201cMonday\u201d, \u201cnext week\u201d]", ["Monday", "next week"]),
    ('<think>maybe ["wrong"]</think>["right"]', ["right"]),
    ('Candidates: ["a", "b", "c"]. Final answer: ["a", "b"]', ["a", "b"]),
    ("It's clear. The answer: ['now', 'then']", ["now", "then"]),
    ('See [1] for details.\n```json\n["March 3"]\n```', ["March 3"]),
    ('["March 3", "April', ["March 3"]),
    ('```json\n["March 3", "April 4",\n', ["March 3", "April 4"]),
    ('("Monday", "Tuesday")', None),  # a tuple literal is not an answer array
]


@pytest.mark.parametrize("raw, expected", SPAN_CASES)
def test_span_answers(raw, expected):
    parsed = parse_answer(raw, "timex", abductive=False)
    if expected is None:
        assert parsed.ok is False and parsed.predictions == [] and parsed.error
    else:
        assert parsed.ok, parsed.error
        assert parsed.error is None
        assert parsed.predictions == expected


ABDUCTIVE_CASES = [
    (
        '{"reasoning_steps": ["found a date", "kept it"], "spans": ["May 5"]}',
        ["May 5"], ["found a date", "kept it"],
    ),
    (
        "```json\n{'reasoning_steps': ['step one',], 'spans': ['May 5', 'May 5']}\n```",
        ["May 5"], ["step one"],
    ),
    (
        'Let me think. Candidates ["a", "b"].\n{"reasoning_steps": ["b is wrong"], "spans": ["a"]}\n'
        'Note that ["b"] was dropped.',
        ["a"], ["b is wrong"],
    ),
    ('{"reasoning": "one long thought", "events": ["said"]}', ["said"], ["one long thought"]),
    ('["said"]', ["said"], None),  # a plain array still answers an abductive prompt
    ('{"reasoning_steps": ["x"], "spans": ["said", "wen', ["said"], ["x"]),
]


@pytest.mark.parametrize("raw, predictions, steps", ABDUCTIVE_CASES)
def test_abductive_answers(raw, predictions, steps):
    parsed = parse_answer(raw, "eventx", abductive=True)
    assert parsed.ok, parsed.error
    assert parsed.predictions == predictions
    assert parsed.reasoning_steps == steps


COMP_CASES = [
    (
        '{"timex": ["Monday"], "eventx": ["said", "met"]}',
        [("Monday", "TIMEX"), ("said", "EVENT"), ("met", "EVENT")],
    ),
    ('{"timex": [], "eventx": ["said"]}', [("said", "EVENT")]),
    ('{"timex": ["today"]}', [("today", "TIMEX")]),
    ("{'Timex': ['today',], 'Events': ['rose', 'rose']}", [("today", "TIMEX"), ("rose", "EVENT")]),
    (
        '{"reasoning_steps": ["r"], "timex": ["today"], "eventx": ["rose"]}',
        [("today", "TIMEX"), ("rose", "EVENT")],
    ),
    ('{"answer": {"timex": ["today"], "eventx": []}}', [("today", "TIMEX")]),
    (
        '[{"text": "today", "label": "TIMEX"}, {"text": "rose", "label": "event"}, {"text": "x"}]',
        [("today", "TIMEX"), ("rose", "EVENT")],
    ),
    ('{"timex": ["today"], "eventx": ["today"]}', [("today", "TIMEX"), ("today", "EVENT")]),
]


@pytest.mark.parametrize("raw, expected", COMP_CASES)
def test_comp_answers(raw, expected):
    parsed = parse_answer(raw, "comp", abductive=False)
    assert parsed.ok, parsed.error
    assert [(p["text"], p["label"]) for p in parsed.predictions] == expected


def test_comp_abductive_keeps_reasoning():
    raw = '```json\n{"reasoning_steps": ["a", "b"], "timex": ["noon"], "eventx": ["left"]}\n```'
    parsed = parse_answer(raw, "comp", abductive=True)
    assert parsed.reasoning_steps == ["a", "b"]
    assert parsed.predictions == [{"text": "noon", "label": "TIMEX"}, {"text": "left", "label": "EVENT"}]


def test_comp_rejects_unlabelled_list():
    parsed = parse_answer('["today", "rose"]', "comp", abductive=False)
    assert parsed == ParsedAnswer([], None, False, parsed.error)
    assert "comp" in parsed.error


@pytest.mark.parametrize(
    "raw, reason",
    [
        (None, "no output"),
        ("", "empty"),
        ("   \n", "empty"),
        ("I could not find any time expressions.", "no JSON"),
        ("The answer is last week, Friday", "no JSON"),
        ("[last week, Friday]", "no JSON"),
        ('{"confidence": 0.3, "note": "n/a"}', "no timex answer"),
        ("[1, 2, 3]", "no timex answer"),
        ("<think>unfinished thinking [\"a\"", "empty"),
    ],
)
def test_failures_are_reported_not_raised(raw, reason):
    parsed = parse_answer(raw, "timex", abductive=False)
    assert parsed.ok is False
    assert parsed.predictions == []
    assert reason in parsed.error


def test_unknown_task_is_a_caller_error():
    with pytest.raises(ValueError, match="unknown task"):
        parse_answer("[]", "dates", abductive=False)


def test_deeply_nested_input_does_not_raise():
    parsed = parse_answer("[" * 5000 + "]" * 5000, "timex", abductive=False)
    assert isinstance(parsed, ParsedAnswer)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]{}\"',: abc\\\n`")), max_size=60))
def test_never_raises_on_bracket_soup(raw):
    for task in ("timex", "eventx", "comp"):
        for abductive in (False, True):
            parsed = parse_answer(raw, task, abductive)
            assert parsed.ok or parsed.predictions == []
            assert all(isinstance(p, (str, dict)) for p in parsed.predictions)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=15).filter(lambda s: s.strip()), max_size=6))
def test_roundtrip_of_well_formed_arrays(spans):
    import json

    parsed = parse_answer(json.dumps(spans), "eventx", abductive=False)
    assert parsed.ok
    assert parsed.predictions == list(dict.fromkeys(s.strip() for s in spans if s.strip()))
