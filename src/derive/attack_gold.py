"""The gold spans of the instance under attack, found again in every text the attack builds.

The goal function needs the gold tags of each candidate text, the constraints need to know
which words belong to gold spans, and the final record needs exact offsets. All ask this
tracker, which re-locates the spans once per text: by the word-for-word edits when the
candidate is a word swap of the original (exact), else by span strings in order of rank.
"""

from __future__ import annotations

from textattack.shared.utils import words_from_text

from src.data.schema import Record, Span
from src.data.text import word_offsets
from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.alignment import (
    AlignmentError,
    relocate_by_rank,
    shift_spans,
    verify_spans,
    word_swap_edits,
)
from src.finetune.bio import non_overlapping, record_to_bio

Bio = tuple[list[str], list[tuple[int, int]], list[str]]


class GoldTracker:
    """Gold spans and BIO tags of the current instance in any perturbed text.

    Args:
        label: the span label of the task (``TIMEX`` or ``EVENT``).
        cache_size: texts remembered per instance (attacks revisit candidates often).
    """

    def __init__(self, label: str, cache_size: int = 4096):
        self.label = label
        self.cache_size = cache_size
        self.record: Record | None = None
        self._words: list[str] = []
        self._taggable: list[int] = []
        self._spans: dict[str, list[Span] | None] = {}
        self._bio: dict[str, Bio | None] = {}

    def reset(self, record: Record) -> None:
        """Start tracking ``record`` (the original of the next attack)."""
        self.record = record
        self._words = words_from_text(record.text)
        kept = set(non_overlapping([s for s in record.spans if s.label == self.label], f"record {record.id!r}"))
        self._taggable = [i for i, span in enumerate(record.spans) if span in kept]
        self._spans = {record.text: list(record.spans)}
        self._bio = {}

    def _require(self) -> Record:
        if self.record is None:
            raise RuntimeError("GoldTracker.reset(record) must be called before an attack")
        return self.record

    def spans_in(self, text: str) -> list[Span] | None:
        """The gold spans placed in ``text``, verified; None when they cannot be placed exactly."""
        record = self._require()
        if text in self._spans:
            return self._spans[text]
        spans: list[Span] | None
        try:
            spans = shift_spans(record.spans, word_swap_edits(record.text, self._words, text, words_from_text(text)))
            verify_spans(record, text, spans)
        except AlignmentError:
            try:
                spans = relocate_by_rank(record.text, record.spans, text)
                verify_spans(record, text, spans)
            except AlignmentError:
                spans = None
        if len(self._spans) >= self.cache_size:
            self._spans = {record.text: list(record.spans)}
        self._spans[text] = spans
        return spans

    def bio(self, text: str) -> Bio | None:
        """Words, offsets and gold tags of ``text`` (split as in training), or None if spans are lost."""
        if text not in self._bio:
            spans = self.spans_in(text)
            record = self._require()
            if spans is None:
                self._bio[text] = None
            else:
                taggable = [spans[i] for i in self._taggable]  # overlaps dropped once, in reset
                placed = Record(record.id, record.doc_id, text, taggable, record.source)
                self._bio[text] = record_to_bio(placed, self.label)
            if len(self._bio) >= self.cache_size:
                self._bio = {text: self._bio[text]}
        return self._bio[text]

    def word_offsets(self, text: str) -> list[tuple[int, int]]:
        """Word offsets for the victim: split at gold boundaries when the spans are found."""
        bio = self.bio(text) if self.record is not None else None
        return bio[1] if bio is not None else word_offsets(text)
