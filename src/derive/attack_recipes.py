"""The two attacks, assembled from TextAttack parts: TextFooler-style words, DeepWordBug-style characters.

Word level (TextFooler, Jin et al. 2020): words ranked by the score change when deleted;
candidates are WordNet synonyms (plus counter-fitted embedding neighbours when TextAttack's
``paragramcf`` embedding is already in its cache); constraints: no repeated edit, no
stopword, gold words protected and spans intact, part of speech kept, windowed sentence
similarity above a threshold.

Character level (DeepWordBug, Gao et al. 2018): words ranked by the score change when
replaced with ``[UNK]``; edits are a neighbouring-character swap, or a random character
substituted, deleted or inserted; the total Levenshtein distance to the original is bounded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.attack_constraints import GoldSpansIntact, MiniLMSimilarity, ProtectGoldSpans, SpacyPartOfSpeech
from src.derive.attack_gold import GoldTracker
from textattack import Attack
from textattack.constraints.overlap import LevenshteinEditDistance
from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
from textattack.search_methods import GreedyWordSwapWIR
from textattack.shared.utils import path_in_cache
from textattack.transformations import (
    CompositeTransformation,
    WordSwapNeighboringCharacterSwap,
    WordSwapRandomCharacterDeletion,
    WordSwapRandomCharacterInsertion,
    WordSwapRandomCharacterSubstitution,
    WordSwapWordNet,
)

COUNTER_FITTED_FOLDER = "word_embeddings/paragramcf"


@dataclass(frozen=True)
class WordAttackSettings:
    """Knobs of the word-level attack (defaults follow TextFooler where it has one)."""

    similarity_threshold: float = 0.8
    similarity_window: int = 15
    allow_verb_noun_swap: bool = True
    embedding_candidates: int = 50
    use_counter_fitted: bool | None = None  # None: when already cached; never downloads


@dataclass(frozen=True)
class CharAttackSettings:
    """Knobs of the character-level attack."""

    max_edit_distance: int = 30


def match_case(template: str, word: str) -> str:
    """``word`` in the capitalisation of ``template`` (WordNet lemmas are lower-case)."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


class OfflineWordNetSwap(WordSwapWordNet):
    """WordNet synonyms in the original word's capitalisation, without a download attempt.

    TextAttack's constructor calls ``nltk.download("omw-1.4")``, which only reaches for the
    network (the English WordNet needs no multilingual data); and its lemmas are lower-case,
    which would turn "Officials" into "official".
    """

    def __init__(self, language: str = "eng"):
        self.language = language

    def _get_replacement_words(self, word: str, random: bool = False) -> list[str]:
        cased = (match_case(word, synonym) for synonym in super()._get_replacement_words(word, random))
        return sorted({candidate for candidate in cased if candidate != word})


def stopwords() -> set[str]:
    """NLTK's English stopwords in lower, Title and UPPER case (TextAttack compares case-sensitively)."""
    from nltk.corpus import stopwords as corpus

    base = set(corpus.words("english"))
    return base | {w.capitalize() for w in base} | {w.upper() for w in base}


def counter_fitted_available() -> bool:
    """Whether TextAttack's counter-fitted embedding is in its local cache (no download needed)."""
    return os.path.isdir(path_in_cache(COUNTER_FITTED_FOLDER))


def word_transformation(settings: WordAttackSettings) -> Any:
    """WordNet synonyms, composed with counter-fitted neighbours when wanted and available."""
    use_embedding = counter_fitted_available() if settings.use_counter_fitted is None else settings.use_counter_fitted
    if not use_embedding:
        return OfflineWordNetSwap()
    from textattack.transformations import WordSwapEmbedding

    return CompositeTransformation([OfflineWordNetSwap(), WordSwapEmbedding(max_candidates=settings.embedding_candidates)])


def word_attack(goal: Any, tracker: GoldTracker, nlp: Any, sentence_model: Any,
                settings: WordAttackSettings = WordAttackSettings()) -> Attack:
    """TextFooler-style word substitution attack on ``goal``'s victim."""
    constraints = [
        RepeatModification(),
        StopwordModification(stopwords=stopwords()),
        ProtectGoldSpans(tracker),
        GoldSpansIntact(tracker),
        SpacyPartOfSpeech(nlp, allow_verb_noun_swap=settings.allow_verb_noun_swap),
        MiniLMSimilarity(sentence_model, threshold=settings.similarity_threshold, window_size=settings.similarity_window),
    ]
    return Attack(goal, constraints, word_transformation(settings), GreedyWordSwapWIR(wir_method="delete"))


def char_transformation() -> Any:
    """DeepWordBug's four edits, one random position each."""
    return CompositeTransformation(
        [
            WordSwapNeighboringCharacterSwap(),
            WordSwapRandomCharacterSubstitution(),
            WordSwapRandomCharacterDeletion(),
            WordSwapRandomCharacterInsertion(),
        ]
    )


def char_attack(goal: Any, tracker: GoldTracker, settings: CharAttackSettings = CharAttackSettings()) -> Attack:
    """DeepWordBug-style character edit attack on ``goal``'s victim."""
    constraints = [
        RepeatModification(),
        StopwordModification(stopwords=stopwords()),
        ProtectGoldSpans(tracker),
        GoldSpansIntact(tracker),
        LevenshteinEditDistance(settings.max_edit_distance),
    ]
    return Attack(goal, constraints, char_transformation(), GreedyWordSwapWIR(wir_method="unk"))
