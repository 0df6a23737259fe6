"""Gold records built from a text and the strings of its spans, for every test module.

One argument order everywhere: ``make_record(record_id, text, spans)``.
"""

from __future__ import annotations

from collections.abc import Iterable

from src.data.schema import Record, Span


def make_record(
    record_id: str,
    text: str,
    spans: Iterable[str | tuple[str, str]] = (),
    *,
    doc_id: str | None = None,
    label: str = "TIMEX",
    source: str = "test",
) -> Record:
    """A record whose spans are found in ``text``, kept in the order given.

    Args:
        spans: span strings (labelled ``label``) or ``(string, label)`` pairs, found left to
            right: each at its string's first occurrence after the previous span, or, when none
            follows, at its first occurrence in the text (so out-of-order lists work too).
        doc_id: the document; by default the part of ``record_id`` before ``#`` (``d1#s0`` -> ``d1``).
    """
    located: list[Span] = []
    cursor = 0
    for item in spans:
        string, span_label = (item, label) if isinstance(item, str) else item
        start = text.find(string, cursor)
        start = text.index(string) if start < 0 else start
        located.append(Span(start, start + len(string), string, span_label))
        cursor = start + len(string)
    return Record(record_id, record_id.split("#")[0] if doc_id is None else doc_id, text, located, source)


_TIMES = ["Monday", "last week", "in 1998", "two years", "every month", "this morning", "March 3"]
_VERBS = ["rose", "fell", "said", "announced", "closed", "expected", "reported"]


def build_train_records() -> list[Record]:
    """40 comp-style training sentences for prompt tests: 1-4 time expressions, 1-5 events,
    short and long, 10 documents (the prepared train split may not exist yet)."""
    records = []
    for i in range(40):
        n_times = 1 + i % 4
        n_events = 1 + (i * 7) % 5
        times = [_TIMES[(i + j) % len(_TIMES)].replace("in ", "") for j in range(n_times)]
        verbs = [_VERBS[(i + j) % len(_VERBS)] for j in range(n_events)]
        filler = " and the market stayed very quiet" * (i % 3)
        clauses = [f"Company {i} {verb} on {time}" for verb, time in zip(verbs, times)]
        clauses += [f"shares {verb}" for verb in verbs[len(times) :]]
        clauses += [f"prices held {time}" for time in times[len(verbs) :]]
        text = ", ".join(clauses) + filler + "."
        targets = []
        for verb, time in zip(verbs, times):
            targets += [(verb, "EVENT"), (time, "TIMEX")]
        targets += [(verb, "EVENT") for verb in verbs[len(times) :]]
        targets += [(time, "TIMEX") for time in times[len(verbs) :]]
        records.append(make_record(f"train-{i:02d}", text, targets, doc_id=f"doc-{i % 10}", source="fixture"))
    return records
