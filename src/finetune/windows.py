"""Overlapping word windows for documents longer than a classifier's input, and span merging.

The ``len`` dataset holds whole documents (up to ~1,100 words, more subword pieces), while
encoders read at most 512 pieces. A document is cut into windows of whole words whose
pieces fit, consecutive windows sharing ``overlap`` words so that a span near a cut is
seen with context in at least one window. Each window is tagged on its own, its spans
are mapped back to document offsets, and :func:`merge_window_spans` keeps one span per
place: where windows disagree, the prediction made with more context on both sides wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from src.data.schema import Span
from src.finetune.bio import bio_to_spans


@dataclass(frozen=True)
class Window:
    """Words ``start`` (inclusive) to ``end`` (exclusive) of a document."""

    start: int
    end: int


def plan_windows(piece_counts: list[int], max_pieces: int, overlap: int) -> list[Window]:
    """Cover all words with windows of at most ``max_pieces`` pieces sharing ``overlap`` words.

    A word longer than ``max_pieces`` on its own gets a window of its own (the tokenizer
    truncates it). The overlap is capped at half a window so that the number of windows
    stays within about twice the minimum.
    """
    if max_pieces < 1:
        raise ValueError(f"max_pieces must be positive, got {max_pieces}")
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    windows: list[Window] = []
    n_words = len(piece_counts)
    start = 0
    while start < n_words:
        end, used = start, 0
        while end < n_words and used + piece_counts[end] <= max_pieces:
            used += piece_counts[end]
            end += 1
        end = max(end, start + 1)
        windows.append(Window(start, end))
        if end >= n_words:
            break
        start = max(end - overlap, start + math.ceil((end - start) / 2))
    return windows


def window_spans(
    text: str,
    offsets: list[tuple[int, int]],
    window: Window,
    tags: list[str],
    label: str,
) -> list[tuple[Span, float]]:
    """Spans tagged in one window, in document offsets, each with its context score.

    The score is the number of words the window shows on the span's poorer side;
    a side that is the document's own edge counts as unlimited context.
    """
    window_offsets = offsets[window.start : window.end]
    if len(tags) != len(window_offsets):
        raise ValueError(f"window {window} has {len(window_offsets)} words but {len(tags)} tags")
    first_word = {start: window.start + i for i, (start, _) in enumerate(window_offsets)}
    last_word = {end: window.start + i for i, (_, end) in enumerate(window_offsets)}
    out = []
    for span in bio_to_spans(text, window_offsets, tags, label):
        left = math.inf if window.start == 0 else first_word[span.start] - window.start
        right = math.inf if window.end == len(offsets) else window.end - 1 - last_word[span.end]
        out.append((span, min(left, right)))
    return out


def merge_window_spans(candidates: list[tuple[Span, float]]) -> list[Span]:
    """One span per place: best-context candidates first, overlapping later ones dropped.

    A span found by two windows is kept once; of two overlapping but different spans
    the one predicted with more context survives (ties: earlier, then longer).
    """
    ordered = sorted(candidates, key=lambda c: (-c[1], c[0].start, -(c[0].end - c[0].start)))
    kept: list[Span] = []
    for span, _ in ordered:
        if all(span.end <= other.start or other.end <= span.start for other in kept):
            kept.append(span)
    return sorted(kept)
