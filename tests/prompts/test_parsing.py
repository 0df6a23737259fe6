"""Parser cases: every malformed form the models produce, and the failures it must report."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from src.prompts.parsing import PARSER_ERROR, ParsedAnswer, parse_answer

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
    ('["the company\'s fiscal year"]', ["the company's fiscal year"]),
    ("['the company\\'s year']", ["the company's year"]),
    ("\u201c[\u201cMonday\u201d]", ["Monday"]),
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
        ["May 5"],
        ["found a date", "kept it"],
    ),
    (
        "```json\n{'reasoning_steps': ['step one',], 'spans': ['May 5', 'May 5']}\n```",
        ["May 5"],
        ["step one"],
    ),
    (
        'Let me think. Candidates ["a", "b"].\n{"reasoning_steps": ["b is wrong"], "spans": ["a"]}\n'
        'Note that ["b"] was dropped.',
        ["a"],
        ["b is wrong"],
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
        ('<think>unfinished thinking ["a"', "empty"),
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


def test_deeply_nested_input_is_reported_not_parsed():
    # too deep for the decoders: reported as such, not by the parser's catch-all
    assert parse_answer("[" * 5000 + "]" * 5000, "timex", abductive=False) == ParsedAnswer(
        [], None, False, "no JSON value found"
    )
    # decodable, but a list of lists holds no span
    assert parse_answer("[" * 50 + "]" * 50, "timex", abductive=False) == ParsedAnswer(
        [], None, False, "JSON found (list) but no timex answer in it"
    )


_FAILURE_REASONS = ("no output", "empty output", "no JSON value found", "JSON found (", "answer cut off")
#: An empty prediction marked ok needs an empty list in the text (``[]``, ``[""]``): never a
#: garbled or cut-off answer read as "nothing found".
_EMPTY_LIST = re.compile(r"\[[\s'\",\\]*\]")


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]{}\"',: abc\\\n`")), max_size=60))
def test_bracket_soup_is_parsed_or_reported_never_caught(raw):
    for task in ("timex", "eventx", "comp"):
        for abductive in (False, True):
            for answer_format in ("compact", "study"):
                parsed = parse_answer(raw, task, abductive, answer_format=answer_format)
                assert not (parsed.error or "").startswith(PARSER_ERROR), parsed.error
                if parsed.ok:
                    assert parsed.error is None
                    for p in parsed.predictions:
                        if task == "comp":
                            assert set(p) == {"text", "label"} and p["label"] in ("TIMEX", "EVENT")
                            p = p["text"]
                        assert isinstance(p, str) and p and p == p.strip()
                    if not parsed.predictions:
                        assert _EMPTY_LIST.search(raw), (raw, task, abductive, answer_format)
                else:
                    assert parsed.predictions == [] and not parsed.well_formed
                    assert parsed.error.startswith(_FAILURE_REASONS), parsed.error


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=15).filter(lambda s: s.strip()), max_size=6))
def test_roundtrip_of_well_formed_arrays(spans):
    import json

    parsed = parse_answer(json.dumps(spans), "eventx", abductive=False)
    assert parsed.ok
    assert parsed.predictions == list(dict.fromkeys(s.strip() for s in spans if s.strip()))


# ----- garbled answers are failures, not empty predictions ---------------------------------------


@pytest.mark.parametrize(
    "raw, task, abductive",
    [
        ('{"timex": [1, 2], "eventx": ["said"]}', "comp", False),
        ('{"timex": "Monday", "eventx": ["said"]}', "comp", False),
        ('{"timex": ["Monday"], "eventx": "none"}', "comp", False),
        ('{"spans": "Monday"}', "timex", True),
        ("['':", "timex", False),
        ('["', "timex", False),
    ],
)
def test_garbled_answers_fail(raw, task, abductive):
    parsed = parse_answer(raw, task, abductive)
    assert parsed.ok is False and parsed.predictions == [] and not parsed.well_formed
    assert parsed.error.startswith(("JSON found (", "no JSON value found")), parsed.error


def test_answer_cut_off_after_its_reasoning_is_a_failure():
    # the reasoning list inside the cut object must not be read as the spans
    parsed = parse_answer('{"reasoning_steps": ["Monday is a date", "keep it"], "spans": [', "timex", True)
    assert parsed == ParsedAnswer([], ["Monday is a date", "keep it"], False, parsed.error)
    assert parsed.error.startswith("answer cut off")
    study = parse_answer('[{"text": "On Monday.", "reasoning_steps": ["a", "b', "timex", True, answer_format="study")
    assert study.ok is False and study.predictions == [] and study.error.startswith("answer cut off")
    # an explicitly empty span list that lost its closing brace is an empty answer
    empty = parse_answer('{"reasoning_steps": ["none"], "spans": []', "timex", True)
    assert empty.ok and empty.predictions == [] and not empty.well_formed


# ----- the study's formats ------------------------------------------------------------------------

STUDY_ABDUCTIVE = (
    '[{"text": "He left on Monday and returned a week later.", "time_expressions": ["Monday", "a week later"], '
    '"reasoning_steps": ["Monday is a date", "a week later is relative"]}]'
)


def test_study_abductive_answer_is_read_and_well_formed():
    parsed = parse_answer(STUDY_ABDUCTIVE, "timex", True, answer_format="study")
    assert parsed == ParsedAnswer(
        ["Monday", "a week later"], ["Monday is a date", "a week later is relative"], True, None, True
    )
    # the compact format reads it too, but it is not that format's shape
    compact = parse_answer(STUDY_ABDUCTIVE, "timex", True)
    assert compact.predictions == ["Monday", "a week later"] and not compact.well_formed


def test_study_abductive_objects_are_unioned_in_order():
    raw = (
        '[{"text": "a", "events": ["said", "left"], "reasoning_steps": ["one"]},'
        ' {"text": "b", "events": ["left", "came"], "reasoning_steps": ["two", "three"]}]'
    )
    parsed = parse_answer(raw, "eventx", True, answer_format="study")
    assert parsed.predictions == ["said", "left", "came"]
    assert parsed.reasoning_steps == ["one", "two", "three"]
    assert parsed.ok and parsed.well_formed


def test_study_abductive_input_text_is_never_a_prediction():
    raw = '[{"text": "On Monday he left.", "time_expressions": [], "reasoning_steps": ["nothing"]}]'
    parsed = parse_answer(raw, "timex", True, answer_format="study")
    assert parsed == ParsedAnswer([], ["nothing"], True, None, True)


def test_study_comp_answers():
    raw = (
        '[{"text": "t", "time_expressions": ["noon"], "events": ["left", "noon"], "reasoning_steps": ["r"]},'
        ' {"text": "u", "time_expressions": ["noon", "today"], "events": [], "reasoning_steps": []}]'
    )
    parsed = parse_answer(raw, "comp", True, answer_format="study")
    assert [(p["text"], p["label"]) for p in parsed.predictions] == [
        ("noon", "TIMEX"),
        ("left", "EVENT"),
        ("noon", "EVENT"),
        ("today", "TIMEX"),
    ]
    assert parsed.reasoning_steps == ["r"] and parsed.well_formed
    plain = parse_answer('{"time_expressions": ["noon"], "events": ["left"]}', "comp", False, answer_format="study")
    assert plain.well_formed and [(p["text"], p["label"]) for p in plain.predictions] == [
        ("noon", "TIMEX"),
        ("left", "EVENT"),
    ]
    assert not parse_answer('{"time_expressions": ["noon"], "events": ["left"]}', "comp", False).well_formed
    # one object without the outer list: read, not well-formed
    single = parse_answer(
        '{"text": "t", "time_expressions": ["noon"], "events": [], "reasoning_steps": []}',
        "comp",
        True,
        answer_format="study",
    )
    assert single.ok and not single.well_formed and single.predictions == [{"text": "noon", "label": "TIMEX"}]


def test_unknown_format_or_form_is_a_caller_error():
    with pytest.raises(ValueError, match="answer format"):
        parse_answer("[]", "timex", False, answer_format="paper")
    with pytest.raises(ValueError, match="prompt form"):
        parse_answer("[]", "timex", False, prompt_form="text")


# ----- the completion prompt form -----------------------------------------------------------------


def test_completion_answer_is_cut_before_the_model_invents_the_next_example():
    raw = ' ["Tuesday", "two weeks"]\n\nText: Prices fell on Friday.\nTime expressions: ["Friday"]'
    parsed = parse_answer(raw, "timex", False, prompt_form="completion")
    assert parsed == ParsedAnswer(["Tuesday", "two weeks"], None, True, None, True)
    # in the chat form the same text would end with the invented answer
    assert parse_answer(raw, "timex", False).predictions == ["Friday"]


def test_completion_comp_reads_one_json_object():
    raw = ' {"timex": ["Tuesday"], "eventx": ["resumed", "strike"]}\n\nText: next\nTime expressions and event triggers (JSON): {}'
    parsed = parse_answer(raw, "comp", False, prompt_form="completion")
    assert [(p["text"], p["label"]) for p in parsed.predictions] == [
        ("Tuesday", "TIMEX"),
        ("resumed", "EVENT"),
        ("strike", "EVENT"),
    ]
    assert parsed.ok and parsed.well_formed
    cut = parse_answer(' {"timex": ["Tuesday"], "eventx": ["resumed", "stri', "comp", False, prompt_form="completion")
    assert cut.ok and not cut.well_formed
    assert [(p["text"], p["label"]) for p in cut.predictions] == [("Tuesday", "TIMEX"), ("resumed", "EVENT")]
    garbled = parse_answer(" none\nEvents: nothing", "comp", False, prompt_form="completion")
    assert garbled.ok is False and garbled.predictions == []


def test_completion_abductive_continuation():
    raw = ' {"reasoning_steps": ["r"], "spans": ["said"]}\n\nText: other\nReasoning steps and event triggers (JSON): {}'
    parsed = parse_answer(raw, "eventx", True, prompt_form="completion")
    assert parsed == ParsedAnswer(["said"], ["r"], True, None, True)
