"""``voc``: pseudo-word replacements outside gold spans, deterministic per seed, spans exact."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache

from hypothesis import given, settings, strategies as st

from src.data.schema import Record, Span, check_spans, read_records, write_records
from src.data.text import word_offsets, words
from src.derive import voc
from src.derive.voc import VocabularyShifter, match_case, pseudo_word, word_frequencies

TRAIN_TEXT = "The officials said the government would meet the company on Monday and the officials agreed."


@lru_cache(maxsize=1)
def nlp():
    return voc.load_spacy()


def make_record(text: str, id_: str, *strings: str) -> Record:
    spans, cursor = [], 0
    for string in strings:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, "TIMEX"))
        cursor = start + len(string)
    return Record(id_, "doc", text, spans, "test")


def shifter(seed: int = 7, **kwargs) -> VocabularyShifter:
    train = [Record("t", "t", TRAIN_TEXT, [], "t")]
    return VocabularyShifter(nlp(), word_frequencies(train), seed=seed, **kwargs)


SENTENCE = make_record(
    "Officials in Macao said on Friday that Boeing would meet John Smith in Macao to discuss tariffs last week.",
    "a1",
    "Friday",
    "last week",
)


def test_entities_and_rare_words_are_replaced_but_not_spans_or_common_words():
    out = shifter().shift(SENTENCE)
    assert out.id == SENTENCE.id and out.extra["original_text"] == SENTENCE.text
    reasons = out.extra["replacement_reasons"]
    assert reasons["Macao"] == "entity:GPE" and reasons["John"] == "entity:PERSON"
    assert reasons["tariffs"] == "rare"
    assert "said" not in reasons and "Friday" not in reasons and "week" not in reasons
    assert [s.text for s in out.spans] == ["Friday", "last week"]
    check_spans(out.text, out.spans, "voc")
    # same source word -> same pseudo-word in the instance; capitalisation kept
    new = out.extra["replacements"]["Macao"]
    assert out.text.count(new) == 2 and new[0].isupper() and new[1:].islower() and new.isalpha()
    assert out.extra["words_changed"] == sum(1 for _ in out.extra["replacements"]) + 1  # "Macao" twice


def test_date_entities_and_domain_terms():
    rec = make_record("Shares of Acme fell in fiscal 1990, the insulin maker said.", "b1", "said")
    out = shifter(domain_terms={"insulin"}).shift(rec)
    reasons = out.extra["replacement_reasons"]
    assert reasons.get("insulin") == "domain"
    assert "fiscal" not in reasons  # inside a DATE entity, never touched
    assert "1990" in out.text


def test_same_seed_same_output_other_seed_other_words():
    first = [r.to_dict() for r in shifter(seed=3).shift_all([SENTENCE])]
    again = [r.to_dict() for r in shifter(seed=3).shift_all([SENTENCE])]
    other = [r.to_dict() for r in shifter(seed=4).shift_all([SENTENCE])]
    assert first == again
    assert first[0]["text"] != other[0]["text"]
    assert first[0]["replacements"].keys() == other[0]["replacements"].keys()


def test_pseudo_words_and_case():
    import random

    rng = random.Random(0)
    made = [pseudo_word(n, rng) for n in range(1, 12)]
    assert all(w.isalpha() and w.islower() and len(w) >= 3 for w in made)
    assert match_case("MACAO", "myfiu") == "MYFIU"
    assert match_case("Macao", "myfiu") == "Myfiu"
    assert match_case("macao", "Myfiu") == "myfiu"


NAMES = ["Macao", "Boeing", "John", "Smith", "Paris", "IBM", "Germany", "Toyota", "Reuters"]
RARE = ["tariffs", "merger", "hurricane", "shareholders", "refinery", "cease-fire", "dividend"]
COMMON = ["the", "officials", "said", "would", "meet", "in", "and", "company", "government", ",", "on"]
TIMEX = ["Monday", "last week", "1990", "two years", "yesterday", "Friday morning"]


@st.composite
def instances(draw):
    """A random sentence mixing names, rare and common words, with 1-3 temporal gold spans."""
    pieces = [(w, False) for w in draw(st.lists(st.sampled_from(NAMES + RARE + COMMON), min_size=2, max_size=18))]
    for gold in draw(st.lists(st.sampled_from(TIMEX), min_size=1, max_size=3)):
        pieces.insert(draw(st.integers(0, len(pieces))), (gold, True))
    text, spans = "", []
    for piece, is_gold in pieces:
        text += " " if text else ""
        if is_gold:
            spans.append(Span(len(text), len(text) + len(piece), piece, "TIMEX"))
        text += piece
    return Record(f"p{draw(st.integers(0, 10**6))}", "doc", text + ".", spans, "test")


@settings(max_examples=60, deadline=None)
@given(instances(), st.integers(0, 2**31 - 1))
def test_property_spans_stay_exact_and_only_replaced_words_change(rec, seed):
    out = shifter(seed=seed).shift(rec)
    check_spans(out.text, out.spans, "voc")
    assert [(s.text, s.label) for s in out.spans] == [(s.text, s.label) for s in rec.spans]
    before, after = words(rec.text), words(out.text)
    assert len(before) == len(after)
    mapping = out.extra["replacements"]
    for old, new in zip(before, after):
        assert old == new or mapping[old] == new
    # no replaced word overlaps a gold span
    for (start, end), old, new in zip(word_offsets(rec.text), before, after):
        if old != new:
            assert not any(start < s.end and s.start < end for s in rec.spans)


def test_cli_writes_verified_records_and_stats(tmp_path):
    base, train = tmp_path / "base.jsonl", tmp_path / "train.jsonl"
    write_records(base, [SENTENCE, make_record("The officials said the company would meet on Monday.", "a2", "Monday")])
    write_records(train, [Record("t", "t", TRAIN_TEXT, [], "t")])
    out, stats = tmp_path / "voc.jsonl", tmp_path / "stats.json"
    voc.main(
        [
            "--input",
            str(base),
            "--train",
            str(train),
            "--output",
            str(out),
            "--seed",
            "5",
            "--stats",
            str(stats),
            "--rare-max-count",
            "0",
        ]
    )
    derived = read_records(out)
    assert [r.id for r in derived] == ["a1", "a2"]
    summary = json.loads(stats.read_text())
    assert summary["instances"] == 2 and summary["instances_changed"] == 1
    assert summary["share_changed"] == 0.5
    assert summary["words_changed"] == derived[0].extra["words_changed"]
    assert Counter(derived[1].extra["replacements"]) == Counter()


def test_cli_limit_picks_the_seeded_subset_by_id(tmp_path):
    from src.data.splits import subset_by_id

    base_records = [make_record(f"Sales rose in Macao on Monday, case {i}.", f"id{i}", "Monday") for i in range(6)]
    write_records(tmp_path / "base.jsonl", base_records)
    write_records(tmp_path / "train.jsonl", [Record("t", "t", TRAIN_TEXT, [], "t")])
    out = tmp_path / "voc.jsonl"
    voc.main(
        [
            "--input",
            str(tmp_path / "base.jsonl"),
            "--train",
            str(tmp_path / "train.jsonl"),
            "--output",
            str(out),
            "--seed",
            "9",
            "--limit",
            "2",
        ]
    )
    assert [r.id for r in read_records(out)] == [r.id for r in subset_by_id(base_records, 2, 9)]


def test_limit_option_reads_null_as_no_limit():
    import pytest

    from src.core.values import optional_int

    assert optional_int("null") is None and optional_int("") is None
    assert optional_int("7") == 7
    with pytest.raises(ValueError):
        optional_int("-1")
