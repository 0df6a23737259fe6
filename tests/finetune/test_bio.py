"""Character spans <-> word BIO tags: lossless round trip, decoding rules, data the prepare stage builds."""

from __future__ import annotations

import pytest

from src.data.schema import Record, Span, read_records
from src.finetune.bio import bio_to_spans, non_overlapping, record_to_bio, span_label_for_task, tag_set
from tests.helpers.prepared_data import PREPARED_SETS


def round_trip(record: Record, label: str) -> list[Span]:
    words, offsets, tags = record_to_bio(record, label)
    assert words == [record.text[s:e] for s, e in offsets]
    return bio_to_spans(record.text, offsets, tags, label)


def expected(record: Record, label: str) -> list[Span]:
    return sorted(s for s in record.spans if s.label == label)


def test_tag_sets():
    assert tag_set("TIMEX") == ["O", "B-T", "I-T"]
    assert tag_set("EVENT") == ["O", "B-E", "I-E"]
    assert span_label_for_task("eventx") == "EVENT"
    with pytest.raises(ValueError, match="unknown task"):
        span_label_for_task("comp")


def test_tags_of_a_sentence():
    text = "He left last week , on Friday ."
    spans = [Span(8, 17, "last week", "TIMEX"), Span(23, 29, "Friday", "TIMEX"), Span(3, 7, "left", "EVENT")]
    words, offsets, tags = record_to_bio(Record("r", "d", text, spans, "s"), "TIMEX")
    assert words == ["He", "left", "last", "week", ",", "on", "Friday", "."]
    assert tags == ["O", "O", "B-T", "I-T", "O", "O", "B-T", "O"]
    assert record_to_bio(Record("r", "d", text, spans, "s"), "EVENT")[2][1] == "B-E"


def test_adjacent_spans_stay_apart():
    text = "Monday Tuesday"
    spans = [Span(0, 6, "Monday", "TIMEX"), Span(7, 14, "Tuesday", "TIMEX")]
    record = Record("r", "d", text, spans, "s")
    assert record_to_bio(record, "TIMEX")[2] == ["B-T", "B-T"]
    assert round_trip(record, "TIMEX") == spans


@pytest.mark.parametrize("label", ["TIMEX", "EVENT"])
def test_round_trip_on_fixture_records(synthetic_records, label):
    for record in synthetic_records:
        assert round_trip(record, label) == expected(record, label), record.text


def test_words_split_at_span_boundaries(boundary_record):
    words, _, tags = record_to_bio(boundary_record, "TIMEX")
    # "1990s" -> "1990" + "s"; "2000s" keeps its own word after "mid" and "-"; "3days" -> "3" + "days"
    assert "1990" in words and words[words.index("1990") + 1] == "s"
    assert tags[words.index("1990")] == "B-T" and tags[words.index("1990") + 1] == "O"
    assert words[words.index("3") + 1] == "days"
    assert round_trip(boundary_record, "TIMEX") == expected(boundary_record, "TIMEX")
    assert round_trip(boundary_record, "EVENT") == expected(boundary_record, "EVENT")


def test_decoding_is_lenient_and_checks_tags():
    text = "a b c d"
    offsets = [(0, 1), (2, 3), (4, 5), (6, 7)]
    spans = bio_to_spans(text, offsets, ["I-T", "I-T", "O", "B-T"], "TIMEX")
    assert [s.text for s in spans] == ["a b", "d"]
    assert [s.text for s in bio_to_spans(text, offsets, ["B-T", "B-T", "I-T", "O"], "TIMEX")] == ["a", "b c"]
    with pytest.raises(ValueError, match="B-E"):
        bio_to_spans(text, offsets, ["B-E", "O", "O", "O"], "TIMEX")
    with pytest.raises(ValueError, match="4 word offsets but 3 tags"):
        bio_to_spans(text, offsets, ["O"] * 3, "TIMEX")


def test_overlapping_spans_keep_the_first(caplog):
    # text: "last week end"
    spans = [Span(5, 13, "week end", "TIMEX"), Span(0, 9, "last week", "TIMEX")]
    assert non_overlapping(spans) == [spans[1]]
    assert "overlaps" in caplog.text


@pytest.mark.parametrize("task", ["timex", "eventx"])
@pytest.mark.parametrize("name", PREPARED_SETS)
def test_round_trip_on_prepared_data(task, name, prepared_data):
    """Every record the prepare stage builds from the raw corpora (tests/conftest.py's ``prepared_data``)."""
    path = prepared_data / task / f"{name}.jsonl"
    label = span_label_for_task(task)
    records = read_records(path)
    assert records, f"{path} is empty"
    failures = []
    for record in records:
        gold = expected(record, label)
        if non_overlapping(gold) != gold:
            failures.append(f"{record.id}: overlapping {label} spans")
        elif round_trip(record, label) != gold:
            failures.append(f"{record.id}: {[s.text for s in gold]} -> {[s.text for s in round_trip(record, label)]}")
    assert not failures, f"{len(failures)} records of {path} do not round-trip, e.g. {failures[:5]}"
