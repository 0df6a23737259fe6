"""The ``adv_p`` acceptance checks: whether a rewrite keeps the gold spans, their order, the
numbers and the length of the original, changes something other than by deletion, and (for a
``char_noise`` rewrite) contains a typo. Each failure is an ``AlignmentError`` naming the reason
the stats count; the similarity bound is checked later, in batches, by the caller.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from src.data.schema import Record, Span
from src.data.text import words
from src.derive.alignment import AlignmentError, changed_words, count_changed_words, derived_record, relocate_in_order

MIN_SIMILARITY = 0.85  # MiniLM cosine to the original; below it the rewrite changed the meaning
MAX_LENGTH_RATIO = 1.3  # at most 1.3x the words (+2): a passive or a split clause, not rambling
MIN_LENGTH_RATIO = 0.8  # at least 80% of the words: dropping a clause drops meaning
TYPO_MIN_RATIO = 0.8  # a typo keeps most letters in order (difflib ratio: compnay 0.86; bigger/higher 0.67)
_NUMBER = re.compile(r"[$#£€]?\d+(?:[.,:/-]\d+)*%?")  # with its currency sign or percent
LENGTH_SLACK = 2


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _content_length(text: str) -> int:
    """Words that are not punctuation marks."""
    return sum(1 for w in words(text) if re.match(r"\w", w))


def _numbers(text: str) -> Counter:
    return Counter(_NUMBER.findall(text))


def has_typo(original: str, rewrite: str) -> bool:
    """True when some changed word is a misspelling of the word it replaced (not a synonym)."""
    for change in changed_words(original, rewrite):
        old, new = change["old"].split(), change["new"].split()
        for a, b in zip(old, new) if len(old) == len(new) else ():
            if a != b and a.lower() != b.lower() and len(a) >= 3 and a.isalpha() and b.isalpha():
                if difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= TYPO_MIN_RATIO:
                    return True
    return False


def check_rewrite(
    record: Record,
    rewrite: str,
    extra: dict[str, Any],
    max_length_ratio: float = MAX_LENGTH_RATIO,
    min_length_ratio: float = MIN_LENGTH_RATIO,
    kind: str | None = None,
) -> Record:
    """The accepted record (before the similarity check), or ``AlignmentError`` naming the reason."""
    if not rewrite:
        raise AlignmentError("empty", "no rewrite in the answer")
    if _normalise(rewrite) == _normalise(record.text) or count_changed_words(record.text, rewrite) == 0:
        raise AlignmentError("unchanged", "the rewrite has the same words as the original")
    n_old, n_new = _content_length(record.text), _content_length(rewrite)
    if n_new > max_length_ratio * n_old + LENGTH_SLACK or n_new < min_length_ratio * n_old:
        raise AlignmentError("length", f"the rewrite has {n_new} words, the original {n_old}")
    try:
        spans = relocate_in_order(record.text, record.spans, rewrite)
    except AlignmentError as exc:
        if exc.reason == "missing":
            raise AlignmentError("missing_span", str(exc).split(": ", 1)[-1]) from None
        raise
    if _position_order(record.spans) != _position_order(spans):
        raise AlignmentError("order", "the gold spans occur in another order than in the original")
    if _numbers(record.text) != _numbers(rewrite):
        raise AlignmentError("numbers", "the rewrite does not keep exactly the numbers of the original")
    changes = changed_words(record.text, rewrite)
    if changes and all(not change["new"] for change in changes):
        raise AlignmentError("deletion", "the rewrite only deletes words")
    if kind == "char_noise" and not has_typo(record.text, rewrite):
        raise AlignmentError("kind", "a char_noise rewrite without any typo")
    return derived_record(record, rewrite, spans, extra)


def _position_order(spans: Sequence[Span]) -> list[int]:
    return sorted(range(len(spans)), key=lambda i: (spans[i].start, spans[i].end, i))
