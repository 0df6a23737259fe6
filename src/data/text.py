"""The project's one word tokenization: runs of word characters, or single punctuation marks.

The metric (word-level LCS), BIO tagging and the perturbation code all split text
with this definition, so a "word" means the same thing everywhere.
"""

from __future__ import annotations

import re

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")


def word_offsets(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of each word of ``text``."""
    return [match.span() for match in WORD_PATTERN.finditer(text)]


def words(text: str, lowercase: bool = False) -> list[str]:
    """The words of ``text``; ``lowercase`` folds case (the metric's case-insensitive option)."""
    tokens = WORD_PATTERN.findall(text)
    return [t.lower() for t in tokens] if lowercase else tokens
