"""Calibrated verdicts for a paired comparison of two systems on the same documents.

The percentile bootstrap of :mod:`src.scoring.stats` is liberal at the sizes the profiles run
(docs/scoring.md#calibration): with one document every resample is the observed pair (p = 0),
with a handful it rejects a true null far more often than alpha, and the smaller of its two
one-sided p-values doubles the level. Here every verdict is built from the documents' summed
statistics (``(D, K)`` per system, :func:`src.scoring.clustered.resampling_units`):

* **better / worse**: a two-sided paired permutation test (approximate randomization; Riezler
  and Maxwell 2005, Dror et al. 2018) that swaps the two systems' statistics within each
  document. Under exchangeability it holds its level at any number of documents: with
  ``2 ** D`` swaps or fewer than the resamples asked for it enumerates every swap (exact),
  else it draws them (``p = (1 + hits) / (1 + R)``).
* **the interval of the difference**: delete-one-document jackknife standard error with
  Student's t on ``D - 1`` degrees of freedom (any F1 width, 3 or 4 columns).
* **equivalent**: two one-sided t tests against the margin on the same standard error (TOST).
* **minimum documents**: below :func:`minimum_documents` (documents holding a gold span) no
  verdict is given: *inconclusive (k documents)*, and no MDD.

Empty gold (one convention, :func:`instance_f1`): an instance with neither gold nor predicted
span scores 1 on its own (nothing to find, nothing found), adds nothing to micro-F1, and a
document without a gold span does not count toward the minimum; its false positives still
lower precision. A comparison whose documents hold no gold span at all is *inconclusive (no gold)*.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import t as student_t

from src.scoring.metrics import precision_recall_f1
from src.scoring.verdicts import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE

#: Fewest documents (with a gold span) a verdict is given on, whatever alpha allows.
MIN_DOCUMENTS = 6
#: Swaps drawn when ``2 ** documents`` exceeds them.
DEFAULT_PERMUTATIONS = 10_000
_TIE = 1e-12
_BLOCK_CELLS = 1_000_000


def instance_f1(stats: np.ndarray) -> np.ndarray:
    """Per-instance LCS F1 of (..., 3 or 4) statistics; an instance with no gold and no predicted span scores 1."""
    stats = np.asarray(stats, dtype=np.float64)
    f1 = precision_recall_f1(stats)[2]
    return np.where((stats[..., -2] + stats[..., -1]) == 0, 1.0, f1)


def minimum_documents(alpha: float, floor: int = MIN_DOCUMENTS) -> int:
    """Documents below which no verdict is given: ``floor``, and at least the fewest at which the exact
    two-sided permutation test can reach ``alpha`` (its smallest p-value is ``2 / 2 ** D``)."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    reachable = math.floor(1 + math.log2(1 / alpha)) + 1  # the least D with 2 ** (1 - D) < alpha
    return max(int(floor), reachable)


def _f1(totals: np.ndarray) -> np.ndarray:
    return precision_recall_f1(totals)[2]


def _swap_blocks(documents: int, permutations: int, seed) -> tuple[list[np.ndarray] | None, bool]:
    """Every swap (R = 2 ** D rows of 0/1) when that is at most ``permutations``, else None (drawn blockwise)."""
    if documents <= math.floor(math.log2(max(permutations, 1))):
        codes = np.arange(2**documents, dtype=np.int64)[:, None]
        return [((codes >> np.arange(documents)) & 1).astype(np.float64)], True
    return None, False


def permutation_p(units_a: np.ndarray, units_b: np.ndarray, permutations: int = DEFAULT_PERMUTATIONS, seed=0) -> float:
    """Two-sided p-value of the paired document-swap test of "F1_A == F1_B" (module doc).

    Drawn swaps come in blocks of about a million cells (seeded, so the same p for the same seed)."""
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    documents = units_a.shape[0]
    total_a, total_b, moved_by = units_a.sum(0), units_b.sum(0), units_b - units_a
    observed = abs(float(_f1(total_a) - _f1(total_b)))
    blocks, exact = _swap_blocks(documents, permutations, seed)
    if blocks is None:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        rows = max(1, _BLOCK_CELLS // max(documents, 1))
        blocks = (
            rng.integers(0, 2, size=(min(rows, permutations - first), documents)).astype(np.float64)
            for first in range(0, permutations, rows)
        )
    hits = drawn = 0
    for swaps in blocks:
        moved = swaps @ moved_by
        deltas = _f1(total_a + moved) - _f1(total_b - moved)
        hits += int(np.count_nonzero(np.abs(deltas) >= observed - _TIE))
        drawn += len(swaps)
    return hits / drawn if exact else (1 + hits) / (1 + drawn)


def jackknife_se(units_a: np.ndarray, units_b: np.ndarray) -> float:
    """Delete-one-document jackknife standard error of ``F1_A - F1_B``."""
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    documents = units_a.shape[0]
    if documents < 2:
        return float("nan")
    left_out = _f1(units_a.sum(0) - units_a) - _f1(units_b.sum(0) - units_b)
    return float(math.sqrt((documents - 1) / documents * np.sum((left_out - left_out.mean()) ** 2)))


@dataclass(frozen=True)
class CalibratedVerdict:
    """One paired comparison: the F1s, the difference with its interval and tests, and the verdict."""

    f1_a: float
    f1_b: float
    delta: float
    ci_low: float
    ci_high: float
    se: float
    p_value: float  # two-sided permutation test
    p_equivalent: float  # TOST on the t interval
    documents: int  # documents holding a gold span
    minimum_documents: int
    mdd: float
    verdict: str
    reason: str | None = None  # why a comparison gives no verdict (too few documents, no gold)

    def to_dict(self) -> dict:
        """The fields, NaN (no verdict, no interval) as None: valid JSON."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(self).items()}


def compare_documents(
    units_a: np.ndarray,
    units_b: np.ndarray,
    alpha: float = 0.05,
    margin: float = 0.02,
    power: float = 0.8,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int | np.random.Generator = 0,
    min_documents: int = MIN_DOCUMENTS,
) -> CalibratedVerdict:
    """The calibrated verdict of A vs B from per-document statistics (D, K) of each (module doc)."""
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    if units_a.shape != units_b.shape or units_a.ndim != 2:
        raise ValueError(f"need two (documents, K) arrays of one shape, got {units_a.shape} and {units_b.shape}")
    if not margin > 0 or not 0.5 <= power < 1:
        raise ValueError(f"need margin > 0 and 0.5 <= power < 1, got {margin} and {power}")
    least = minimum_documents(alpha, min_documents)
    f1_a, f1_b = float(_f1(units_a.sum(0))), float(_f1(units_b.sum(0)))
    delta = f1_a - f1_b
    documents = int(np.count_nonzero(units_a[:, -1] > 0))
    nan = float("nan")
    if documents < least:
        reason = "no gold" if documents == 0 else f"{documents} document{'s' * (documents != 1)}"
        return CalibratedVerdict(
            f1_a, f1_b, delta, nan, nan, nan, nan, nan, documents, least, nan, INCONCLUSIVE, reason
        )
    se = jackknife_se(units_a, units_b)
    df = units_a.shape[0] - 1
    half = float(student_t.ppf(1 - alpha / 2, df)) * se
    p_value = permutation_p(units_a, units_b, permutations, seed)
    if se > 0:
        p_low = float(student_t.sf((delta + margin) / se, df))  # H0: delta <= -margin
        p_high = float(student_t.cdf((delta - margin) / se, df))  # H0: delta >= +margin
        p_equivalent = max(p_low, p_high)
    else:
        p_equivalent = 0.0 if abs(delta) < margin else 1.0
    mdd = float(student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)) * se
    if p_value < alpha and delta != 0:
        verdict = BETTER if delta > 0 else WORSE
    elif p_equivalent < alpha:
        verdict = EQUIVALENT
    else:
        verdict = INCONCLUSIVE
    return CalibratedVerdict(
        f1_a, f1_b, delta, delta - half, delta + half, se, p_value, p_equivalent, documents, least, mdd, verdict
    )
