"""Statistics for the study: bootstrap CIs, paired bootstrap tests, p-value adjustment, rank correlation.

Resampling is represented as a count matrix ``counts`` of shape (R, N): row r says
how often each of the N instances was drawn in resample r (N draws with
replacement). Because micro-F1 depends only on summed per-instance statistics
``(matched, n_pred, n_gold)`` (see ``src.scoring.metrics``), or ``(p_sum, r_sum, n_pred,
n_gold)`` for scorers that match precision and recall separately (the released scorer's
variants, ``src.scoring.variants``), the F1 of every resample of every system is one
matrix product ``counts @ stats``. Every function here takes either width (the last
axis); :func:`as_four_columns` widens 3-column statistics where both kinds meet (e.g.
stacking variants for one paired test); sharing one count matrix
per dataset across systems makes all pairwise tests *paired* and cheap. Given a
seed instead of ``counts``, the same resamples are drawn and multiplied block by
block (about ``RESAMPLE_BLOCK_ELEMENTS`` counts each), which is faster because a
block stays in the CPU cache (on the 2-core machine here, blocks of 250 x 400 took
18 ms for 10,000 resamples, blocks of 500 x 400 or more 45 ms).

Paired test (Koehn 2004; Berg-Kirkpatrick et al. 2012). With
``delta* = F1_A* - F1_B*`` over resamples, the one-sided p-value for "A is better
than B" is::

    p = (#{delta* < 0} + 0.5 * #{delta* == 0}) / R

i.e. the share of resamples in which A is not better, ties counted half. Berg-Kirkpatrick
et al. count ``delta* > 2 delta`` (the bootstrap distribution shifted to the null);
the two agree when the bootstrap distribution is symmetric about ``delta``, and the
form used here is the one consistent with the percentile CI of delta (A is better
at level alpha roughly when the CI's lower alpha-quantile is above 0). Splitting ties
makes the two directions complementary (``p(A>B) + p(B>A) = 1``) and gives exactly 0.5
for identical systems. The two-sided p-value is ``min(1, 2 min(p, 1 - p))``.
Confidence intervals are bootstrap percentile intervals.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from threadpoolctl import threadpool_limits

from src.scoring.metrics import precision_recall_f1

if TYPE_CHECKING:  # pandas and scipy.stats are imported where used: the CLIs start faster
    import pandas as pd

#: The study's three-way reading ("equal" is its "almost equal": the test could not tell); the analysis's
#: four verdicts, with equivalence tested, are :data:`src.scoring.verdicts.VERDICTS`.
OUTCOMES = ("better", "equal", "worse")
RESAMPLE_BLOCK_ELEMENTS = 100_000  # indices drawn and counted at a time: keeps a block in cache


def _generator(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def iter_resample_counts(n_instances: int, resamples: int, seed: int | np.random.Generator = 0) -> Iterator[np.ndarray]:
    """Yield the rows of :func:`resample_counts` in blocks of about ``RESAMPLE_BLOCK_ELEMENTS`` counts.

    Each block draws ``rng.integers(0, n_instances, size=(rows, n_instances))`` (the same
    stream as one big draw) and counts the indices per row.
    """
    if n_instances < 1 or resamples < 1:
        raise ValueError(f"need at least one instance and one resample, got {n_instances} and {resamples}")
    rng = _generator(seed)
    block = min(max(1, RESAMPLE_BLOCK_ELEMENTS // n_instances), resamples)
    offsets = np.arange(block)[:, None] * n_instances
    for first in range(0, resamples, block):
        rows = min(block, resamples - first)
        indices = rng.integers(0, n_instances, size=(rows, n_instances))
        indices += offsets[:rows]
        counts = np.bincount(indices.ravel(), minlength=rows * n_instances)
        yield counts.reshape(rows, n_instances).astype(np.float64)


def resample_counts(n_instances: int, resamples: int, seed: int | np.random.Generator = 0) -> np.ndarray:
    """Count matrix (resamples, n_instances) of a seeded bootstrap with replacement.

    Equivalent to drawing ``numpy.random.default_rng(seed).integers(0, n, size=(R, n))``
    index resamples and counting each row, so it is reproducible from the seed.
    """
    return np.concatenate(list(iter_resample_counts(n_instances, resamples, seed)))


def resampled_totals(
    stats: np.ndarray, counts: np.ndarray | None = None, resamples: int = 10_000, seed: int | np.random.Generator = 0
) -> np.ndarray:
    """``counts @ stats`` for stats (N, K); without ``counts``, the seeded resamples block by block.

    The blockwise path gives the same numbers as ``resample_counts(N, resamples, seed) @ stats``
    without holding the whole count matrix (faster: it stays in cache). Its products are
    small, so BLAS runs them on one thread: on a busy machine, waiting for a second BLAS
    thread made them several times slower.
    """
    stats = np.asarray(stats, dtype=np.float64)
    if counts is not None:
        return _check_counts(counts, stats.shape[0]) @ stats
    with threadpool_limits(1, user_api="blas"):
        return np.concatenate([block @ stats for block in iter_resample_counts(stats.shape[0], resamples, seed)])


def _check_counts(counts: np.ndarray, n_instances: int) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[1] != n_instances:
        raise ValueError(f"counts must have shape (R, {n_instances}), got {counts.shape}")
    return counts


def as_four_columns(stats: np.ndarray) -> np.ndarray:
    """Statistics (..., 3) ``(matched, n_pred, n_gold)`` as (..., 4) ``(matched, matched, n_pred, n_gold)``.

    4-column input is returned as a float copy. The widened form scores exactly like the
    original (:func:`src.scoring.metrics.precision_recall_f1`).

    Raises:
        ValueError: the last axis is neither 3 nor 4 wide.
    """
    stats = np.asarray(stats, dtype=np.float64)
    if stats.ndim and stats.shape[-1] == 4:
        return stats.copy()
    if not stats.ndim or stats.shape[-1] != 3:
        raise ValueError(f"statistics need 3 or 4 columns, got shape {stats.shape}")
    return np.concatenate([stats[..., :1], stats], axis=-1)


def observed_f1(stats: np.ndarray) -> np.ndarray:
    """Micro-F1 from per-instance statistics (..., N, 3) or (..., N, 4); returns shape (...)."""
    return precision_recall_f1(np.asarray(stats, dtype=np.float64).sum(axis=-2))[2]


def bootstrap_f1(
    stats: np.ndarray, counts: np.ndarray | None = None, resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """F1 of one system, stats (N, 3) or (N, 4), for every resample (rows of ``counts``, or seeded): (R,)."""
    return precision_recall_f1(resampled_totals(stats, counts, resamples, seed))[2]


def bootstrap_prf(
    stats: np.ndarray, counts: np.ndarray | None = None, resamples: int = 10_000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Micro precision, recall and F1 of one system, stats (N, 3) or (N, 4), per resample: three (R,)."""
    return precision_recall_f1(resampled_totals(stats, counts, resamples, seed))


def bootstrap_f1_matrix(
    stats: np.ndarray, counts: np.ndarray | None = None, resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """F1 of S systems, stats (S, N, 3) or (S, N, 4), on the same resamples (one shared count matrix): (S, R).

    Without ``counts`` the resamples are ``resample_counts(N, resamples, seed)``, drawn blockwise.
    """
    stats = np.asarray(stats, dtype=np.float64)
    n_systems, n_instances, width = stats.shape
    stacked = stats.transpose(1, 0, 2).reshape(n_instances, n_systems * width)
    totals = resampled_totals(stacked, counts, resamples, seed)
    return precision_recall_f1(totals.reshape(totals.shape[0], n_systems, width))[2].T


def percentile_interval(samples: np.ndarray, confidence: float = 0.95, axis: int = -1) -> np.ndarray:
    """Percentile interval of bootstrap samples along ``axis``; last axis of the result is (low, high)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    return np.moveaxis(np.quantile(samples, [tail, 1 - tail], axis=axis), 0, -1)


def bootstrap_ci(
    stats: np.ndarray,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    counts: np.ndarray | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of one system's micro-F1."""
    low, high = percentile_interval(bootstrap_f1(stats, counts, resamples, seed), confidence)
    return float(low), float(high)


def p_better(delta_samples: np.ndarray, axis: int = -1) -> np.ndarray:
    """One-sided p-value for "A better than B" from resampled deltas (ties count half)."""
    delta_samples = np.asarray(delta_samples)
    resamples = delta_samples.shape[axis]
    below = np.count_nonzero(delta_samples < 0, axis=axis)
    ties = np.count_nonzero(delta_samples == 0, axis=axis)
    return (below + 0.5 * ties) / resamples


def two_sided(p_one_sided: np.ndarray | float) -> np.ndarray | float:
    """Two-sided p-value from the one-sided one: ``min(1, 2 min(p, 1 - p))``."""
    p = np.asarray(p_one_sided, dtype=np.float64)
    out = np.minimum(1.0, 2.0 * np.minimum(p, 1.0 - p))
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class PairedResult:
    """Outcome of one paired bootstrap test of system A against system B."""

    f1_a: float
    f1_b: float
    delta: float
    delta_ci: tuple[float, float]
    p_value: float
    p_value_two_sided: float
    resamples: int
    confidence: float

    def to_dict(self) -> dict:
        ci_key = f"delta_ci{round(self.confidence * 100)}"
        return {
            "f1_a": self.f1_a,
            "f1_b": self.f1_b,
            "delta": self.delta,
            ci_key: list(self.delta_ci),
            "p_value": self.p_value,
            "p_value_two_sided": self.p_value_two_sided,
            "resamples": self.resamples,
        }


def paired_bootstrap(
    stats_a: np.ndarray,
    stats_b: np.ndarray,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    counts: np.ndarray | None = None,
) -> PairedResult:
    """Paired bootstrap test of A against B on the same instances (stats (N, 3) or (N, 4) each).

    One system with 3 columns and the other with 4 is accepted (the 3-column one is widened).
    """
    stats_a = np.asarray(stats_a, dtype=np.float64)
    stats_b = np.asarray(stats_b, dtype=np.float64)
    if stats_a.shape[-1:] != stats_b.shape[-1:] and {stats_a.shape[-1:], stats_b.shape[-1:]} == {(3,), (4,)}:
        stats_a, stats_b = as_four_columns(stats_a), as_four_columns(stats_b)
    if stats_a.shape != stats_b.shape:
        raise ValueError(f"systems must be scored on the same instances: {stats_a.shape} vs {stats_b.shape}")
    boot = bootstrap_f1_matrix(np.stack([stats_a, stats_b]), counts, resamples, seed)
    deltas = boot[0] - boot[1]
    f1_a, f1_b = (float(v) for v in observed_f1(np.stack([stats_a, stats_b])))
    low, high = percentile_interval(deltas, confidence)
    p = float(p_better(deltas))
    return PairedResult(
        f1_a=f1_a,
        f1_b=f1_b,
        delta=f1_a - f1_b,
        delta_ci=(float(low), float(high)),
        p_value=p,
        p_value_two_sided=two_sided(p),
        resamples=int(boot.shape[1]),
        confidence=confidence,
    )


@dataclass(frozen=True)
class AllPairsResult:
    """All pairwise paired tests among S systems on one dataset.

    Attributes:
        f1: (S,) observed F1.
        boot_f1: (S, R) F1 per resample (for single-system CIs).
        delta: (S, S) observed ``f1[i] - f1[j]``.
        p_value: (S, S) one-sided p for "i better than j" (``p + p.T == 1``; 0.5 on the diagonal).
        p_value_two_sided: (S, S).
        delta_ci: (S, S, 2) percentile CI of the delta, or None when not requested.
    """

    f1: np.ndarray
    boot_f1: np.ndarray
    delta: np.ndarray
    p_value: np.ndarray
    p_value_two_sided: np.ndarray
    delta_ci: np.ndarray | None = None

    def f1_ci(self, confidence: float = 0.95) -> np.ndarray:
        """(S, 2) percentile CI of every system's F1 from the shared resamples."""
        return percentile_interval(self.boot_f1, confidence)


def all_pairs_bootstrap(
    stats: np.ndarray,
    counts: np.ndarray | None = None,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    with_delta_ci: bool = False,
) -> AllPairsResult:
    """Every pairwise paired test among systems stats (S, N, 3) or (S, N, 4) on one shared set of resamples.

    The shared resamples (``counts``, or seeded ones) are the pairing: the same resamples
    serve every system. Delta CIs (quantiles of S^2 R numbers) cost more than the
    p-values, so they are optional.
    """
    stats = np.asarray(stats, dtype=np.float64)
    boot = bootstrap_f1_matrix(stats, counts, resamples, seed)
    f1 = observed_f1(stats)
    n_systems, resamples = boot.shape
    below = np.zeros((n_systems, n_systems))
    ties = np.zeros((n_systems, n_systems))
    np.fill_diagonal(ties, resamples)
    for i in range(n_systems - 1):  # the upper triangle; the lower one is its complement in counts
        below[i, i + 1 :] = np.count_nonzero(boot[i] < boot[i + 1 :], axis=1)
        ties[i, i + 1 :] = np.count_nonzero(boot[i] == boot[i + 1 :], axis=1)
    lower = np.tril_indices(n_systems, -1)
    ties[lower] = ties.T[lower]
    below[lower] = resamples - below.T[lower] - ties[lower]
    p = (below + 0.5 * ties) / resamples
    delta_ci = None
    if with_delta_ci:
        delta_ci = np.zeros((n_systems, n_systems, 2))
        upper_i, upper_j = np.triu_indices(n_systems, 1)
        ci = percentile_interval(boot[upper_i] - boot[upper_j], confidence)
        delta_ci[upper_i, upper_j] = ci
        delta_ci[upper_j, upper_i] = -ci[:, ::-1]
    return AllPairsResult(
        f1=f1,
        boot_f1=boot,
        delta=f1[:, None] - f1[None, :],
        p_value=p,
        p_value_two_sided=two_sided(p),
        delta_ci=delta_ci,
    )


def classify_outcome(p_better_value, p_worse_value=None, alpha: float = 0.05):
    """The study's three-way reading of A vs B: "better" if p(A>B) < alpha, "worse" if p(B>A) < alpha, else
    "equal" (its "almost equal", which includes pairs the test could not tell apart: the analysis reports
    :func:`src.scoring.verdicts.classify_verdict` and keeps this reading beside it).

    Works elementwise on arrays (returns an array of strings) or on scalars (a string).
    ``p_worse_value`` defaults to ``1 - p_better_value`` (the complement under this
    module's tie rule); pass it explicitly for adjusted p-values, e.g. ``P_adj`` and
    ``P_adj.T`` of an all-pairs matrix.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    p_b = np.asarray(p_better_value, dtype=np.float64)
    p_w = 1.0 - p_b if p_worse_value is None else np.asarray(p_worse_value, dtype=np.float64)
    if np.any((p_b < alpha) & (p_w < alpha)):
        raise ValueError("both directions significant: p-values are not a consistent pair")
    out = np.where(p_b < alpha, "better", np.where(p_w < alpha, "worse", "equal"))
    return str(out) if out.ndim == 0 else out


def _adjust(p_values, method: str) -> np.ndarray:
    p = np.asarray(p_values, dtype=np.float64)
    flat = p.ravel()
    valid = np.flatnonzero(~np.isnan(flat))
    m = valid.size
    adjusted = np.full_like(flat, np.nan)
    if m == 0:
        return adjusted.reshape(p.shape)
    order = valid[np.argsort(flat[valid], kind="stable")]
    ranked = flat[order]
    rank = np.arange(1, m + 1)
    if method == "holm":
        values = np.maximum.accumulate((m - rank + 1) * ranked)
    else:  # Benjamini-Hochberg
        values = np.minimum.accumulate((m / rank * ranked)[::-1])[::-1]
    adjusted[order] = np.minimum(values, 1.0)
    return adjusted.reshape(p.shape)


def holm(p_values) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error), any shape; NaNs are kept out of the family."""
    return _adjust(p_values, "holm")


def benjamini_hochberg(p_values) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), any shape; NaNs kept out."""
    return _adjust(p_values, "bh")


def spearman(x, y) -> tuple[float, float, int]:
    """Spearman's rho, its p-value and the number of pairs used (pairs with a NaN are dropped).

    Fewer than 3 pairs or a constant side give NaN rho and p.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"score vectors differ in shape: {x.shape} vs {y.shape}")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan"), float("nan"), n

    result = scipy_stats.spearmanr(x, y)
    return float(result.statistic), float(result.pvalue), n


def spearman_matrix(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Dataset-by-dataset Spearman rho and p-value from a configurations x datasets score table."""

    columns = list(table.columns)
    scores = table.to_numpy(dtype=np.float64)
    rho = np.full((len(columns), len(columns)), np.nan)
    pval = rho.copy()
    for a in range(len(columns)):
        for b in range(a, len(columns)):
            r, p, _ = spearman(scores[:, a], scores[:, b])
            rho[a, b] = rho[b, a] = r
            pval[a, b] = pval[b, a] = p
    return pd.DataFrame(rho, index=columns, columns=columns), pd.DataFrame(pval, index=columns, columns=columns)
