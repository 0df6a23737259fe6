"""Derived generalization sets: ``voc`` (vocabulary shift), ``adv_p`` (LLM rewrites), ``adv`` (TextAttack).

Each derivation reads a base test set, perturbs every text while keeping the gold
span strings verbatim, re-locates the spans in the new text (``alignment``) and
writes records in the data contract whose ``id`` is the base record's id.
"""
