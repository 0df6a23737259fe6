"""Choosing the number of few-shot exemplars k on the validation split.

The study fixes k once, on validation, from {3, 5, 8}, and then uses it everywhere.
The caller supplies ``evaluate(k) -> F1`` (e.g. run the model with k exemplars on the
validation split and score it); this module only runs the candidates in a fixed order
and applies a deterministic choice: highest F1, ties broken towards the smaller k
(fewer exemplars: shorter, cheaper prompts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .strategies import K_CHOICES


@dataclass(frozen=True)
class KSelection:
    """The chosen k and the validation F1 of every candidate."""

    best_k: int
    scores: dict[int, float]


def select_k(
    evaluate: Callable[[int], float],
    candidates: Iterable[int] = K_CHOICES,
    tolerance: float = 0.0,
) -> KSelection:
    """Evaluate each candidate k once and return the best one.

    Args:
        evaluate: returns the validation F1 (in [0, 1]) for a given k.
        candidates: the k values to try; evaluated in ascending order.
        tolerance: F1 differences up to this size count as ties (0.0: exact ties only).

    Raises:
        ValueError: for no or invalid candidates, a negative tolerance, or an F1 that is
            not a finite number in [0, 1].
    """
    ks = sorted(set(candidates))
    if not ks:
        raise ValueError("no candidate k values")
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"candidate k values must be positive integers, got {ks}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")

    scores: dict[int, float] = {}
    for k in ks:
        f1 = evaluate(k)
        if isinstance(f1, bool) or not isinstance(f1, (int, float)) or not math.isfinite(f1) or not 0 <= f1 <= 1:
            raise ValueError(f"evaluate({k}) returned {f1!r}; expected an F1 in [0, 1]")
        scores[k] = float(f1)

    top = max(scores.values())
    best_k = min(k for k, f1 in scores.items() if f1 >= top - tolerance)
    return KSelection(best_k=best_k, scores=scores)
