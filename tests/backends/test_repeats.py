"""An answer ends at the first repeated item of its final list: the cut, its incremental
detector piece by piece, the request field, the cache key and the paths the prompts name."""

from __future__ import annotations

import json
import random

import pytest

from src.backends.cache import cache_key, cache_key_fields
from src.backends.repeats import RepeatedItem, cut_at_repeat
from src.core.requests import ChatRequest, path_key
from src.prompts.answer_schema import answer_shape, final_span_list
from src.prompts.parsing import parse_answer
from src.study import TASK_ORDER

CASES = [
    # (text, path, expected answer, cut?)
    ('["a", "b", "a", "c"]', "$", '["a", "b"]', True),
    ('["a", "b", "c", "b"', "$", '["a", "b", "c"]', True),  # cut inside a truncated answer: closed
    ('["a", "b"]', "$", '["a", "b"]', False),
    (' ["the gain", "the gain", "the gain"', "$", ' ["the gain"]', True),  # completion prompts: a space first
    ('["a\\u0062", "ab"]', "$", '["a\\u0062"]', True),  # equal as JSON values, not as raw text
    ('["a\\"b", "a\\\\\\"b", "a\\"b"]', "$", '["a\\"b", "a\\\\\\"b"]', True),
    ('["[x]", "{y}", "[x]"]', "$", '["[x]", "{y}"]', True),  # brackets inside strings are text
    (
        '{"reasoning_steps": ["1.", "1."], "spans": ["a", "b", "a"]}',
        "$.spans",
        '{"reasoning_steps": ["1.", "1."], "spans": ["a", "b"]}',
        True,
    ),
    (
        '{"timex": ["a", "a"], "eventx": ["e", "f", "e", "g"]}',
        "$.eventx",
        '{"timex": ["a", "a"], "eventx": ["e", "f"]}',
        True,
    ),
    ('{"timex": ["a", "a"], "eventx": ["e"]}', "$.eventx", '{"timex": ["a", "a"], "eventx": ["e"]}', False),
    ('{"eventx": "no list", "timex": ["a", "a"]}', "$.eventx", '{"eventx": "no list", "timex": ["a", "a"]}', False),
    ('["a", "b"] ["a", "a"]', "$", '["a", "b"] ["a", "a"]', False),  # nothing after the value is read
    ('Sure: ["x", "x"]', "$", 'Sure: ["x"]', True),
    ('{"spans": ["a", "b", "a"]}', "$", '{"spans": ["a", "b", "a"]}', False),  # not the top-level array
    ('[["a"], ["a"]]', "$", '[["a"], ["a"]]', False),  # only string items count
]


@pytest.mark.parametrize(("text", "path", "expected", "was_cut"), CASES)
def test_cut_at_the_first_repeat_of_the_named_list_only(text, path, expected, was_cut):
    assert cut_at_repeat(text, path) == (expected, was_cut)


def test_no_path_changes_nothing():
    assert cut_at_repeat('["a", "a"]', None) == ('["a", "a"]', False)


@pytest.mark.parametrize(("text", "path", "expected", "was_cut"), CASES)
def test_fed_piece_by_piece_the_detector_gives_the_same_answer_and_fires_at_the_repeat(text, path, expected, was_cut):
    rng = random.Random(len(text))
    for trial in range(30):
        pieces, start = [], 0
        while start < len(text):  # one-character pieces first, then random splits
            size = 1 if trial == 0 else rng.randint(1, 6)
            pieces.append(text[start : start + size])
            start += size
        detector = RepeatedItem(path)
        fed = []
        for piece in pieces:
            fed.append(piece)
            if detector.feed(piece):
                break
        assert detector.fired is was_cut
        assert detector.kept("".join(fed)) == (expected if was_cut else "".join(fed))
        if was_cut:  # it stopped at the piece that closed the repeated item, not later
            assert "".join(fed[:-1]).count('"') < "".join(fed).count('"')


def test_cut_answers_parse_to_the_spans_before_the_repeat():
    text = '{"reasoning_steps": ["Candidates: gain"], "spans": ["the gain", "rose", "the gain", "fell"]}'
    answer, cut = cut_at_repeat(text, "$.spans")
    assert cut and json.loads(answer)["spans"] == ["the gain", "rose"]
    parsed = parse_answer(answer, "timex", abductive=True)
    assert parsed.ok and parsed.well_formed and parsed.predictions == ["the gain", "rose"]


def test_paths():
    assert path_key("$") is None and path_key("$.eventx") == "eventx"
    for bad in ("", "spans", "$.", "$.a.b", "$[0]", "$.1x"):
        with pytest.raises(ValueError, match="list path"):
            path_key(bad)


def test_a_request_with_a_malformed_path_is_one_clear_error():
    with pytest.raises(ValueError, match=r"ChatRequest 'r1'.*list path"):
        ChatRequest((("user", "x"),), request_id="r1", stop_at_repeat="spans")


def test_the_cache_key_changes_with_the_repeat_stop_and_old_keys_stay():
    plain = ChatRequest((("user", "x"),), request_id="r")
    stopped = ChatRequest((("user", "x"),), request_id="r", stop_at_repeat="$")
    fields = cache_key_fields("llamacpp", "m", {}, plain)
    assert "stop_at_repeat" not in fields  # the keys of answers cached before the option exist unchanged
    assert cache_key(fields) != cache_key(cache_key_fields("llamacpp", "m", {}, stopped))
    assert cache_key_fields("llamacpp", "m", {}, stopped)["stop_at_repeat"] == "$"


@pytest.mark.parametrize("answer_format", ["compact", "study"])
@pytest.mark.parametrize("abductive", [False, True])
@pytest.mark.parametrize("task", TASK_ORDER)
def test_the_named_list_is_the_one_that_ends_every_well_formed_answer(task, abductive, answer_format):
    shape = answer_shape(task, abductive, answer_format)
    path = final_span_list(task, abductive, answer_format)
    if shape.container == "objects":  # the study's abductive objects end with reasoning steps
        assert path is None
        return
    key = path_key(path)
    if key is None:
        assert shape.container == "array"
    else:
        assert shape.keys[-1] == key and key in shape.span_keys
