"""Four verdicts for a paired comparison: better, worse, equivalent, inconclusive.

A p-value at or above alpha says the test could not tell two configurations apart, not that
they are equal. Equivalence is tested on its own (two one-sided tests, TOST; Schuirmann 1987):
with ``delta* = F1_A* - F1_B*`` over the shared resamples and the equivalence margin ``m``,

    p_low  = share of resamples with delta* <= -m   (H0: A is worse by m or more)
    p_high = share of resamples with delta* >= +m   (H0: A is better by m or more)
    p_equivalent = max(p_low, p_high)               (ties at the bound count half)

so ``p_equivalent < alpha`` exactly when the bootstrap's (1 - 2 alpha) percentile interval of
the delta lies inside (-m, +m) (up to the interpolation of quantiles). The verdict of A vs B is
*better* when p(A > B) < alpha, *worse* when p(B > A) < alpha, else *equivalent* when
p_equivalent < alpha, else *inconclusive*. A difference that is significant and smaller than
the margin is reported as the difference (better/worse): it was shown. The study's own reading
(``src.scoring.stats.classify_outcome``: p >= alpha is "almost equal") is equivalent +
inconclusive.

Power: a one-sided test at alpha on a delta whose resampled standard deviation is ``sd``
detects a true difference of ``(z(1 - alpha) + z(power)) * sd`` with probability ``power``
(normal approximation): the minimum detectable difference (MDD).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "better", "worse", "equivalent", "inconclusive"
#: The verdicts in the report's order.
VERDICTS = (BETTER, EQUIVALENT, INCONCLUSIVE, WORSE)
#: The study's reading of a pair that is neither better nor worse.
STUDY_EQUAL = "almost equal"


def _share_beyond(delta_samples: np.ndarray, bound: float, above: bool, axis: int = -1) -> np.ndarray:
    delta_samples = np.asarray(delta_samples, dtype=np.float64)
    beyond = delta_samples > bound if above else delta_samples < bound
    ties = delta_samples == bound
    return (np.count_nonzero(beyond, axis=axis) + 0.5 * np.count_nonzero(ties, axis=axis)) / delta_samples.shape[axis]


def tost_p(delta_samples: np.ndarray, margin: float, axis: int = -1) -> np.ndarray | float:
    """TOST p-value of "|delta| < margin" from resampled deltas: ``max(p_low, p_high)`` (module doc)."""
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    low = _share_beyond(delta_samples, -margin, above=False, axis=axis)
    high = _share_beyond(delta_samples, margin, above=True, axis=axis)
    out = np.maximum(low, high)
    return float(out) if np.ndim(out) == 0 else out


def all_pairs_tost(boot: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(S, S) TOST p-values and (S, S) standard deviations of the resampled deltas of S systems.

    ``boot`` is (S, R): every system's F1 on the same resamples (one shared draw: paired).
    Both matrices are symmetric; the diagonal has p = 0 (a system is equivalent to itself) and sd 0.
    The counts compare ``boot[j]`` with ``boot[i] -+ margin`` (no (S, S, R) array of deltas), ties
    half as in :func:`tost_p`; the sds come from the covariance matrix (one product).
    """
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    boot = np.asarray(boot, dtype=np.float64)
    systems, resamples = boot.shape
    p = np.zeros((systems, systems))
    for i in range(systems - 1):
        others = boot[i + 1 :]
        low_bound, high_bound = boot[i] + margin, boot[i] - margin  # delta <= -m: other >= boot[i] + m
        low = np.count_nonzero(others > low_bound, axis=1) + np.count_nonzero(others >= low_bound, axis=1)
        high = np.count_nonzero(others < high_bound, axis=1) + np.count_nonzero(others <= high_bound, axis=1)
        p[i, i + 1 :] = np.maximum(low, high) / (2.0 * resamples)
    centred = boot - boot.mean(axis=1, keepdims=True)
    covariance = centred @ centred.T / resamples
    variance = np.diag(covariance)
    sd = np.sqrt(np.clip(variance[:, None] + variance[None, :] - 2 * covariance, 0.0, None))
    np.fill_diagonal(sd, 0.0)
    upper = np.triu_indices(systems, 1)
    p[upper[::-1]] = p[upper]
    return p, sd


def classify_verdict(p_better, p_worse, p_equivalent, alpha: float = 0.05):
    """Four-way verdict of A vs B (module doc), elementwise on arrays or on scalars.

    NaN p-values never pass alpha (a NaN ``p_equivalent``, e.g. no margin, gives inconclusive).
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    p_b = np.asarray(p_better, dtype=np.float64)
    p_w = np.asarray(p_worse, dtype=np.float64)
    p_e = np.asarray(p_equivalent, dtype=np.float64)
    if np.any((p_b < alpha) & (p_w < alpha)):
        raise ValueError("both directions significant: p-values are not a consistent pair")
    out = np.where(p_b < alpha, BETTER, np.where(p_w < alpha, WORSE, np.where(p_e < alpha, EQUIVALENT, INCONCLUSIVE)))
    return str(out) if out.ndim == 0 else out.astype(object)


def z_sum(alpha: float, power: float) -> float:
    """``z(1 - alpha) + z(power)``: the MDD in standard deviations of the delta (one-sided test)."""
    if not 0 < alpha < 0.5 or not 0.5 <= power < 1:
        raise ValueError(f"need 0 < alpha < 0.5 and 0.5 <= power < 1, got {alpha} and {power}")
    return float(norm.ppf(1 - alpha) + norm.ppf(power))


def minimum_detectable_difference(sd, alpha: float = 0.05, power: float = 0.8):
    """The true delta a one-sided test at ``alpha`` detects with probability ``power``, from the delta's sd."""
    out = z_sum(alpha, power) * np.asarray(sd, dtype=np.float64)
    return float(out) if out.ndim == 0 else out
