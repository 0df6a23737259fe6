"""Derived generalization sets: ``voc`` (vocabulary shift), ``adv_p`` (LLM rewrites), ``adv`` (TextAttack).

Each derivation reads a base test set, perturbs every text while keeping the gold
span strings verbatim, re-locates the spans in the new text (``alignment``) and
writes records in the data contract whose ``id`` is the base record's id.
"""

# NLTK must know the project's offline data before any module imports textattack (whose import
# builds a stopword constraint); doing it here, when the package loads, makes the order of the
# attack modules' own imports irrelevant.
from src.derive import attack_env  # noqa: E402, F401
