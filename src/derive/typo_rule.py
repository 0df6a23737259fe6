"""The rule-based character noise ``adv_p`` falls back on: seeded DeepWordBug-style typos (swap,
drop, double or replace an inner letter) in words outside the gold spans, applied by code when no
LLM attempt produced an accepted rewrite.
"""

from __future__ import annotations

import random

from src.data.schema import Record, Span
from src.data.text import word_offsets
from src.derive.alignment import TextEdit, apply_edits, shift_spans

RULE_KIND = "char_noise_rule"

_KEYBOARD = {
    "a": "qwsz",
    "b": "vghn",
    "c": "xdfv",
    "d": "serfcx",
    "e": "wsdr",
    "f": "drtgvc",
    "g": "ftyhbv",
    "h": "gyujnb",
    "i": "ujko",
    "j": "huikmn",
    "k": "jiolm",
    "l": "kop",
    "m": "njk",
    "n": "bhjm",
    "o": "iklp",
    "p": "ol",
    "q": "wa",
    "r": "edft",
    "s": "awedxz",
    "t": "rfgy",
    "u": "yhji",
    "v": "cfgb",
    "w": "qase",
    "x": "zsdc",
    "y": "tghu",
    "z": "asx",
}


def _noisy_word(word: str, rng: random.Random) -> str:
    """One DeepWordBug-style edit of an inner letter (first and last letters stay)."""
    inner = range(1, len(word) - 1)
    operation = rng.choice(("swap", "delete", "double", "keyboard"))
    i = rng.choice(list(inner))
    if operation == "swap" and i + 1 < len(word) - 1 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if operation == "delete" and len(word) > 4:
        return word[:i] + word[i + 1 :]
    if operation == "double":
        return word[: i + 1] + word[i] + word[i + 1 :]
    lower = word[i].lower()
    replacement = rng.choice(_KEYBOARD.get(lower, "aeiou".replace(lower, "")))
    return word[:i] + (replacement.upper() if word[i].isupper() else replacement) + word[i + 1 :]


def char_noise_edits(record: Record, seed: int, n_words: int, variant: int = 0) -> list[TextEdit]:
    """Seeded typos in up to ``n_words`` alphabetic words of 4+ letters that no gold span touches
    (``variant`` draws another seeded choice of words and edits)."""
    rng = random.Random(f"{seed}:{record.id}:{RULE_KIND}:{variant}")
    candidates = [
        (start, end)
        for start, end in word_offsets(record.text)
        if end - start >= 4
        and record.text[start:end].isalpha()
        and not any(start < s.end and s.start < end for s in record.spans)
    ]
    chosen = sorted(rng.sample(candidates, min(n_words, len(candidates))))
    return [TextEdit(a, b, _noisy_word(record.text[a:b], rng)) for a, b in chosen]


def char_noise_rule(record: Record, seed: int, n_words: int, variant: int = 0) -> tuple[str, list[Span]] | None:
    """The noised text and its shifted spans, or None when no word can be noised."""
    edits = char_noise_edits(record, seed, n_words, variant)
    if not edits:
        return None
    return apply_edits(record.text, edits), shift_spans(record.spans, edits)


# --- the rewriting loop ----------------------------------------------------------------------
