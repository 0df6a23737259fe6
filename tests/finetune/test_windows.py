"""Long documents: window planning, mapping spans back and merging overlaps."""

from __future__ import annotations

import pytest

from src.data.schema import Span
from src.data.text import word_offsets
from src.finetune.bio import bio_to_spans
from src.finetune.windows import Window, merge_window_spans, plan_windows, window_spans
from tests.helpers.finetune_data import long_document

TIME_WORDS = {"Monday": "B-T", "last": "B-T", "week": "I-T", "1998": "B-T"}


def rule_tags(words: list[str]) -> list[str]:
    """A deterministic stand-in tagger: 'last week', 'Monday', '1998' are time expressions."""
    tags = []
    for i, word in enumerate(words):
        tag = TIME_WORDS.get(word, "O")
        if word == "week" and (i == 0 or words[i - 1] != "last"):
            tag = "B-T"
        tags.append(tag)
    return tags


def test_plan_covers_every_word_within_budget():
    counts = [1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 1]
    windows = plan_windows(counts, max_pieces=5, overlap=2)
    assert windows[0].start == 0 and windows[-1].end == len(counts)
    for before, after in zip(windows, windows[1:]):
        assert after.start > before.start
        assert after.start <= before.end  # contiguous or overlapping, never a gap
    for window in windows:
        assert sum(counts[window.start : window.end]) <= 5
    assert any(after.start < before.end for before, after in zip(windows, windows[1:]))


def test_plan_edge_cases():
    assert plan_windows([], 8, 2) == []
    assert plan_windows([1, 1, 1], 8, 2) == [Window(0, 3)]
    # a single word longer than the window still gets a window of its own
    assert plan_windows([1, 20, 1], 4, 1) == [Window(0, 1), Window(1, 2), Window(2, 3)]
    # an overlap larger than a window still makes progress (capped at half a window)
    assert len(plan_windows([1] * 100, 10, 50)) <= 2 * 100 // 10 + 1
    with pytest.raises(ValueError):
        plan_windows([1], 0, 0)


def test_windowed_tagging_equals_whole_document_tagging():
    text = long_document()
    offsets = word_offsets(text)
    words = [text[s:e] for s, e in offsets]
    whole = bio_to_spans(text, offsets, rule_tags(words), "TIMEX")
    windows = plan_windows([1] * len(words), max_pieces=7, overlap=3)
    assert len(windows) > 20
    candidates = []
    for window in windows:
        tags = rule_tags(words[window.start : window.end])
        candidates.extend(window_spans(text, offsets, window, tags, "TIMEX"))
    assert len(candidates) > len(whole)  # spans in overlaps were found twice
    merged = merge_window_spans(candidates)
    assert merged == whole
    assert all(text[s.start : s.end] == s.text for s in merged)


def test_merge_prefers_the_span_seen_with_more_context():
    near_edge = (Span(10, 14, "last", "TIMEX"), 0.0)
    central = (Span(10, 19, "last week", "TIMEX"), 3.0)
    duplicate = (Span(10, 19, "last week", "TIMEX"), 1.0)
    other = (Span(30, 36, "Monday", "TIMEX"), 0.0)
    assert merge_window_spans([near_edge, other, duplicate, central]) == [central[0], other[0]]


def test_context_score_counts_words_to_the_window_edge():
    text = "a b c d e f g"
    offsets = word_offsets(text)
    found = window_spans(text, offsets, Window(1, 5), ["O", "B-T", "O", "O"], "TIMEX")
    assert found == [(Span(4, 5, "c", "TIMEX"), 1)]
    at_document_start = window_spans(text, offsets, Window(0, 3), ["B-T", "O", "O"], "TIMEX")
    assert at_document_start == [(Span(0, 1, "a", "TIMEX"), 2)]
