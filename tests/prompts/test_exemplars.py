"""Exemplar selection: only from the given train records, seeded, stable, diverse, short."""

from __future__ import annotations

import statistics

import pytest

from src.data.text import words
from src.prompts import exemplar_order, select_exemplars, target_spans
from tests.helpers.records import build_train_records, make_record


@pytest.fixture
def train_records():
    return build_train_records()


@pytest.mark.parametrize("task", ["timex", "eventx", "comp"])
@pytest.mark.parametrize("k", [3, 5, 8])
def test_drawn_only_from_the_train_records(train_records, task, k):
    chosen = select_exemplars(train_records, k, seed=13, task=task)
    assert len(chosen) == k
    assert all(any(r is c for r in train_records) for c in chosen)
    assert len({c.text for c in chosen}) == k


@pytest.mark.parametrize("task", ["timex", "eventx", "comp"])
def test_same_seed_same_exemplars_other_seed_others(train_records, task):
    first = [r.id for r in select_exemplars(train_records, 5, seed=1, task=task)]
    assert first == [r.id for r in select_exemplars(train_records, 5, seed=1, task=task)]
    # the input order of the file does not matter
    assert first == [r.id for r in select_exemplars(list(reversed(train_records)), 5, seed=1, task=task)]
    assert first != [r.id for r in select_exemplars(train_records, 5, seed=2, task=task)]
    by_seed = {tuple(r.id for r in select_exemplars(train_records, 5, seed=s, task=task)) for s in range(6)}
    assert len(by_seed) >= 4


def test_smaller_k_is_a_prefix_of_larger_k(train_records):
    eight = select_exemplars(train_records, 8, seed=4, task="eventx")
    assert select_exemplars(train_records, 5, seed=4, task="eventx") == eight[:5]
    assert select_exemplars(train_records, 3, seed=4, task="eventx") == eight[:3]


def test_short_sentences_and_distinct_span_counts_first(train_records):
    lengths = [len(words(r.text)) for r in train_records]
    median = statistics.median(lengths)
    chosen = select_exemplars(train_records, 4, seed=0, task="timex")
    assert all(len(words(r.text)) <= median for r in chosen)
    # one exemplar per stratum of 1, 2, 3 and 4+ time expressions
    assert sorted(min(len(target_spans(r, "timex")), 4) for r in chosen) == [1, 2, 3, 4]
    # exemplars come from different documents while unused documents remain
    assert len({r.doc_id for r in chosen}) == 4


def test_comp_needs_both_kinds_of_span():
    records = [
        make_record("a", "It rained on Monday.", [("rained", "EVENT"), ("Monday", "TIMEX")], doc_id="d1"),
        make_record("b", "It rained.", [("rained", "EVENT")], doc_id="d2"),
        make_record("c", "Monday came.", [("Monday", "TIMEX")], doc_id="d3"),
    ]
    assert [r.id for r in exemplar_order(records, 0, "comp")] == ["a"]
    assert {r.id for r in exemplar_order(records, 0, "timex")} == {"a", "c"}
    with pytest.raises(ValueError, match="only 1 usable comp train records"):
        select_exemplars(records, 3, 0, "comp")


def test_falls_back_to_long_records_when_short_ones_run_out():
    records = [
        make_record(f"r{i}", "Sales rose today" + " very much" * i + ".", [("today", "TIMEX")], doc_id=f"d{i}")
        for i in range(6)
    ]
    chosen = select_exemplars(records, 6, seed=0, task="timex")
    assert sorted(r.id for r in chosen) == [f"r{i}" for i in range(6)]
    assert {r.id for r in chosen[:3]} == {"r0", "r1", "r2"}


def test_bad_arguments(train_records):
    assert select_exemplars(train_records, 0, 0, "timex") == []
    for bad_k in (-1, 2.0, True):
        with pytest.raises(ValueError, match="non-negative integer"):
            select_exemplars(train_records, bad_k, 0, "timex")
    with pytest.raises(ValueError, match="unknown task"):
        select_exemplars(train_records, 3, 0, "time")
