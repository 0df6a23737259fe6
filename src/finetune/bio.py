"""Character spans <-> word-level BIO tags, the task formulation of the token classifiers.

Words are the project's words (:func:`src.data.text.word_offsets`). Gold spans do not always
start and end on those word boundaries: "1990" is a TIMEX inside the word "1990s", and
"mid-1990s" style spans cut runs of word characters too. To make the round trip
gold spans -> tags -> spans lossless, :func:`record_to_bio` additionally splits a word
wherever a gold span of the tagged label starts or ends inside it ("1990s" -> "1990",
"s"). Only training and evaluation data have gold spans; unlabelled text at inference
time is split with plain ``word_offsets``, so a model can only predict whole words there.

Tags are ``B-T``/``I-T``/``O`` for TIMEX and ``B-E``/``I-E``/``O`` for EVENT. Decoding
(:func:`bio_to_spans`) follows the lenient IOB2 reading of conlleval: an ``I-`` tag
that does not continue a span opens a new one instead of being dropped.
"""

from __future__ import annotations

import logging

from src.data.schema import Record, Span
from src.data.text import word_offsets
from src.registry import registry_entry
from src.study import TASKS, TOKEN_CLASSIFIER_TASKS

logger = logging.getLogger(__name__)

OUTSIDE = "O"
TAG_SUFFIX = {"TIMEX": "T", "EVENT": "E"}
TASK_LABEL = {name: TASKS[name].single_label for name in TOKEN_CLASSIFIER_TASKS}


def span_label_for_task(task: str) -> str:
    """The span label a single-type task extracts (``timex`` -> ``TIMEX``)."""
    return registry_entry(TASK_LABEL, task, "task for a token classifier")


def tag_set(label: str) -> list[str]:
    """The classifier's labels for one span type, in id order: ``["O", "B-T", "I-T"]``."""
    suffix = _suffix(label)
    return [OUTSIDE, f"B-{suffix}", f"I-{suffix}"]


def _suffix(label: str) -> str:
    return registry_entry(TAG_SUFFIX, label, "span label")


def split_at_boundaries(offsets: list[tuple[int, int]], boundaries: set[int]) -> list[tuple[int, int]]:
    """Split each word ``(start, end)`` at every boundary strictly inside it."""
    out: list[tuple[int, int]] = []
    for start, end in offsets:
        cuts = sorted(b for b in boundaries if start < b < end)
        for cut in cuts:
            out.append((start, cut))
            start = cut
        out.append((start, end))
    return out


def non_overlapping(spans: list[Span], where: str = "record") -> list[Span]:
    """The spans sorted by position, dropping any that overlaps an earlier (or longer) one.

    BIO tagging cannot express overlapping or nested spans of one type; dropped spans
    are logged so that a dataset with such spans is noticed rather than silently altered.
    """
    kept: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -(s.end - s.start))):
        if kept and span.start < kept[-1].end:
            logger.warning("%s: span %r overlaps %r and cannot be BIO-tagged; dropped", where, span, kept[-1])
            continue
        kept.append(span)
    return kept


def record_to_bio(record: Record, label: str) -> tuple[list[str], list[tuple[int, int]], list[str]]:
    """Words, word offsets and BIO tags of ``record`` for spans of one ``label``.

    Spans of other labels are ignored. Words are split at the gold span boundaries
    (see the module docstring), so every gold span is exactly a run of tagged words.
    """
    suffix = _suffix(label)
    spans = non_overlapping([s for s in record.spans if s.label == label], f"record {record.id!r}")
    boundaries = {b for span in spans for b in (span.start, span.end)}
    offsets = split_at_boundaries(word_offsets(record.text), boundaries)
    tags = [OUTSIDE] * len(offsets)
    index = 0
    for span in spans:
        while index < len(offsets) and offsets[index][1] <= span.start:
            index += 1
        first = True
        while index < len(offsets) and offsets[index][0] < span.end:
            tags[index] = f"B-{suffix}" if first else f"I-{suffix}"
            first = False
            index += 1
        if first:
            logger.warning("record %r: span %r covers no word and cannot be tagged", record.id, span)
    words = [record.text[start:end] for start, end in offsets]
    return words, offsets, tags


def bio_to_spans(text: str, offsets: list[tuple[int, int]], tags: list[str], label: str) -> list[Span]:
    """Spans of ``label`` read off per-word BIO tags; span text runs from first to last word."""
    if len(offsets) != len(tags):
        raise ValueError(f"{len(offsets)} word offsets but {len(tags)} tags")
    suffix = _suffix(label)
    begin, inside = f"B-{suffix}", f"I-{suffix}"
    spans: list[Span] = []
    open_start: int | None = None
    open_end = 0
    for (start, end), tag in zip(offsets, tags):
        if tag not in (OUTSIDE, begin, inside):
            raise ValueError(f"tag {tag!r} is not one of {OUTSIDE!r}, {begin!r}, {inside!r}")
        if tag == inside and open_start is not None:
            open_end = end
            continue
        if open_start is not None:
            spans.append(Span(open_start, open_end, text[open_start:open_end], label))
            open_start = None
        if tag != OUTSIDE:
            open_start, open_end = start, end
    if open_start is not None:
        spans.append(Span(open_start, open_end, text[open_start:open_end], label))
    return spans
