"""Records cut from documents: sentences (with every gold span inside one), whole documents, and
the records one task keeps. A library of the prepare stage, of fine-tuning's negatives and of
the scoring tests; it reads no corpus."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from src.data.schema import Document, Record, Span
from src.data.segment import segment_documents
from src.study import TASK_LABELS

log = logging.getLogger(__name__)


def cut(doc: Document, start: int, end: int, record_id: str) -> Record:
    """The record for ``doc.text[start:end]`` (whitespace trimmed) with the spans inside it."""
    piece = doc.text[start:end]
    start += len(piece) - len(piece.lstrip())
    end -= len(piece) - len(piece.rstrip())
    spans = [
        Span(s.start - start, s.end - start, s.text, s.label)
        for s in sorted(doc.spans)
        if start <= s.start and s.end <= end
    ]
    return Record(record_id, doc.doc_id, doc.text[start:end], spans, doc.source)


def sentence_records(doc: Document, ranges: Sequence[tuple[int, int]]) -> list[Record]:
    """One record per sentence range, ids ``{doc_id}#s{index}``; every span must fall in one sentence."""
    records = [cut(doc, start, end, f"{doc.doc_id}#s{i}") for i, (start, end) in enumerate(ranges)]
    kept = sum(len(r.spans) for r in records)
    if kept != len(doc.spans):
        raise ValueError(f"{doc.doc_id}: {len(doc.spans) - kept} span(s) fall outside every sentence")
    return [r for r in records if r.text]


def segmented_records(docs: Sequence[Document], nlp, newline_ends_sentence: bool = False) -> list[list[Record]]:
    """Sentence records of documents without sentence annotation (one spaCy pass over all).

    ``newline_ends_sentence`` suits clinical notes written one sentence per line (i2b2).
    """
    ranges, merges = segment_documents(docs, nlp, newline_ends_sentence=newline_ends_sentence)
    if merges:
        log.info("segmentation: merged %d sentence boundaries that cut a gold span", merges)
    return [sentence_records(doc, doc_ranges) for doc, doc_ranges in zip(docs, ranges)]


def for_task(records: Iterable[Record], task: str) -> list[Record]:
    """Keep only the task's labels, and only records holding every label the task needs."""
    labels = TASK_LABELS[task]
    out = []
    for record in records:
        spans = [s for s in record.spans if s.label in labels]
        if all(any(s.label == label for s in spans) for label in labels):
            out.append(Record(record.id, record.doc_id, record.text, spans, record.source, dict(record.extra)))
    return out


def document_records(docs: Iterable[Document]) -> list[Record]:
    """Whole documents as single instances (the structural ``len`` dimension)."""
    return [cut(doc, 0, len(doc.text), doc.doc_id) for doc in docs]
