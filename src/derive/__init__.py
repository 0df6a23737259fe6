"""Derived generalization sets: ``voc`` (vocabulary shift), ``adv_p`` (LLM rewrites), ``adv`` (TextAttack).

Each derivation reads a base test set, perturbs every text while keeping the gold
span strings verbatim, re-locates the spans in the new text (``alignment``) and
writes records in the data contract whose ``id`` is the base record's id.
"""

from __future__ import annotations


def optional_int(text: str) -> int | None:
    """argparse type for ``--limit``: an integer, or ``null``/``none``/empty for no limit.

    DVC stages pass params such as ``sweep.derive_limit`` straight through, and a YAML null
    arrives as a word, not as a missing option.
    """
    if text.strip().lower() in ("", "null", "none"):
        return None
    value = int(text)
    if value < 0:
        raise ValueError(f"limit must be >= 0, got {value}")
    return value
