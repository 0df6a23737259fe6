"""Gold spans stay exact through perturbations: shifting, re-locating and verifying."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from src.data.schema import Record, Span, check_spans
from src.data.text import word_offsets
from src.derive.alignment import (
    AlignmentError,
    TextEdit,
    apply_edits,
    changed_words,
    count_changed_words,
    derived_record,
    occurrences,
    relocate_by_rank,
    relocate_in_order,
    shift_spans,
    word_swap_edits,
)


def record(text: str, *strings: str, label: str = "TIMEX") -> Record:
    """A record whose spans are the first occurrences (after each other) of ``strings``."""
    spans, cursor = [], 0
    for string in strings:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, label))
        cursor = start + len(string)
    return Record("r1", "d1", text, spans, "test")


def test_occurrences_respect_word_boundaries():
    text = "On Monday, a day later, the day-long talks"
    assert occurrences(text, "day") == [13, 28]
    assert occurrences(text, "day", whole_words=False) == [6, 13, 28]
    assert occurrences("10-10-10", "10-10") == [0, 3]  # overlapping occurrences count


def test_shift_spans_moves_by_edits_before_and_refuses_touching_edits():
    rec = record("He left on Monday and came back last week.", "Monday", "last week")
    edits = [TextEdit(0, 2, "Shelley"), TextEdit(22, 26, "arrived")]  # "He", "came"
    text = apply_edits(rec.text, edits)
    spans = shift_spans(rec.spans, edits)
    assert text == "Shelley left on Monday and arrived back last week."
    assert [text[s.start : s.end] for s in spans] == ["Monday", "last week"]
    # insertions right at a span's start go before it, at its end after it
    inserted = shift_spans(rec.spans, [TextEdit(11, 11, "x"), TextEdit(17, 17, "y")])
    assert [(s.start, s.end) for s in inserted] == [(12, 18), (34, 43)]
    with pytest.raises(AlignmentError) as caught:
        shift_spans(rec.spans, [TextEdit(15, 19, "nday an")])
    assert caught.value.reason == "touched"


def test_relocate_by_rank_keeps_the_occurrence_rank_and_refuses_new_occurrences():
    rec = Record("r", "d", "The year began; that year ended.", [], "t")
    span = Span(21, 25, "year", "TIMEX")  # the second "year"
    assert relocate_by_rank(rec.text, [span], "A year began; this year ended.") == [Span(19, 23, "year", "TIMEX")]
    with pytest.raises(AlignmentError) as caught:
        relocate_by_rank(rec.text, [span], "A year began; this year ended a year.")
    assert caught.value.reason == "ambiguous"
    with pytest.raises(AlignmentError) as caught:
        relocate_by_rank(rec.text, [span], "It began and ended.")
    assert caught.value.reason == "missing"


def test_relocate_in_order_resolves_equal_counts_and_rejects_the_rest():
    rec = record("Sales rose in May and fell in June, then rose in May again.", "May", "June", "May")
    placed = relocate_in_order(rec.text, rec.spans, "In May sales grew, in June they fell, in May they grew.")
    assert [(s.start, s.text) for s in placed] == [(3, "May"), (22, "June"), (41, "May")]
    with pytest.raises(AlignmentError) as missing:
        relocate_in_order(rec.text, rec.spans, "In May sales grew and in June they fell.")
    assert missing.value.reason == "missing"
    with pytest.raises(AlignmentError) as ambiguous:
        relocate_in_order(rec.text, rec.spans[1:2], "June, June.")
    assert ambiguous.value.reason == "ambiguous"
    # a gold span string inside a longer word is not an occurrence
    assert relocate_in_order(rec.text, rec.spans[1:2], "Junes end in June.")[0].start == 13


def test_word_swap_edits_need_unchanged_text_between_words():
    old = "Prices rose, sharply, on Monday."
    edits = word_swap_edits(
        old,
        ["Prices", "rose", "sharply", "on", "Monday"],
        "Costs rose, steeply, on Monday.",
        ["Costs", "rose", "steeply", "on", "Monday"],
    )
    assert edits == [TextEdit(0, 6, "Costs"), TextEdit(13, 20, "steeply")]
    with pytest.raises(AlignmentError):
        word_swap_edits(old, ["Prices", "rose"], "Prices  rose", ["Prices", "rose"])


def test_derived_record_refuses_changed_span_text_and_glued_words():
    rec = record("It ended last week.", "last week")
    assert derived_record(rec, "It stopped last week.", [Span(11, 20, "last week", "TIMEX")], {}).id == "r1"
    with pytest.raises(AlignmentError):
        derived_record(rec, "It stopped last weak.", [Span(11, 20, "last weak", "TIMEX")], {})
    with pytest.raises(AlignmentError):
        derived_record(rec, "It stoppedlast week.", [Span(10, 19, "last week", "TIMEX")], {})
    with pytest.raises(AlignmentError):
        derived_record(rec, "It stopped last week.", [], {})


def test_changed_words_counts_replacements_and_insertions():
    assert changed_words("He left on Monday.", "She left early on Monday.") == [
        {"old": "He", "new": "She"},
        {"old": "", "new": "early"},
    ]
    assert count_changed_words("He left on Monday.", "She left early on Monday.") == 2
    assert count_changed_words("same text", "same text") == 0


VOCAB = ["the", "sales", "May", "rose", "a", "year", "day", "Monday", "in", "June", "fell", "week", "last", ",", "."]


@st.composite
def perturbed_instances(draw):
    """A random text, random gold spans over whole words and random edits on other words."""
    tokens = draw(st.lists(st.sampled_from(VOCAB), min_size=3, max_size=25))
    text = " ".join(tokens)
    offsets = word_offsets(text)
    gold_words = sorted(draw(st.sets(st.integers(0, len(offsets) - 1), min_size=1, max_size=4)))
    spans = [Span(offsets[i][0], offsets[i][1], text[offsets[i][0] : offsets[i][1]], "TIMEX") for i in gold_words]
    edits = []
    for i, (start, end) in enumerate(offsets):
        if i not in gold_words and draw(st.booleans()):
            edits.append(TextEdit(start, end, draw(st.sampled_from(["x", "Tuesday", "May", "zz", "year"]))))
    return Record("r", "d", text, spans, "t"), edits


@settings(max_examples=300, deadline=None)
@given(perturbed_instances())
def test_property_shifted_spans_always_verify_and_rank_relocation_stays_exact(instance):
    rec, edits = instance
    text = apply_edits(rec.text, edits)
    spans = shift_spans(rec.spans, edits)
    derived = derived_record(rec, text, spans, {})
    check_spans(derived.text, derived.spans, "derived")
    assert [s.text for s in derived.spans] == [s.text for s in rec.spans]
    try:
        ranked = relocate_by_rank(rec.text, rec.spans, text)
    except AlignmentError as exc:
        assert exc.reason in {"ambiguous", "missing"}
    else:  # the rank can pick another occurrence when edits move them around, but never a wrong string
        check_spans(text, ranked, "ranked")
        assert [s.text for s in ranked] == [s.text for s in rec.spans]
