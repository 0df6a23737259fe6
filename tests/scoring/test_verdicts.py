"""Four verdicts, TOST and the minimum detectable difference, each against a direct computation or a simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from src.scoring.stats import all_pairs_bootstrap, resample_counts
from src.scoring.verdicts import (
    all_pairs_tost,
    classify_verdict,
    minimum_detectable_difference,
    tost_p,
    z_sum,
)


@pytest.mark.parametrize("seed", range(20))
def test_tost_agrees_with_the_interval_inside_the_margin(seed):
    """Equivalence at alpha <=> the (1 - 2 alpha) percentile interval lies inside +-margin (direct computation)."""
    rng = np.random.default_rng(seed)
    deltas = rng.normal(rng.uniform(-0.05, 0.05), rng.uniform(0.005, 0.03), size=2001)
    margin, alpha = 0.04, 0.05
    low, high = np.quantile(deltas, [alpha, 1 - alpha], method="inverted_cdf")
    inside = -margin < low and high < margin
    p = tost_p(deltas, margin)
    direct = max(np.mean(deltas <= -margin), np.mean(deltas >= margin))  # continuous: no ties at the bound
    assert p == pytest.approx(direct)
    assert (p < alpha) == inside


def test_tost_ties_at_the_bound_count_half_and_margin_must_be_positive():
    assert tost_p(np.array([-0.1, 0.0, 0.1, 0.0]), 0.1) == pytest.approx(0.125)
    with pytest.raises(ValueError):
        tost_p(np.zeros(3), 0.0)


def test_verdicts_four_ways_and_precedence():
    assert classify_verdict(0.01, 0.99, 0.01) == "better"  # a shown difference wins over a small one
    assert classify_verdict(0.99, 0.01, 0.5) == "worse"
    assert classify_verdict(0.4, 0.6, 0.01) == "equivalent"
    assert classify_verdict(0.4, 0.6, 0.2) == "inconclusive"
    assert classify_verdict(0.4, 0.6, float("nan")) == "inconclusive"
    grid = classify_verdict(np.array([0.01, 0.3]), np.array([0.99, 0.7]), np.array([0.5, 0.001]))
    assert list(grid) == ["better", "equivalent"]
    with pytest.raises(ValueError):
        classify_verdict(0.01, 0.01, 0.5)


def test_all_pairs_tost_matches_pairwise_direct_computation():
    rng = np.random.default_rng(1)
    boot = rng.normal(0.5, 0.02, size=(4, 500)) + np.array([[0.0], [0.001], [0.05], [0.003]])
    p, sd = all_pairs_tost(boot, 0.03)
    for i in range(4):
        for j in range(4):
            if i != j:
                d = boot[i] - boot[j]
                assert p[i, j] == pytest.approx(max(np.mean(d <= -0.03), np.mean(d >= 0.03)))
                assert sd[i, j] == pytest.approx(d.std())
    assert np.allclose(p, p.T) and np.all(np.diag(p) == 0)


def test_mdd_formula():
    assert z_sum(0.05, 0.8) == pytest.approx(norm.ppf(0.95) + norm.ppf(0.8))
    assert minimum_detectable_difference(0.01) == pytest.approx(0.01 * 2.4865, rel=1e-3)


def test_power_at_the_mdd_matches_simulation():
    """Run the project's paired bootstrap test on samples whose true difference is the MDD: it rejects ~80%."""
    n, k, base = 200, 4, 0.5
    spread = np.sqrt(2 * base * (1 - base) / (k * n))  # sd of the paired F1 difference (independent systems)
    rng = np.random.default_rng(2024)
    pilot_a, pilot_b = rng.binomial(k, base, n), rng.binomial(k, base, n)
    pilot = np.stack([np.column_stack([m, np.full(n, k), np.full(n, k)]) for m in (pilot_a, pilot_b)]).astype(float)
    boot = all_pairs_bootstrap(pilot, resample_counts(n, 2000, 0)).boot_f1
    measured_sd = (boot[0] - boot[1]).std()
    assert measured_sd == pytest.approx(spread, rel=0.15)
    mdd = minimum_detectable_difference(measured_sd)
    rejected, trials = 0, 300
    for trial in range(trials):
        a = rng.binomial(k, base + mdd, n)
        b = rng.binomial(k, base, n)
        stats = np.stack([np.column_stack([m, np.full(n, k), np.full(n, k)]) for m in (a, b)]).astype(float)
        result = all_pairs_bootstrap(stats, resample_counts(n, 400, trial))
        rejected += result.p_value[0, 1] < 0.05
    assert 0.8 - 0.1 < rejected / trials < 0.8 + 0.1  # binomial sd of the share ~0.023, plus the pilot's error
