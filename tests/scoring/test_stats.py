"""Bootstrap, paired tests, p-value adjustment and rank correlation: hand-worked numbers and known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

import src.scoring.stats as stats_module
from src.scoring.stats import (
    all_pairs_bootstrap,
    as_four_columns,
    benjamini_hochberg,
    bootstrap_ci,
    bootstrap_f1,
    bootstrap_f1_matrix,
    bootstrap_prf,
    classify_outcome,
    holm,
    observed_f1,
    p_better,
    paired_bootstrap,
    resample_counts,
    resampled_totals,
    spearman,
    spearman_matrix,
    two_sided,
)


def synthetic_stats(rng: np.random.Generator, n: int, hit_rate: float) -> np.ndarray:
    """Per-instance (matched, n_pred, n_gold): 1-2 predictions, 1-3 gold, matched ~ Bernoulli(hit_rate)."""
    n_pred = rng.integers(1, 3, size=n)
    n_gold = rng.integers(1, 4, size=n)
    matched = (rng.random(n) < hit_rate).astype(float)
    return np.column_stack([matched, n_pred, n_gold]).astype(float)


def test_resample_counts_are_index_resampling_counted_per_row():
    counts = resample_counts(5, 4, seed=11)
    indices = np.random.default_rng(11).integers(0, 5, size=(4, 5))
    expected = np.array([np.bincount(row, minlength=5) for row in indices])
    np.testing.assert_array_equal(counts, expected)
    assert counts.shape == (4, 5) and np.all(counts.sum(axis=1) == 5)
    np.testing.assert_array_equal(resample_counts(50, 30, seed=1), resample_counts(50, 30, seed=1))
    assert not np.array_equal(resample_counts(50, 30, seed=1), resample_counts(50, 30, seed=2))
    with pytest.raises(ValueError):
        resample_counts(0, 10)


def test_blockwise_resampling_equals_one_big_draw(monkeypatch):
    monkeypatch.setattr(stats_module, "RESAMPLE_BLOCK_ELEMENTS", 70)  # blocks of 10 rows of 7
    rows = 27  # two full blocks and a partial one
    indices = np.random.default_rng(5).integers(0, 7, size=(rows, 7))
    expected = np.array([np.bincount(row, minlength=7) for row in indices])
    np.testing.assert_array_equal(resample_counts(7, rows, seed=5), expected)
    stats = synthetic_stats(np.random.default_rng(0), 7, 0.5)
    np.testing.assert_allclose(resampled_totals(stats, resamples=rows, seed=5), expected @ stats)
    np.testing.assert_allclose(bootstrap_f1(stats, resamples=rows, seed=5), bootstrap_f1(stats, expected))


def test_bootstrap_f1_hand_computed():
    stats = np.array([[1.0, 2.0, 2.0], [0.0, 1.0, 0.0]])
    counts = np.array([[2, 0], [0, 2], [1, 1]])
    # totals (2, 4, 4) -> 4/8; (0, 2, 0) -> 0; (1, 3, 2) -> 2/5
    np.testing.assert_allclose(bootstrap_f1(stats, counts), [0.5, 0.0, 0.4])
    assert observed_f1(stats) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="shape"):
        bootstrap_f1(stats, np.ones((3, 5)))


def test_four_column_bootstrap_hand_computed():
    # (p_sum, r_sum, n_pred, n_gold): separate precision and recall sums
    stats = np.array([[1.0, 2.0, 2.0, 2.0], [0.5, 0.0, 1.0, 2.0]])
    counts = np.array([[2, 0], [0, 2], [1, 1]])
    p, r, f = bootstrap_prf(stats, counts)
    # totals (2, 4, 4, 4): P 1/2, R 1, F1 2/3; (1, 0, 2, 4): P 1/2, R 0, F1 0;
    # (1.5, 2, 3, 4): P 1/2, R 1/2, F1 1/2
    np.testing.assert_allclose(p, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(r, [1.0, 0.0, 0.5])
    np.testing.assert_allclose(f, [2 / 3, 0.0, 0.5])
    np.testing.assert_allclose(bootstrap_f1(stats, counts), f)
    assert observed_f1(stats) == pytest.approx(0.5)
    # zero denominators: no predictions, no gold, nothing at all
    np.testing.assert_allclose(bootstrap_prf(np.array([[0.0, 0.0, 0.0, 3.0]]), np.array([[1]]))[2], [0.0])
    np.testing.assert_allclose(bootstrap_prf(np.array([[0.0, 0.0, 2.0, 0.0]]), np.array([[1]]))[0], [0.0])
    np.testing.assert_allclose(observed_f1(np.zeros((2, 4))), 0.0)
    with pytest.raises(ValueError, match="columns"):
        observed_f1(np.ones((2, 5)))


def test_three_columns_widened_to_four_give_identical_results():
    rng = np.random.default_rng(3)
    stats = np.stack([synthetic_stats(rng, 50, rate) for rate in (0.3, 0.6, 0.62)])
    wide = as_four_columns(stats)
    assert wide.shape == (3, 50, 4)
    np.testing.assert_array_equal(wide[..., 0], wide[..., 1])
    np.testing.assert_array_equal(wide[..., 1:], stats)
    np.testing.assert_array_equal(as_four_columns(wide), wide)
    with pytest.raises(ValueError):
        as_four_columns(np.ones((2, 2)))
    counts = resample_counts(50, 300, seed=1)
    # bit-identical, not just close: the 4-column F1 uses the 3-column formula where p_sum == r_sum
    np.testing.assert_array_equal(bootstrap_f1(wide[0], counts), bootstrap_f1(stats[0], counts))
    np.testing.assert_array_equal(bootstrap_f1(wide[0], resamples=300, seed=1), bootstrap_f1(stats[0], counts))
    np.testing.assert_array_equal(observed_f1(wide), observed_f1(stats))
    narrow_all, wide_all = all_pairs_bootstrap(stats, counts), all_pairs_bootstrap(wide, counts)
    np.testing.assert_array_equal(narrow_all.p_value, wide_all.p_value)
    np.testing.assert_array_equal(narrow_all.boot_f1, wide_all.boot_f1)
    assert paired_bootstrap(stats[1], wide[2], counts=counts) == paired_bootstrap(stats[1], stats[2], counts=counts)


def test_four_column_paired_test_agrees_with_a_python_loop():
    rng = np.random.default_rng(12)
    a, b = as_four_columns(synthetic_stats(rng, 25, 0.6)), as_four_columns(synthetic_stats(rng, 25, 0.5))
    a[:, 1] = a[:, 1] * rng.random(25)  # recall sums below precision sums: P and R differ
    counts = resample_counts(25, 200, seed=4)
    result = paired_bootstrap(a, b, counts=counts)

    def f1(stats, row):
        p_sum, r_sum, n_pred, n_gold = (sum(c * stats[i, k] for i, c in enumerate(row)) for k in range(4))
        precision, recall = p_sum / n_pred, r_sum / n_gold
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    deltas = np.array([f1(a, row) - f1(b, row) for row in counts])
    np.testing.assert_allclose(bootstrap_f1(a, counts) - bootstrap_f1(b, counts), deltas, atol=1e-12)
    assert result.p_value == pytest.approx((np.sum(deltas < -1e-12) + 0.5 * np.sum(abs(deltas) <= 1e-12)) / 200)
    assert result.f1_a == pytest.approx(f1(a, np.ones(25)))


def test_bootstrap_f1_matrix_equals_one_system_at_a_time():
    rng = np.random.default_rng(0)
    stats = np.stack([synthetic_stats(rng, 40, rate) for rate in (0.2, 0.5, 0.9)])
    counts = resample_counts(40, 200, seed=5)
    matrix = bootstrap_f1_matrix(stats, counts)
    assert matrix.shape == (3, 200)
    for system in range(3):
        np.testing.assert_allclose(matrix[system], bootstrap_f1(stats[system], counts))


def test_p_better_counts_ties_half_and_two_sided():
    assert p_better(np.array([-1.0, 0.0, 1.0, 2.0])) == pytest.approx(0.375)
    assert two_sided(0.375) == pytest.approx(0.75)
    assert two_sided(0.9) == pytest.approx(0.2)
    np.testing.assert_allclose(two_sided(np.array([0.0, 0.5, 1.0])), [0.0, 1.0, 0.0])


def test_paired_bootstrap_is_deterministic_for_a_seed():
    rng = np.random.default_rng(1)
    a, b = synthetic_stats(rng, 100, 0.6), synthetic_stats(rng, 100, 0.5)
    assert paired_bootstrap(a, b, resamples=500, seed=3) == paired_bootstrap(a, b, resamples=500, seed=3)
    assert paired_bootstrap(a, b, resamples=500, seed=3) != paired_bootstrap(a, b, resamples=500, seed=4)


def test_identical_systems_give_p_one_half():
    stats = synthetic_stats(np.random.default_rng(2), 100, 0.5)
    result = paired_bootstrap(stats, stats.copy(), resamples=1000, seed=0)
    assert (result.delta, result.delta_ci, result.p_value, result.p_value_two_sided) == (0.0, (0.0, 0.0), 0.5, 1.0)


def test_dominating_system_gives_p_near_zero_and_swapping_complements():
    rng = np.random.default_rng(4)
    weak = synthetic_stats(rng, 200, 0.2)
    strong = weak.copy()
    strong[:, 0] = np.minimum(strong[:, 1], strong[:, 2])  # every possible match found
    result = paired_bootstrap(strong, weak, resamples=2000, seed=0)
    assert result.p_value == 0.0 and result.p_value_two_sided == 0.0
    assert result.delta > 0 and result.delta_ci[0] > 0
    swapped = paired_bootstrap(weak, strong, resamples=2000, seed=0)
    assert swapped.p_value == 1.0
    assert swapped.delta_ci == pytest.approx((-result.delta_ci[1], -result.delta_ci[0]))


def test_paired_bootstrap_agrees_with_a_python_loop_on_the_same_resamples():
    rng = np.random.default_rng(6)
    a, b = synthetic_stats(rng, 30, 0.55), synthetic_stats(rng, 30, 0.45)
    counts = resample_counts(30, 300, seed=9)
    result = paired_bootstrap(a, b, counts=counts)
    below = ties = 0
    for row in counts:
        sums_a = [sum(c * a[i, k] for i, c in enumerate(row)) for k in range(3)]
        sums_b = [sum(c * b[i, k] for i, c in enumerate(row)) for k in range(3)]
        delta = 2 * sums_a[0] / (sums_a[1] + sums_a[2]) - 2 * sums_b[0] / (sums_b[1] + sums_b[2])
        below += delta < -1e-12
        ties += abs(delta) <= 1e-12
    assert result.p_value == pytest.approx((below + 0.5 * ties) / 300)
    assert result.f1_a == pytest.approx(2 * a[:, 0].sum() / (a[:, 1].sum() + a[:, 2].sum()))


def test_bootstrap_ci_covers_the_true_f1_at_about_the_nominal_rate():
    # matched ~ Bernoulli(0.6), n_pred uniform {1,2}, n_gold uniform {1,2,3}:
    # population micro-F1 = 2 * 0.6 / (1.5 + 2) = 12/35.
    true_f1 = 12 / 35
    rng = np.random.default_rng(2024)
    counts = resample_counts(120, 1000, seed=1)
    trials = 300
    covered = sum(
        low <= true_f1 <= high
        for low, high in (bootstrap_ci(synthetic_stats(rng, 120, 0.6), counts=counts) for _ in range(trials))
    )
    assert 0.90 <= covered / trials <= 0.99


def test_all_pairs_match_one_pair_at_a_time_on_shared_resamples():
    rng = np.random.default_rng(8)
    stats = np.stack([synthetic_stats(rng, 60, rate) for rate in (0.3, 0.5, 0.52, 0.9)])
    counts = resample_counts(60, 400, seed=2)
    result = all_pairs_bootstrap(stats, counts, with_delta_ci=True)
    np.testing.assert_allclose(result.p_value + result.p_value.T, 1.0)
    np.testing.assert_allclose(np.diag(result.p_value), 0.5)
    for i in range(4):
        for j in range(4):
            if i == j:
                continue
            single = paired_bootstrap(stats[i], stats[j], counts=counts)
            assert result.p_value[i, j] == pytest.approx(single.p_value)
            assert result.p_value_two_sided[i, j] == pytest.approx(single.p_value_two_sided)
            assert result.delta[i, j] == pytest.approx(single.delta)
            np.testing.assert_allclose(result.delta_ci[i, j], single.delta_ci)
    assert result.f1_ci().shape == (4, 2)
    assert all_pairs_bootstrap(stats, counts).delta_ci is None


def test_classify_outcome_scalars_arrays_and_adjusted_pairs():
    assert classify_outcome(0.01) == "better"
    assert classify_outcome(0.99) == "worse"
    assert classify_outcome(0.5) == "equal"
    assert classify_outcome(0.04, alpha=0.01) == "equal"
    p = np.array([[0.5, 0.01], [0.99, 0.5]])
    np.testing.assert_array_equal(classify_outcome(p), [["equal", "better"], ["worse", "equal"]])
    adjusted = np.array([[1.0, 0.03], [1.0, 1.0]])
    np.testing.assert_array_equal(classify_outcome(adjusted, adjusted.T), [["equal", "better"], ["worse", "equal"]])
    with pytest.raises(ValueError):
        classify_outcome(0.01, 0.01)


def test_holm_and_bh_hand_worked():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> Holm 4x, 3x, 2x, 1x = 0.02, 0.03, 0.06, 0.04 -> running max
    np.testing.assert_allclose(holm(p), [0.03, 0.06, 0.06, 0.02])
    # BH m/k: 0.02, 0.02, 0.04, 0.04 -> running min from the top
    np.testing.assert_allclose(benjamini_hochberg(p), [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_allclose(holm([0.6, 0.7]), [1.0, 1.0])  # capped at 1
    np.testing.assert_allclose(benjamini_hochberg([0.5, 0.6]), [0.6, 0.6])
    np.testing.assert_allclose(benjamini_hochberg([0.01, 0.02, 0.9]), [0.03, 0.03, 0.9])


def test_adjustment_keeps_shape_and_leaves_nans_out_of_the_family():
    p = np.array([[0.01, np.nan], [0.04, 0.5]])
    adjusted = holm(p)
    assert adjusted.shape == (2, 2) and np.isnan(adjusted[0, 1])
    np.testing.assert_allclose(adjusted[~np.isnan(p)], [0.03, 0.08, 0.5])
    assert np.all(np.isnan(benjamini_hochberg([np.nan])))


def test_spearman_hand_computed_and_nan_safe():
    rho, p, n = spearman([1, 2, 3, 4], [1, 3, 2, 4])
    assert rho == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    t = 0.8 * np.sqrt(2 / (1 - 0.64))
    assert p == pytest.approx(2 * scipy_stats.t.sf(t, df=2))
    assert n == 4
    rho, _, n = spearman([1, 2, np.nan, 3, 4], [4, 3, 100, 2, 1])
    assert (rho, n) == (pytest.approx(-1.0), 4)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3])[0])
    assert np.isnan(spearman([1, 2], [1, 2])[0])


def test_spearman_matrix_finds_a_planted_rank_reversal():
    table = pd.DataFrame(
        {"base": [0.9, 0.7, 0.5, 0.3], "t2c": [0.8, 0.6, np.nan, 0.1], "adv": [0.1, 0.3, 0.5, 0.7]},
        index=["c1", "c2", "c3", "c4"],
    )
    rho, pval = spearman_matrix(table)
    assert list(rho.index) == list(rho.columns) == ["base", "t2c", "adv"]
    assert rho.loc["base", "adv"] == pytest.approx(-1.0)
    assert rho.loc["base", "t2c"] == pytest.approx(1.0)  # c3 dropped for this pair only
    assert rho.loc["t2c", "adv"] == rho.loc["adv", "t2c"] == pytest.approx(-1.0)
    np.testing.assert_allclose(np.diag(rho.to_numpy()), 1.0)
    assert pval.loc["base", "adv"] == pytest.approx(0.0, abs=1e-6)
