"""The two attacks, assembled from TextAttack parts: TextFooler-style words, DeepWordBug-style characters.

Word level (TextFooler, Jin et al. 2020): words ranked by the score change when deleted;
candidates are WordNet synonyms (plus counter-fitted embedding neighbours only when asked for:
TextAttack's ``paragramcf`` embedding is no dependency, so a copy that happens to lie in its cache
never changes an output); constraints: no repeated edit, no
stopword, gold words protected and spans intact, a grammatical swap (no proper noun, case,
part of speech and inflection kept: :class:`GrammaticalSwap`), windowed sentence similarity
above a threshold. With ``adjacent_first`` the search (:class:`GoldFirstWIR`) tries the
words next to a gold span first (the context the tagger reads), each group in order of
deletion importance.

Character level (DeepWordBug, Gao et al. 2018): words ranked by the score change when
replaced with ``[UNK]``; edits are a neighbouring-character swap, or a random character
substituted, deleted or inserted; the total Levenshtein distance to the original is bounded.
Neither attack modifies a word with a digit (:class:`ProtectNumbers`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
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
from textattack.transformations.word_swaps import WordSwap

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.alignment import AlignmentError, locate_words
from src.derive.attack_constraints import (
    GoldSpansIntact,
    GrammaticalSwap,
    MiniLMSimilarity,
    ProtectGoldSpans,
    ProtectNumbers,
)
from src.derive.attack_gold import GoldTracker

COUNTER_FITTED_FOLDER = "word_embeddings/paragramcf"


@dataclass(frozen=True)
class WordAttackSettings:
    """Knobs of the word-level attack (defaults follow TextFooler where it has one)."""

    similarity_threshold: float = 0.8
    similarity_window: int = 15
    allow_verb_noun_swap: bool = False  # TextFooler allows it; a grammatical swap keeps the POS
    keep_fine_tag: bool = True  # keep the Penn tag (inflection) too
    embedding_candidates: int = 50
    use_counter_fitted: bool | None = None  # None/False: off; True: needs the embedding in TextAttack's cache
    adjacent_first: bool = True  # words next to a gold span first
    adjacent_window: int = 2  # words either side of a gold span that count as adjacent
    minilm_neighbours: int = 0  # add k MiniLM input-embedding neighbours as candidates (0: WordNet only)


@dataclass(frozen=True)
class CharAttackSettings:
    """Knobs of the character-level attack."""

    max_edit_distance: int = 30
    adjacent_first: bool = True
    adjacent_window: int = 2
    # every position: timex success 9 -> 12 of 36 attacked (44 instances), 1.6 -> 2.2 s per instance
    every_position: bool = False


def gold_word_indices(tracker: GoldTracker, attacked_text: Any) -> set[int]:
    """TextAttack word indices of ``attacked_text`` that overlap a gold span."""
    spans = tracker.spans_in(attacked_text.text)
    if not spans:
        return set()
    try:
        offsets = locate_words(attacked_text.text, attacked_text.words)
    except AlignmentError:
        return set()
    return {i for i, (a, b) in enumerate(offsets) if any(a < s.end and s.start < b for s in spans)}


def adjacent_first(order: Sequence[int], gold: set[int], window: int) -> list[int]:
    """``order`` with the indices within ``window`` words of a gold word moved to the front (stable)."""
    near = {g + d for g in gold for d in range(-window, window + 1) if d}
    order = [int(i) for i in order]
    return [i for i in order if i in near] + [i for i in order if i not in near]


class GoldFirstWIR(GreedyWordSwapWIR):
    """TextFooler's greedy search, optionally trying the words next to a gold span first.

    Args:
        tracker: the gold tracker of the instance under attack.
        wir_method: ``delete`` (TextFooler) or ``unk`` (DeepWordBug) importance.
        adjacent: move the words within ``window`` words of a gold span to the front.
    """

    def __init__(self, tracker: GoldTracker, wir_method: str = "delete", adjacent: bool = True, window: int = 2):
        super().__init__(wir_method=wir_method)
        self.tracker = tracker
        self.adjacent = adjacent
        self.window = window

    def _get_index_order(self, initial_text: Any, max_len: int = -1) -> tuple[Any, bool]:
        order, search_over = super()._get_index_order(initial_text)
        if self.adjacent:
            order = np.array(
                adjacent_first(order, gold_word_indices(self.tracker, initial_text), self.window), dtype=int
            )
        return order, search_over

    def extra_repr_keys(self) -> list[str]:
        return ["adjacent", "window"] + super().extra_repr_keys()


def match_case(template: str, word: str) -> str:
    """``word`` in the capitalisation of ``template`` (WordNet lemmas are lower-case)."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


_VOWELS = set("aeiou")


def _cvc(lemma: str) -> bool:
    """Short consonant-vowel-consonant lemmas double their last letter ("stop" -> "stopped"): not guessed."""
    return (
        len(lemma) <= 4
        and len(lemma) >= 3
        and lemma[-1] not in _VOWELS | set("wxy")
        and lemma[-2] in _VOWELS
        and lemma[-3] not in _VOWELS
    )


def regular_inflection(lemma: str, suffix: str) -> str | None:
    """``lemma`` with a regular ``ed``, ``ing`` or ``s`` ending (None where the spelling is not safe to guess)."""
    if not lemma.isalpha() or _cvc(lemma):
        return None
    consonant_y = lemma.endswith("y") and len(lemma) > 1 and lemma[-2] not in _VOWELS
    if suffix == "ed":
        return lemma + "d" if lemma.endswith("e") else (lemma[:-1] + "ied" if consonant_y else lemma + "ed")
    if suffix == "ing":
        if lemma.endswith("ie"):
            return lemma[:-2] + "ying"
        return lemma[:-1] + "ing" if lemma.endswith("e") and not lemma.endswith("ee") else lemma + "ing"
    if suffix == "s":
        if lemma.endswith(("s", "x", "z", "ch", "sh")):
            return lemma + "es"
        return lemma[:-1] + "ies" if consonant_y else lemma + "s"
    return None


def _irregular_forms() -> dict[str, set[str]]:
    """WordNet's exception lists reversed: lemma -> irregular inflected forms (verbs and nouns)."""
    from nltk.corpus import wordnet

    wordnet.ensure_loaded()
    forms: dict[str, set[str]] = {}
    for pos in ("v", "n"):
        for inflected, lemmas in wordnet._exception_map[pos].items():
            for lemma in lemmas:
                forms.setdefault(lemma, set()).add(inflected)
    return forms


class OfflineWordNetSwap(WordSwapWordNet):
    """WordNet synonyms in the original word's capitalisation, without a download attempt.

    TextAttack's constructor calls ``nltk.download("omw-1.4")``, which only reaches for the
    network (the English WordNet needs no multilingual data); and its lemmas are lower-case,
    which would turn "Officials" into "official".

    WordNet gives synonyms as lemmas ("announced" -> "declare"); with ``inflect`` an
    inflected original ("-ed", "-ing", "-s", or an irregular form) also gets its synonyms
    inflected the same way (regular spelling, or WordNet's irregular forms), each form
    checked back with ``wordnet.morphy``. Which form fits the sentence is left to the
    grammaticality constraint (Penn tag kept). Numbers are never swapped ("3" -> "tierce").
    """

    def __init__(self, language: str = "eng", inflect: bool = True):
        self.language = language
        self.inflect = inflect
        self._irregular: dict[str, set[str]] | None = None

    def _inflections(self, word: str, lemma: str) -> set[str]:
        from nltk.corpus import wordnet

        if self._irregular is None:
            self._irregular = _irregular_forms()
        lower = word.lower()
        irregular_verb = lower in wordnet._exception_map["v"]
        suffixes = [suffix for suffix in ("ing", "ed", "s") if lower.endswith(suffix)]
        if irregular_verb and not suffixes:
            suffixes = ["ed"]  # "said", "told": a past form
        own_irregular = self._irregular.get(lemma, set())
        forms = set()
        for suffix in suffixes:
            if suffix == "s" and lemma.endswith("s"):
                continue
            if suffix == "ed" and own_irregular:
                forms |= own_irregular  # "tell" -> "told", never "telled"
                continue
            form = regular_inflection(lemma, suffix)
            if form:
                forms.add(form)
        return {f for f in forms if any(wordnet.morphy(f, pos) == lemma for pos in ("v", "n"))}

    def _get_replacement_words(self, word: str, random: bool = False) -> list[str]:
        if any(char.isdigit() for char in word) or _is_number_word(word):
            return []
        lemmas = [
            lemma for lemma in super()._get_replacement_words(word, random) if lemma.islower() or not lemma.isalpha()
        ]
        lemmas = [lemma for lemma in lemmas if lemma == lemma.lower()]  # "Price": a name, not a synonym
        found = set(lemmas)
        if self.inflect and word.isalpha():
            for lemma in lemmas:
                if lemma.isalpha():
                    found |= self._inflections(word, lemma.lower())
        cased = (match_case(word, synonym) for synonym in found)
        return sorted({c for c in cased if c.lower() != word.lower() and not _is_number_word(c)})


NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
    "million billion trillion dozen half quarter third".split()
)


def _is_number_word(word: str) -> bool:
    return word.lower() in NUMBER_WORDS or any(char.isdigit() for char in word)


class EmbeddingNeighbourSwap(WordSwap):
    """Nearest whole-word neighbours in MiniLM's input embedding (an offline stand-in for
    TextFooler's counter-fitted embedding, which is not available offline).

    Neighbours are related words rather than synonyms ("profits" -> "revenues", "earnings",
    but also "losses"); the grammaticality and sentence-similarity constraints decide which
    are kept. Only alphabetic vocabulary entries of 3+ characters are candidates.

    Args:
        sentence_model: the loaded ``SentenceTransformer`` (its BERT word embeddings are used).
        k: neighbours per word.
        min_cosine: cosine similarity a neighbour needs.
    """

    def __init__(self, sentence_model: Any, k: int = 20, min_cosine: float = 0.35):
        import torch

        tokenizer = sentence_model.tokenizer
        weights = sentence_model[0].auto_model.get_input_embeddings().weight.detach()
        vocab = tokenizer.get_vocab()
        keep = sorted((i, w) for w, i in vocab.items() if w.isalpha() and w.islower() and len(w) >= 3)
        self.words = [w for _, w in keep]
        self.index = {w: j for j, w in enumerate(self.words)}
        matrix = weights[torch.tensor([i for i, _ in keep])]
        self.matrix = torch.nn.functional.normalize(matrix, dim=1)
        self.k = k
        self.min_cosine = min_cosine
        self._cache: dict[str, list[str]] = {}

    def neighbours(self, word: str) -> list[str]:
        lower = word.lower()
        if lower not in self._cache:
            j = self.index.get(lower)
            if j is None:
                self._cache[lower] = []
            else:
                cosine = self.matrix @ self.matrix[j]
                values, order = cosine.topk(self.k + 1)
                self._cache[lower] = [
                    self.words[int(i)] for v, i in zip(values, order) if int(i) != j and float(v) >= self.min_cosine
                ]
        return self._cache[lower]

    def _get_replacement_words(self, word: str) -> list[str]:
        if not word.isalpha() or _is_number_word(word):
            return []
        return [match_case(word, n) for n in self.neighbours(word) if not _is_number_word(n)]

    def extra_repr_keys(self) -> list[str]:
        return ["k", "min_cosine"]


def stopwords() -> set[str]:
    """NLTK's English stopwords in lower, Title and UPPER case (TextAttack compares case-sensitively)."""
    from nltk.corpus import stopwords as corpus

    base = set(corpus.words("english"))
    return base | {w.capitalize() for w in base} | {w.upper() for w in base}


def counter_fitted_available() -> bool:
    """Whether TextAttack's counter-fitted embedding is in its local cache (no download needed)."""
    return os.path.isdir(path_in_cache(COUNTER_FITTED_FOLDER))


def word_transformation(settings: WordAttackSettings, sentence_model: Any = None) -> Any:
    """WordNet synonyms, composed with counter-fitted neighbours when asked for (never because
    they happen to be cached: the outputs would depend on the machine's cache), and with MiniLM
    embedding neighbours when ``settings.minilm_neighbours`` > 0."""
    parts: list[Any] = [OfflineWordNetSwap()]
    if settings.use_counter_fitted:
        if not counter_fitted_available():
            raise FileNotFoundError(
                f"counter-fitted neighbours asked for, but {path_in_cache(COUNTER_FITTED_FOLDER)} does not exist"
            )
        from textattack.transformations import WordSwapEmbedding

        parts.append(WordSwapEmbedding(max_candidates=settings.embedding_candidates))
    if settings.minilm_neighbours > 0 and sentence_model is not None:
        parts.append(EmbeddingNeighbourSwap(sentence_model, k=settings.minilm_neighbours))
    return parts[0] if len(parts) == 1 else CompositeTransformation(parts)


def gold_safe_constraints(tracker: GoldTracker) -> list[Any]:
    """What both attacks keep: no word edited twice, no stopword, gold spans and numbers
    untouched, and every gold span still found verbatim in the perturbed text."""
    return [
        RepeatModification(),
        StopwordModification(stopwords=stopwords()),
        ProtectGoldSpans(tracker),
        ProtectNumbers(),
        GoldSpansIntact(tracker),
    ]


def word_attack(
    goal: Any, tracker: GoldTracker, nlp: Any, sentence_model: Any, settings: WordAttackSettings = WordAttackSettings()
) -> Attack:
    """TextFooler-style word substitution attack on ``goal``'s victim."""
    constraints = [
        *gold_safe_constraints(tracker),
        GrammaticalSwap(nlp, allow_verb_noun_swap=settings.allow_verb_noun_swap, keep_fine_tag=settings.keep_fine_tag),
        MiniLMSimilarity(
            sentence_model, threshold=settings.similarity_threshold, window_size=settings.similarity_window
        ),
    ]
    search = GoldFirstWIR(tracker, "delete", settings.adjacent_first, settings.adjacent_window)
    return Attack(goal, constraints, word_transformation(settings, sentence_model), search)


def char_transformation(every_position: bool = False) -> Any:
    """DeepWordBug's four edits: at every character position of a word (the search keeps the
    best), or, as TextAttack's DeepWordBug recipe, at one random position each."""
    one = not every_position
    return CompositeTransformation(
        [
            WordSwapNeighboringCharacterSwap(random_one=one),
            WordSwapRandomCharacterSubstitution(random_one=one),
            WordSwapRandomCharacterDeletion(random_one=one),
            WordSwapRandomCharacterInsertion(random_one=one),
        ]
    )


def char_attack(goal: Any, tracker: GoldTracker, settings: CharAttackSettings = CharAttackSettings()) -> Attack:
    """DeepWordBug-style character edit attack on ``goal``'s victim."""
    constraints = [
        *gold_safe_constraints(tracker),
        LevenshteinEditDistance(settings.max_edit_distance),
    ]
    search = GoldFirstWIR(tracker, "unk", settings.adjacent_first, settings.adjacent_window)
    return Attack(goal, constraints, char_transformation(settings.every_position), search)
