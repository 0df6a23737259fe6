"""Calibrated verdicts (src.scoring.calibrated): the issue's examples and a bounded calibration on
simulated studies whose answer is known (src.scoring.simulation; the longer run is
benchmarks/bench_calibration.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from src.scoring.calibrated import (
    compare_all_pairs,
    compare_documents,
    compare_unpaired,
    instance_f1,
    jackknife_se,
    minimum_documents,
    permutation_p,
)
from src.scoring.clustered import resampling_units
from src.scoring.simulation import Design, System, draw_documents, true_delta
from src.scoring.stats import holm, paired_bootstrap, resample_counts
from src.scoring.verdicts import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, all_pairs_tost, classify_verdict


def _old_verdict(units_a, units_b, seed=0):
    """The landed report's rule: the smaller one-sided bootstrap p of resampled documents against alpha."""
    counts = resample_counts(units_a.shape[0], 1000, seed)
    result = paired_bootstrap(units_a, units_b, counts=counts)
    boot = np.stack([counts @ units_a, counts @ units_b])
    f1 = 2 * boot[..., 0] / np.maximum(boot[..., 1] + boot[..., 2], 1e-300)
    tost, _ = all_pairs_tost(f1, 0.02)
    return classify_verdict(result.p_value, 1 - result.p_value, tost[0, 1])


def test_one_document_gives_no_verdict():
    """Issue 47: 10 sentences of one document, F1 0.61 vs 0.60, was *better* with p = 0 and MDD 0."""
    a = np.array([[61.0, 100.0, 100.0]])
    b = np.array([[60.0, 100.0, 100.0]])
    assert _old_verdict(a, b) == BETTER  # before: certainty from one document
    verdict = compare_documents(a, b)
    assert verdict.verdict == INCONCLUSIVE and verdict.reason == "1 document"
    assert math.isnan(verdict.mdd) and math.isnan(verdict.p_value)


def test_three_documents_under_the_null_give_no_verdict():
    rng = np.random.default_rng(4)
    design = Design(3, sentences=(3, 4), spread=1.5)
    old = new = 0
    for _ in range(100):
        stats, _ = draw_documents(design, (System(), System()), rng)
        old += _old_verdict(stats[0], stats[1]) in (BETTER, WORSE)
        verdict = compare_documents(stats[0], stats[1], seed=rng)
        new += verdict.verdict in (BETTER, WORSE)
        assert verdict.reason is not None and verdict.reason.endswith(("documents", "document", "gold"))
    assert old >= 15  # before: a test that is not a test (40% in the 200 studies)
    assert new == 0


def test_minimum_documents_follows_alpha():
    assert minimum_documents(0.05) == 6  # 2 / 2**6 = 0.031 < 0.05 <= 2 / 2**5
    assert minimum_documents(0.01, floor=1) == 8  # 2 / 2**8 = 0.0078
    assert minimum_documents(0.05, floor=10) == 10


def test_exact_permutation_p_against_brute_force():
    rng = np.random.default_rng(1)
    stats, _ = draw_documents(Design(7), (System(0.8), System()), rng)
    a, b = stats
    observed = abs(2 * a[:, 0].sum() / a[:, 1:].sum() - 2 * b[:, 0].sum() / b[:, 1:].sum())
    hits = 0
    for code in range(2**7):
        swap = np.array([(code >> d) & 1 for d in range(7)], dtype=bool)
        x, y = np.where(swap[:, None], b, a).sum(0), np.where(swap[:, None], a, b).sum(0)
        hits += abs(2 * x[0] / (x[1] + x[2]) - 2 * y[0] / (y[1] + y[2])) >= observed - 1e-12
    assert permutation_p(a, b, permutations=1000) == hits / 128


def test_jackknife_se_against_brute_force():
    rng = np.random.default_rng(2)
    stats, _ = draw_documents(Design(9), (System(0.3), System()), rng)
    a, b = stats
    f1 = lambda s: 2 * s[0] / (s[1] + s[2])  # noqa: E731
    left = np.array([f1(np.delete(a, d, 0).sum(0)) - f1(np.delete(b, d, 0).sum(0)) for d in range(9)])
    assert jackknife_se(a, b) == pytest.approx(math.sqrt(8 / 9 * ((left - left.mean()) ** 2).sum()))


def test_empty_gold_gives_no_equivalence():
    """Issue 47: two silent systems on 20 no-gold sentences were *equivalent* (TOST p = 0), and one adding
    3 spurious spans to every sentence was equivalent to a silent one."""
    ids = [f"doc{n}#s0" for n in range(20)]
    silent = np.zeros((20, 3))
    noisy = np.column_stack([np.zeros(20), np.full(20, 3.0), np.zeros(20)])
    for other in (silent, noisy):
        units = resampling_units(np.stack([silent, other]), ids)
        assert _old_verdict(units[0], units[1]) == EQUIVALENT  # before
        verdict = compare_documents(units[1], units[0])
        assert (verdict.verdict, verdict.reason, verdict.documents) == (INCONCLUSIVE, "no gold", 0)


def test_one_empty_gold_convention():
    """An instance with no gold and no prediction scores 1 alone (the robustness code's convention), in
    every width; one with spurious spans scores 0."""
    assert instance_f1(np.array([[0.0, 0, 0], [0, 2, 0], [1, 1, 2]])).tolist() == [1.0, 0.0, pytest.approx(2 / 3)]
    assert instance_f1(np.array([[0.0, 0, 0, 0]])).tolist() == [1.0]


def test_identical_systems_on_enough_documents_are_equivalent_not_better():
    stats, _ = draw_documents(Design(20), (System(), System()), np.random.default_rng(3))
    verdict = compare_documents(stats[0], stats[0])
    assert (verdict.verdict, verdict.p_value, verdict.delta) == (EQUIVALENT, 1.0, 0.0)


def _rates(design, systems, truth, studies, seed):
    rng = np.random.default_rng(seed)
    decided = wrong = covered = equivalent = 0
    for _ in range(studies):
        stats, _ = draw_documents(design, systems, rng)
        verdict = compare_documents(stats[0], stats[1], permutations=1000, seed=rng)
        if verdict.reason:
            continue
        decided += 1
        wrong += verdict.verdict in (BETTER, WORSE)
        equivalent += verdict.verdict == EQUIVALENT
        covered += verdict.ci_low <= truth <= verdict.ci_high
    return decided, wrong / decided, equivalent / decided, covered / decided


@pytest.mark.parametrize("documents", [6, 10, 40])
def test_null_calibration(documents):
    """Exchangeable systems: false better/worse at most alpha + 3 Monte Carlo sd, coverage at least 0.95 - 3 sd."""
    studies, alpha = 300, 0.05
    decided, false_rate, _, coverage = _rates(Design(documents), (System(), System()), 0.0, studies, documents)
    assert decided >= 0.6 * studies  # the rest hold a document without gold: below the minimum
    assert false_rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / decided)
    assert coverage >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / decided)


def test_false_equivalence_at_the_margin():
    """B worse by more than the margin: *equivalent* at most alpha + 3 sd (here never: the MDD is wider)."""
    design, systems = Design(40), (System(), System(-0.25))
    truth = true_delta(design, systems, documents=100_000)
    assert truth > 0.02
    decided, _, equivalent, coverage = _rates(design, systems, truth, 200, 7)
    assert equivalent <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / decided)
    assert coverage >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / decided)


def test_a_real_difference_is_found_and_signed():
    rng = np.random.default_rng(11)
    stats, _ = draw_documents(Design(78), (System(1.0), System()), rng)
    assert compare_documents(stats[0], stats[1]).verdict == BETTER
    assert compare_documents(stats[1], stats[0]).verdict == WORSE


def test_unpaired_null_calibration():
    """The gap test on sets that share no sentence: one system on two independent draws of 20 documents."""
    rng, alpha = np.random.default_rng(21), 0.05
    decided = wrong = covered = 0
    for _ in range(200):
        a, b = (draw_documents(Design(20), (System(),), rng)[0][0] for _ in range(2))
        verdict = compare_unpaired(a, b, permutations=500, seed=rng)
        decided += verdict.reason is None
        wrong += verdict.verdict in (BETTER, WORSE)
        covered += verdict.reason is None and verdict.ci_low <= 0 <= verdict.ci_high
    sd = 3 * math.sqrt(alpha * (1 - alpha) / decided)
    assert decided == 200 and wrong / decided <= alpha + sd and covered / decided >= 0.95 - sd


def test_unpaired_finds_a_real_gap_and_says_when_a_side_is_too_small():
    rng = np.random.default_rng(3)
    strong = draw_documents(Design(60), (System(1.0),), rng)[0][0]
    weak = draw_documents(Design(60), (System(-1.0),), rng)[0][0]
    assert compare_unpaired(weak, strong).verdict == WORSE
    few = compare_unpaired(weak[:3], strong)
    assert (few.verdict, few.reason) == (INCONCLUSIVE, "3 documents") and math.isnan(few.mdd)


def test_all_pairs_share_one_draw_and_agree_with_one_pair_at_a_time():
    stats, _ = draw_documents(Design(30), (System(0.5), System(), System(-0.5)), np.random.default_rng(5))
    family = compare_all_pairs(stats, seed=9, permutations=2000)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        one = compare_documents(stats[i], stats[j], seed=9, permutations=2000)
        assert family.p_value[i, j] == family.p_value[j, i] == pytest.approx(one.p_value)
        assert (family.ci_low[i, j], family.ci_high[i, j]) == pytest.approx((one.ci_low, one.ci_high))
        assert (family.ci_low[j, i], family.ci_high[j, i]) == pytest.approx((-one.ci_high, -one.ci_low))
        assert family.verdicts(0.05)[i, j] == one.verdict


def test_holm_over_the_family_holds_the_familywise_level():
    """Seven exchangeable systems (the default profile's strategies) on 10 documents: the 21 pairs under
    Holm give any false better/worse in at most alpha + 3 sd of 150 studies."""
    rng, alpha, studies = np.random.default_rng(17), 0.05, 150
    wrong = 0
    for _ in range(studies):
        stats, _ = draw_documents(Design(10, sentences=(3, 10)), (System(),) * 7, rng)
        family = compare_all_pairs(stats, permutations=1000, seed=rng)
        upper = np.triu_indices(7, 1)
        wrong += family.reason is None and bool((holm(family.p_value[upper]) < alpha).any())
    assert wrong / studies <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / studies)
