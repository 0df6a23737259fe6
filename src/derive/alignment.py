"""Keep gold spans aligned through a perturbation: re-locate them in the new text and verify.

All three derivations (``voc``, ``adv_p``, ``adv``) change a text around its gold spans and
must write spans whose offsets are exact for the new text. Two ways to get there:

* when the edits are known (``voc`` replaces words itself; TextAttack swaps words one for
  one), the spans are *shifted* by the edits before them (:func:`shift_spans`), which fails
  loudly if an edit touches a span;
* when only the new text is known (an LLM rewrite), the spans are found again *by their
  strings in order* (:func:`relocate_in_order`, :func:`relocate_by_rank`), and a text where
  that is ambiguous is rejected.

Either way :func:`derived_record` verifies the result: same span strings and labels in the
same order, ``text[start:end] == span.text`` and unchanged word boundaries around each span.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from src.data.schema import Record, Span, check_spans
from src.data.text import word_offsets

_WORD_CHAR = re.compile(r"\w")


class AlignmentError(ValueError):
    """Gold spans cannot be placed in a perturbed text; ``reason`` names why.

    Reasons: ``missing`` (a span string no longer occurs), ``ambiguous`` (it occurs more
    often than the gold spans can account for), ``touched`` (an edit overlaps a span),
    ``mismatch`` (verification of the placed spans failed).
    """

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True, order=True)
class TextEdit:
    """Replace ``text[start:end]`` with ``replacement`` (``start == end`` inserts)."""

    start: int
    end: int
    replacement: str

    @property
    def delta(self) -> int:
        return len(self.replacement) - (self.end - self.start)


def _is_word_char(char: str) -> bool:
    return bool(_WORD_CHAR.match(char))


def _boundaries(text: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether ``text[start:end]`` begins and ends on a word boundary of the project tokenization."""
    left = start == 0 or not (_is_word_char(text[start - 1]) and _is_word_char(text[start]))
    right = end == len(text) or not (_is_word_char(text[end - 1]) and _is_word_char(text[end]))
    return left, right


def occurrences(text: str, needle: str, whole_words: bool = True) -> list[int]:
    """Start offsets of every occurrence of ``needle`` (overlapping ones included).

    With ``whole_words`` an occurrence must not cut a word in two (so "day" is not found
    inside "Monday"), the same notion of word as :mod:`src.data.text`.
    """
    if not needle:
        raise ValueError("cannot locate an empty span string")
    found = []
    start = text.find(needle)
    while start != -1:
        if not whole_words or all(_boundaries(text, start, start + len(needle))):
            found.append(start)
        start = text.find(needle, start + 1)
    return found


def apply_edits(text: str, edits: Sequence[TextEdit]) -> str:
    """The text after non-overlapping edits (given in any order)."""
    ordered = sorted(edits)
    pieces, cursor = [], 0
    for edit in ordered:
        if edit.start < cursor or edit.end > len(text) or edit.start > edit.end:
            raise ValueError(f"edits overlap or fall outside the text: {edit}")
        pieces.append(text[cursor : edit.start])
        pieces.append(edit.replacement)
        cursor = edit.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def shift_spans(spans: Sequence[Span], edits: Sequence[TextEdit]) -> list[Span]:
    """Move each span by the length changes of the edits before it.

    An insertion exactly at a span's start goes before it, one at its end after it; any
    other contact between an edit and a span raises ``AlignmentError("touched")``.
    """
    shifted = []
    for span in spans:
        delta = 0
        for edit in edits:
            if edit.end <= span.start and not (edit.start == edit.end == span.end):
                delta += edit.delta
            elif edit.start >= span.end:
                continue
            else:
                raise AlignmentError("touched", f"edit {edit} overlaps span {span}")
        shifted.append(Span(span.start + delta, span.end + delta, span.text, span.label))
    return shifted


def relocate_by_rank(original_text: str, spans: Sequence[Span], new_text: str) -> list[Span]:
    """Place each span at the same occurrence rank of its string in ``new_text``.

    The k-th occurrence of a span string in the original is its k-th occurrence in the new
    text, which holds when the perturbation neither created nor removed occurrences of that
    string; when the counts differ the placement is ambiguous and refused.
    """
    placed = []
    for span in spans:
        whole = all(_boundaries(original_text, span.start, span.end))
        before = occurrences(original_text, span.text, whole_words=whole)
        after = occurrences(new_text, span.text, whole_words=whole)
        if span.start not in before:
            raise AlignmentError("mismatch", f"span {span} does not occur at its offsets in the original text")
        if not after:
            raise AlignmentError("missing", f"{span.text!r} does not occur in the new text")
        if len(after) != len(before):
            raise AlignmentError(
                "ambiguous", f"{span.text!r} occurs {len(before)} time(s) before and {len(after)} after"
            )
        start = after[before.index(span.start)]
        placed.append(Span(start, start + len(span.text), span.text, span.label))
    return placed


def relocate_in_order(original_text: str, spans: Sequence[Span], new_text: str) -> list[Span]:
    """Find the gold spans in a freely rewritten text by their strings, in gold order.

    Each span string must occur in ``new_text`` exactly as often as gold spans carry it
    (as whole words, unless the gold span itself cut a word in ``original_text``); the
    occurrences are given to those spans in the order the spans had. Fewer occurrences is
    ``missing``, more is ``ambiguous``: the rewrite cannot be aligned.
    """
    groups: dict[tuple[str, bool], list[int]] = defaultdict(list)
    for index, span in sorted(enumerate(spans), key=lambda item: (item[1].start, item[1].end, item[0])):
        whole = all(_boundaries(original_text, span.start, span.end))
        groups[(span.text, whole)].append(index)
    placed: list[Span | None] = [None] * len(spans)
    for (string, whole), indices in groups.items():
        found = occurrences(new_text, string, whole_words=whole)
        if len(found) < len(indices):
            raise AlignmentError("missing", f"{string!r} occurs {len(found)} time(s), gold has {len(indices)}")
        if len(found) > len(indices):
            raise AlignmentError("ambiguous", f"{string!r} occurs {len(found)} time(s), gold has {len(indices)}")
        for index, start in zip(indices, found):
            placed[index] = Span(start, start + len(string), string, spans[index].label)
    return [span for span in placed if span is not None]


def locate_words(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """Character offsets of ``words`` found left to right in ``text`` (a tokenizer's output)."""
    offsets, cursor = [], 0
    for word in words:
        start = text.find(word, cursor)
        if start == -1:
            raise AlignmentError("mismatch", f"word {word!r} not found after offset {cursor}")
        offsets.append((start, start + len(word)))
        cursor = start + len(word)
    return offsets


def word_swap_edits(old_text: str, old_words: Sequence[str], new_text: str, new_words: Sequence[str]) -> list[TextEdit]:
    """The edits that turn ``old_text`` into ``new_text`` when words were swapped one for one.

    Everything between the words must be unchanged; otherwise the texts are not a pure word
    swap and ``AlignmentError("mismatch")`` is raised.
    """
    if len(old_words) != len(new_words):
        raise AlignmentError("mismatch", f"{len(old_words)} words before, {len(new_words)} after")
    old_offsets = locate_words(old_text, old_words)
    new_offsets = locate_words(new_text, new_words)
    old_cursor = new_cursor = 0
    edits = []
    for (old_start, old_end), (new_start, new_end), old, new in zip(old_offsets, new_offsets, old_words, new_words):
        if old_text[old_cursor:old_start] != new_text[new_cursor:new_start]:
            raise AlignmentError("mismatch", f"text between words changed near offset {old_start}")
        if old != new:
            edits.append(TextEdit(old_start, old_end, new))
        old_cursor, new_cursor = old_end, new_end
    if old_text[old_cursor:] != new_text[new_cursor:]:
        raise AlignmentError("mismatch", "text after the last word changed")
    return edits


def verify_spans(original: Record, text: str, spans: Sequence[Span]) -> None:
    """Raise ``AlignmentError("mismatch")`` unless ``spans`` are the original's spans, exact in ``text``.

    Checks: same number, strings and labels in the same order; offsets inside ``text`` and
    giving the span string; and the same word boundaries on both sides as in the original,
    so an edit next to a span never glued a letter onto it.
    """
    where = f"record {original.id!r}"
    if len(spans) != len(original.spans):
        raise AlignmentError("mismatch", f"{where}: {len(original.spans)} gold spans, {len(spans)} placed")
    for old, new in zip(original.spans, spans):
        if (old.text, old.label) != (new.text, new.label):
            raise AlignmentError("mismatch", f"{where}: span {old.text!r}/{old.label} became {new.text!r}/{new.label}")
    try:
        check_spans(text, spans, where)
    except ValueError as exc:
        raise AlignmentError("mismatch", str(exc)) from None
    for old, new in zip(original.spans, spans):
        if _boundaries(original.text, old.start, old.end) != _boundaries(text, new.start, new.end):
            raise AlignmentError("mismatch", f"{where}: word boundaries around {old.text!r} changed")


def derived_record(original: Record, text: str, spans: Sequence[Span], extra: dict[str, Any]) -> Record:
    """A verified record for the perturbed ``text``, keeping the base record's id and metadata."""
    verify_spans(original, text, spans)
    return Record(original.id, original.doc_id, text, list(spans), original.source, dict(extra))


def changed_words(old_text: str, new_text: str) -> list[dict[str, str]]:
    """The word-level differences between two texts (``{"old", "new"}`` runs), by the project tokenization."""
    old_offsets, new_offsets = word_offsets(old_text), word_offsets(new_text)
    old_words = [old_text[a:b] for a, b in old_offsets]
    new_words = [new_text[a:b] for a, b in new_offsets]
    matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=False)
    return [
        {"old": " ".join(old_words[i1:i2]), "new": " ".join(new_words[j1:j2])}
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def count_changed_words(old_text: str, new_text: str) -> int:
    """Number of original words replaced or removed, plus words inserted beyond them."""
    old_words = [old_text[a:b] for a, b in word_offsets(old_text)]
    new_words = [new_text[a:b] for a, b in word_offsets(new_text)]
    matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")
