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

import itertools
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


def _generator(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def swap_blocks(documents: int, permutations: int = DEFAULT_PERMUTATIONS, seed=0) -> tuple[list[np.ndarray], bool]:
    """The document swaps a permutation test scores: every one (``2 ** D`` rows of 0/1, exact) when
    that is at most ``permutations``, else ``permutations`` drawn rows in blocks of about a million
    cells (seeded). Drawn once per comparison set, they serve every pair of it."""
    if documents <= math.floor(math.log2(max(permutations, 1))):
        codes = np.arange(2**documents, dtype=np.int64)[:, None]
        return [((codes >> np.arange(documents)) & 1).astype(np.float64)], True
    rng = _generator(seed)
    rows = max(1, _BLOCK_CELLS // max(documents, 1))
    blocks = [
        rng.integers(0, 2, size=(min(rows, permutations - first), documents)).astype(np.float64)
        for first in range(0, permutations, rows)
    ]
    return blocks, False


def _swap_p(units_a: np.ndarray, units_b: np.ndarray, blocks: list[np.ndarray], exact: bool) -> float:
    total_a, total_b, moved_by = units_a.sum(0), units_b.sum(0), units_b - units_a
    observed = abs(float(_f1(total_a) - _f1(total_b)))
    hits = drawn = 0
    for swaps in blocks:
        moved = swaps @ moved_by
        deltas = _f1(total_a + moved) - _f1(total_b - moved)
        hits += int(np.count_nonzero(np.abs(deltas) >= observed - _TIE))
        drawn += len(swaps)
    return hits / drawn if exact else (1 + hits) / (1 + drawn)


def permutation_p(units_a: np.ndarray, units_b: np.ndarray, permutations: int = DEFAULT_PERMUTATIONS, seed=0) -> float:
    """Two-sided p-value of the paired document-swap test of "F1_A == F1_B" (module doc)."""
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    return _swap_p(units_a, units_b, *swap_blocks(units_a.shape[0], permutations, seed))


def jackknife_se(units_a: np.ndarray, units_b: np.ndarray) -> float:
    """Delete-one-document jackknife standard error of ``F1_A - F1_B``."""
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    documents = units_a.shape[0]
    if documents < 2:
        return float("nan")
    return _jackknife(_f1(units_a.sum(0) - units_a) - _f1(units_b.sum(0) - units_b))


def _jackknife(left_out: np.ndarray) -> float:
    """The jackknife standard error from the statistic with each document left out in turn."""
    documents = left_out.shape[0]
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


def _reason(documents: int, least: int) -> str | None:
    if documents >= least:
        return None
    return "no gold" if documents == 0 else f"{documents} document{'s' * (documents != 1)}"


def _verdict(delta: float, p_value: float, p_equivalent: float, alpha: float) -> str:
    if p_value < alpha and delta != 0:
        return BETTER if delta > 0 else WORSE
    return EQUIVALENT if p_equivalent < alpha else INCONCLUSIVE


def _t_pieces(delta: float, se: float, df: int, alpha: float, margin: float, power: float) -> tuple[float, ...]:
    """(ci_low, ci_high, TOST p, MDD) of a difference with standard error ``se`` on ``df`` degrees of freedom."""
    half = float(student_t.ppf(1 - alpha / 2, df)) * se
    if se > 0:
        p_low = float(student_t.sf((delta + margin) / se, df))  # H0: delta <= -margin
        p_high = float(student_t.cdf((delta - margin) / se, df))  # H0: delta >= +margin
        p_equivalent = max(p_low, p_high)
    else:
        p_equivalent = 0.0 if abs(delta) < margin else 1.0
    mdd = float(student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)) * se
    return delta - half, delta + half, p_equivalent, mdd


def _check(alpha: float, margin: float, power: float) -> None:
    if not margin > 0 or not 0.5 <= power < 1:
        raise ValueError(f"need margin > 0 and 0.5 <= power < 1, got {margin} and {power}")
    minimum_documents(alpha)


@dataclass(frozen=True)
class AllPairs:
    """Calibrated tests of every pair of S systems scored on the same D documents (row minus column).

    ``p_value`` (two-sided permutation), ``p_equivalent``, ``se``, ``ci_low``/``ci_high`` and ``mdd``
    are (S, S), symmetric where the sign does not matter, and NaN off the pairs asked for or when
    the documents holding a gold span are fewer than ``minimum_documents`` (``reason`` says why).
    """

    f1: np.ndarray
    p_value: np.ndarray
    p_equivalent: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    mdd: np.ndarray
    documents: int
    minimum_documents: int
    reason: str | None

    def verdicts(self, alpha: float, p_value: np.ndarray | None = None, p_equivalent: np.ndarray | None = None):
        """(S, S) verdict of row vs column (object array; ``inconclusive`` where untested), from these
        p-values or from corrected ones given in their place."""
        p = self.p_value if p_value is None else p_value
        p_eq = self.p_equivalent if p_equivalent is None else p_equivalent
        delta = self.f1[:, None] - self.f1[None, :]
        out = np.full(p.shape, INCONCLUSIVE, dtype=object)
        for i, j in zip(*np.nonzero(~np.isnan(p))):
            out[i, j] = _verdict(float(delta[i, j]), float(p[i, j]), float(p_eq[i, j]), alpha)
        return out


def compare_all_pairs(
    units: np.ndarray,
    pairs=None,
    alpha: float = 0.05,
    margin: float = 0.02,
    power: float = 0.8,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int | np.random.Generator = 0,
    min_documents: int = MIN_DOCUMENTS,
) -> AllPairs:
    """Calibrated tests of ``pairs`` ((i, j) positions; all when None) of systems ``units`` (S, D, K):
    one draw of document swaps (:func:`swap_blocks`) serves every pair, so the set is reproducible
    and its tests share their noise."""
    _check(alpha, margin, power)
    units = np.asarray(units, np.float64)
    if units.ndim != 3:
        raise ValueError(f"need (systems, documents, K) statistics, got shape {units.shape}")
    systems, docs = units.shape[:2]
    pairs = list(itertools.combinations(range(systems), 2)) if pairs is None else [tuple(p) for p in pairs]
    least = minimum_documents(alpha, min_documents)
    f1 = _f1(units.sum(1))
    documents = int(np.count_nonzero(units[0, :, -1] > 0)) if systems else 0
    blank = {name: np.full((systems, systems), np.nan) for name in ("p", "eq", "se", "low", "high", "mdd")}
    reason = _reason(documents, least)
    if reason is None and pairs:
        blocks, exact = swap_blocks(docs, permutations, seed)
        for i, j in pairs:
            delta = float(f1[i] - f1[j])
            se = jackknife_se(units[i], units[j])
            low, high, p_eq, mdd = _t_pieces(delta, se, docs - 1, alpha, margin, power)
            p = _swap_p(units[i], units[j], blocks, exact)
            for name, forward, backward in (
                ("p", p, p),
                ("eq", p_eq, p_eq),
                ("se", se, se),
                ("mdd", mdd, mdd),
                ("low", low, -high),
                ("high", high, -low),
            ):
                blank[name][i, j], blank[name][j, i] = forward, backward
    return AllPairs(
        f1, blank["p"], blank["eq"], blank["se"], blank["low"], blank["high"], blank["mdd"], documents, least, reason
    )


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
    both = compare_all_pairs(
        np.stack([units_a, units_b]), [(0, 1)], alpha, margin, power, permutations, seed, min_documents
    )
    f1_a, f1_b = float(both.f1[0]), float(both.f1[1])
    return CalibratedVerdict(
        f1_a,
        f1_b,
        f1_a - f1_b,
        float(both.ci_low[0, 1]),
        float(both.ci_high[0, 1]),
        float(both.se[0, 1]),
        float(both.p_value[0, 1]),
        float(both.p_equivalent[0, 1]),
        both.documents,
        both.minimum_documents,
        float(both.mdd[0, 1]),
        str(both.verdicts(alpha)[0, 1]),
        both.reason,
    )


def compare_unpaired(
    units_a: np.ndarray,
    units_b: np.ndarray,
    alpha: float = 0.05,
    margin: float = 0.02,
    power: float = 0.8,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int | np.random.Generator = 0,
    min_documents: int = MIN_DOCUMENTS,
) -> CalibratedVerdict:
    """A vs B scored on different documents (D_a, K) and (D_b, K), e.g. a set and a shift that shares
    none of its sentences: a two-sample permutation test that reassigns whole documents between the
    two sets, and a Welch interval on the two jackknife errors. Each side needs the minimum documents."""
    _check(alpha, margin, power)
    units_a, units_b = np.asarray(units_a, np.float64), np.asarray(units_b, np.float64)
    least = minimum_documents(alpha, min_documents)
    f1_a, f1_b = float(_f1(units_a.sum(0))), float(_f1(units_b.sum(0)))
    delta = f1_a - f1_b
    documents = min(int(np.count_nonzero(u[:, -1] > 0)) for u in (units_a, units_b))
    nan = float("nan")
    reason = _reason(documents, least)
    if reason is not None:
        return CalibratedVerdict(
            f1_a, f1_b, delta, nan, nan, nan, nan, nan, documents, least, nan, INCONCLUSIVE, reason
        )
    se_a, se_b = _one_sample_se(units_a), _one_sample_se(units_b)
    se = math.hypot(se_a, se_b)
    df = _welch_df(se_a, len(units_a), se_b, len(units_b))
    low, high, p_equivalent, mdd = _t_pieces(delta, se, df, alpha, margin, power)
    p_value = _two_sample_p(units_a, units_b, permutations, seed)
    verdict = _verdict(delta, p_value, p_equivalent, alpha)
    return CalibratedVerdict(f1_a, f1_b, delta, low, high, se, p_value, p_equivalent, documents, least, mdd, verdict)


def _one_sample_se(units: np.ndarray) -> float:
    return _jackknife(_f1(units.sum(0) - units))


def _welch_df(se_a: float, n_a: int, se_b: float, n_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom (the smaller side's when both errors are 0)."""
    va, vb = se_a**2, se_b**2
    if va + vb == 0:
        return float(min(n_a, n_b) - 1)
    return (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def _two_sample_p(units_a: np.ndarray, units_b: np.ndarray, permutations: int, seed) -> float:
    """Two-sided p of "same F1" with the pooled documents dealt again into sets of the two sizes
    (drawn; ``(1 + hits) / (1 + R)``)."""
    pooled = np.concatenate([units_a, units_b])
    total, n_a = pooled.sum(0), len(units_a)
    observed = abs(float(_f1(units_a.sum(0)) - _f1(units_b.sum(0))))
    rng = _generator(seed)
    rows = max(1, _BLOCK_CELLS // max(len(pooled), 1))
    hits = drawn = 0
    while drawn < permutations:
        size = min(rows, permutations - drawn)
        order = np.argsort(rng.random((size, len(pooled))), axis=1)
        chosen = np.zeros((size, len(pooled)))
        np.put_along_axis(chosen, order[:, :n_a], 1.0, axis=1)
        side_a = chosen @ pooled
        deltas = _f1(side_a) - _f1(total - side_a)
        hits += int(np.count_nonzero(np.abs(deltas) >= observed - _TIE))
        drawn += size
    return (1 + hits) / (1 + drawn)
