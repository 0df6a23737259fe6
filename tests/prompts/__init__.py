"""Prompt tests; shared train-split fixtures built here (prepared data may not exist yet)."""

from __future__ import annotations

from src.data.schema import Record, Span


def make_record(record_id: str, doc_id: str, text: str, targets: list[tuple[str, str]]) -> Record:
    """A record whose spans are the given (string, label) pairs, located left to right."""
    spans, cursor = [], 0
    for string, label in targets:
        start = text.index(string, cursor)
        spans.append(Span(start, start + len(string), string, label))
        cursor = start + len(string)
    return Record(record_id, doc_id, text, sorted(spans), "fixture")


_TIMES = ["Monday", "last week", "in 1998", "two years", "every month", "this morning", "March 3"]
_VERBS = ["rose", "fell", "said", "announced", "closed", "expected", "reported"]


def build_train_records() -> list[Record]:
    """40 comp-style sentences: 1-4 time expressions, 1-5 events, short and long, 10 documents."""
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
        records.append(make_record(f"train-{i:02d}", f"doc-{i % 10}", text, targets))
    return records
