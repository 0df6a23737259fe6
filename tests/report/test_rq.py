"""RQ computations on synthetic tables with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from src.report import comparisons, rq
from src.report.analysis import load_dimensions, strategy_groups
from src.report.results import DatasetStats
from src.scoring.stats import all_pairs_bootstrap, paired_bootstrap, resample_counts
from tests.helpers.analysis_settings import PAIRWISE

N = 200


def constant_stats(matched: float, n: int = N) -> np.ndarray:
    """Every instance with two predicted and two gold spans and ``matched`` similarity."""
    return np.tile([matched, 2.0, 2.0], (n, 1))


def noisy_stats(mean: float, seed: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([np.clip(rng.normal(mean, 0.6, n), 0, 2), np.full(n, 2.0), np.full(n, 2.0)])


def stacked(configs, arrays, ids=None):
    """A dataset where each configuration has its array's instances (ids ``i0``... unless given)."""
    ids = ids or [[f"i{k}" for k in range(len(array))] for array in arrays]
    return DatasetStats(
        "timex",
        "base",
        list(configs),
        {c: list(i) for c, i in zip(configs, ids)},
        {c: np.asarray(a, dtype=np.float64) for c, a in zip(configs, arrays)},
    )


def runs_table(rows):
    table = pd.DataFrame(
        rows,
        columns=[
            "config",
            "model",
            "strategy",
            "kind",
            "family",
            "architecture",
            "params_total_b",
            "inductive_plus",
            "size_series",
        ],
    )
    return table.set_index("config")


def test_a_configuration_that_dominates_everywhere_has_probability_one_of_better():
    configs = ["strong", "middle", "weak"]
    data = {
        key: stacked(configs, [constant_stats(2.0), noisy_stats(1.0, seed), noisy_stats(0.5, seed + 1)])
        for seed, key in enumerate(["timex/base", "timex/adv", "timex/t2c"])
    }
    tests = comparisons.pairwise_tests(data, resamples=400, seed=1, **PAIRWISE)
    outcomes = comparisons.outcome_tables(tests, alpha=0.05, correction="holm")
    links = rq.reference_links(list(tests))
    assert links == [("timex/base", "timex/adv"), ("timex/base", "timex/t2c")]
    for correction in ("none", "holm"):
        table = rq.rq1_transfer(outcomes[correction], links, {"all": configs, "strong-only": ["strong"]})
        dominant = table[table["group"] == "all"]
        assert list(dominant["pairs"]) == [3, 3, 6]  # strong>middle, strong>weak, middle>weak on each link
        assert list(dominant["better"]) == [1.0, 1.0, 1.0]
        assert list(dominant["worse"]) == [0.0, 0.0, 0.0]
        lonely = table[table["group"] == "strong-only"]
        assert list(lonely["pairs"]) == [0, 0, 0] and lonely["better"].isna().all()
    assert outcomes["none"]["timex/base"].loc["strong", "weak"] == "better"
    assert outcomes["none"]["timex/base"].loc["weak", "strong"] == "worse"


def test_identical_configurations_are_equivalent_and_start_no_rq1_pair():
    same = noisy_stats(1.0, seed=3)
    data = {key: stacked(["a", "b"], [same, same]) for key in ("eventx/base", "eventx/len")}
    tests = comparisons.pairwise_tests(data, resamples=300, seed=0, **PAIRWISE)
    assert tests["eventx/base"].p_value[0, 1] == 0.5
    assert tests["eventx/base"].p_equivalent[0, 1] == 0.0  # every resampled delta is 0: inside any margin
    outcomes = comparisons.outcome_tables(tests, alpha=0.05, correction="bh")
    for correction in ("none", "bh"):
        assert (outcomes[correction]["eventx/len"].to_numpy() == "equivalent").all()
    table = rq.rq1_transfer(outcomes["none"], rq.reference_links(list(tests)), {"all": ["a", "b"]})
    assert table["pairs"].tolist() == [0, 0]


def test_pairwise_tests_are_seeded_and_report_observed_f1():
    data = {"timex/base": stacked(["a", "b"], [noisy_stats(1.2, 0), noisy_stats(1.0, 1)])}
    first = comparisons.pairwise_tests(data, resamples=200, seed=5, **PAIRWISE)["timex/base"]
    again = comparisons.pairwise_tests(data, resamples=200, seed=5, **PAIRWISE)["timex/base"]
    np.testing.assert_array_equal(first.p_value, again.p_value)
    close = {"timex/base": stacked(["a", "b"], [noisy_stats(1.0, 0), noisy_stats(1.0, 1)])}
    p_values = {
        seed: comparisons.pairwise_tests(close, resamples=200, seed=seed, **PAIRWISE)["timex/base"].p_value[0, 1]
        for seed in (5, 6)
    }
    assert p_values[5] != p_values[6]
    stats = data["timex/base"].stacked(["a", "b"], [f"i{k}" for k in range(N)])
    f1 = stats[:, :, 0].sum(1) * 2 / (stats[:, :, 1].sum(1) + stats[:, :, 2].sum(1))
    np.testing.assert_allclose(np.diag(first.f1), f1)
    np.testing.assert_allclose([first.f1[0, 1], first.f1[1, 0]], f1)
    np.testing.assert_allclose(first.p_value + first.p_value.T, 1.0)
    assert first.instances.tolist() == [[N, N], [N, N]] and first.pairs == 1


def test_pairs_are_compared_on_the_instances_both_share():
    """Two configurations on 400 instances, a third on 5 of them: 400 for the first pair, 5 for the others."""
    ids = [f"i{k}" for k in range(400)]
    few = ids[10:15]
    arrays = [noisy_stats(1.2, 0, 400), noisy_stats(1.0, 1, 400), noisy_stats(0.8, 2, 5)]
    data = stacked(["a", "b", "c"], arrays, [ids, ids, few])
    sets = comparisons.comparison_sets([data.ids[c] for c in data.configs])
    assert [(len(s.ids), s.configs, s.pairs) for s in sets] == [
        (400, [0, 1], [(0, 1)]),
        (5, [0, 1, 2], [(0, 2), (1, 2)]),
    ]
    test = comparisons.pairwise_tests({"timex/base": data}, resamples=300, seed=4, **PAIRWISE)["timex/base"]
    assert test.instances.tolist() == [[400, 400, 5], [400, 400, 5], [5, 5, 5]]
    assert test.instance_counts() == [(400, 1), (5, 2)]
    # each set is one vectorised test on its own seeded resamples, equal to testing one pair at a time
    counts = resample_counts(400, 300, comparisons.dataset_seed(4, "timex/base", tuple(sorted(ids))))
    single = paired_bootstrap(data.stats["a"][np.argsort(ids)], data.stats["b"][np.argsort(ids)], counts=counts)
    assert test.p_value[0, 1] == pytest.approx(single.p_value)
    on_few = data.stacked(["a", "b", "c"], sorted(few))
    counts = resample_counts(5, 300, comparisons.dataset_seed(4, "timex/base", tuple(sorted(few))))
    expected = all_pairs_bootstrap(on_few, counts)
    assert test.p_value[0, 2] == pytest.approx(expected.p_value[0, 2])
    assert test.p_value[2, 1] == pytest.approx(expected.p_value[2, 1])
    assert test.f1[0, 2] == pytest.approx(expected.f1[0]) and test.f1[0, 1] != pytest.approx(expected.f1[0])


def test_pairs_that_share_no_instance_are_untested_and_outside_the_family():
    data = stacked(
        ["a", "b", "c"],
        [constant_stats(2.0, 20), constant_stats(0.0, 20), constant_stats(1.0, 4)],
        [[f"i{k}" for k in range(20)]] * 2 + [["other0", "other1", "other2", "other3"]],
    )
    tests = comparisons.pairwise_tests({"timex/base": data}, resamples=200, seed=0, **PAIRWISE)
    test = tests["timex/base"]
    assert test.pairs == 1 and test.instance_counts() == [(20, 1), (0, 2)]
    assert np.isnan(test.p_value[0, 2]) and np.isnan(test.p_value[2, 1])
    adjusted = comparisons.directional_adjusted(tests, "holm")["timex/base"]
    assert adjusted[0, 1] == pytest.approx(test.p_two_sided[0, 1]) and np.isnan(adjusted[0, 2])  # a family of one
    table = comparisons.outcome_tables(tests, 0.05, "holm")["none"]["timex/base"]
    assert (
        table.loc["a", "b"] == "better"
        and table.loc["a", "c"] == comparisons.UNTESTED
        and table.loc["c", "c"] == "equivalent"
    )


def fixed_tests(two_sided):
    """Two configurations x and y per dataset: (two-sided p, winner) given, 10 documents each."""
    out = {}
    for key, (p, winner) in two_sided.items():
        f1 = np.array([[0.5, 0.6], [0.4, 0.5]]) if winner == "x" else np.array([[0.5, 0.4], [0.6, 0.5]])
        study = np.full((2, 2), 0.5)
        out[key] = comparisons.PairwiseTests(
            key, ["x", "y"], f1, study, np.full((2, 2), 10), p_two_sided=np.array([[np.nan, p], [p, np.nan]])
        )
    return out


@pytest.mark.parametrize("method, expected", [("holm", (0.02, 0.4)), ("bh", (0.02, 0.4))])
def test_correction_covers_every_pair_of_every_dataset_in_its_observed_direction(method, expected):
    tests = fixed_tests({"timex/base": (0.01, "x"), "timex/adv": (0.4, "y")})
    adjusted = comparisons.directional_adjusted(tests, method)
    assert adjusted["timex/base"][0, 1] == pytest.approx(expected[0])
    assert adjusted["timex/base"][1, 0] == 1.0
    assert adjusted["timex/adv"][1, 0] == pytest.approx(expected[1])  # y is the observed winner there
    assert adjusted["timex/adv"][0, 1] == 1.0
    outcomes = comparisons.outcome_tables(tests, 0.05, method)[method]
    assert outcomes["timex/base"].loc["x", "y"] == "better"
    assert outcomes["timex/adv"].loc["y", "x"] == "inconclusive"  # no TOST p-values: never equivalent


def test_holm_turns_a_borderline_finding_inconclusive_while_raw_keeps_it():
    tests = fixed_tests({f"timex/{d}": (0.03, "x") for d in ("base", "adv", "t2c")})
    outcomes = comparisons.outcome_tables(tests, 0.05, "holm")
    assert outcomes["none"]["timex/adv"].loc["x", "y"] == "better"
    assert outcomes["holm"]["timex/adv"].loc["x", "y"] == "inconclusive"  # 3 x 0.03 = 0.09


def test_the_verdict_is_two_sided_where_the_study_reads_one_side():
    """The two-alpha rule of the study: a one-sided p of 0.04 is its "better"; the verdict needs a
    two-sided p below alpha (0.08 here is not)."""
    tests = fixed_tests({"timex/base": (0.08, "x")})
    tests["timex/base"].p_value[:] = [[0.5, 0.04], [0.96, 0.5]]
    assert comparisons.outcome_tables(tests, 0.05, "holm")["none"]["timex/base"].loc["x", "y"] == "inconclusive"
    assert comparisons.study_tables(tests, 0.05, "holm")["none"]["timex/base"].loc["x", "y"] == "better"


def test_one_document_gives_no_verdict_and_no_mdd():
    """Issue 47: ten sentences of one document, F1 0.61 vs 0.60, were *better* with p 0 and MDD 0."""
    ids = [f"wsj_0001#s{k}" for k in range(10)]
    data = stacked(["a", "b"], [constant_stats(1.22, 10), constant_stats(1.2, 10)], [ids, ids])
    test = comparisons.pairwise_tests({"timex/base": data}, resamples=200, seed=0, **PAIRWISE)["timex/base"]
    assert test.documents[0, 1] == 1 and np.isnan(test.p_two_sided[0, 1]) and np.isnan(test.mdd())
    table = comparisons.outcome_tables({"timex/base": test}, 0.05, "holm")
    assert table["none"]["timex/base"].loc["a", "b"] == table["holm"]["timex/base"].loc["a", "b"] == "inconclusive"


def test_unknown_correction_is_rejected():
    with pytest.raises(ValueError, match="unknown correction 'sidak'"):
        comparisons.directional_adjusted({}, "sidak")


def test_comp_is_linked_to_both_base_sets():
    keys = ["timex/base", "timex/len", "eventx/base", "comp/base"]
    assert rq.reference_links(keys) == [
        ("timex/base", "timex/len"),
        ("timex/base", "comp/base"),
        ("eventx/base", "comp/base"),
    ]


def test_planted_rank_reversal_gives_negative_rho_and_small_groups_say_why():
    table = pd.DataFrame(
        {"timex/base": [0.1, 0.2, 0.3, 0.4], "timex/adv": [0.4, 0.3, 0.2, 0.1], "timex/t2c": [0.15, 0.25, 0.35, 0.45]},
        index=["a", "b", "c", "d"],
    )
    result = rq.rq2_correlations(table, {"all": list("abcd"), "pair": ["a", "b"]}, "holm")
    rho = result["all"].rho
    assert rho.loc["timex/base", "timex/adv"] == pytest.approx(-1.0)
    assert rho.loc["timex/base", "timex/t2c"] == pytest.approx(1.0)
    assert result["all"].reason is None
    assert (
        result["all"].p_adjusted.loc["timex/base", "timex/adv"] >= result["all"].p_value.loc["timex/base", "timex/adv"]
    )
    assert result["pair"].rho.isna().all().all()
    assert result["pair"].reason == "only 2 configuration(s); a rank correlation needs at least 3"
    assert rq.mean_off_diagonal(rho) == pytest.approx((-1 + 1 - 1) / 3)


def test_constant_scores_are_named_as_the_reason_for_missing_rho():
    table = pd.DataFrame({"timex/base": [0.1, 0.2, 0.3], "timex/adv": [0.5, 0.5, 0.5]}, index=["a", "b", "c"])
    result = rq.rq2_correlations(table, {"all": ["a", "b", "c"]}, "bh")["all"]
    assert np.isnan(result.rho.loc["timex/base", "timex/adv"])
    assert "timex/adv" in result.reason


def test_every_missing_rho_has_its_reason_and_the_diagonal_alone_is_no_correlation():
    one = rq.rq2_correlations(
        pd.DataFrame({"timex/base": [0.1, 0.2, 0.3]}, index=list("abc")), {"all": list("abc")}, "holm"
    )
    assert one["all"].rho.loc["timex/base", "timex/base"] == pytest.approx(1.0) and not one["all"].computed
    assert one["all"].reason == "only 1 dataset(s) (timex/base); a rank correlation between datasets needs at least 2"
    none = rq.rq2_correlations(pd.DataFrame(index=list("abc")), {"all": list("abc")}, "holm")["all"]
    assert not none.computed and none.reason.startswith("only 0 dataset(s);")
    table = pd.DataFrame(
        {
            "timex/base": [0.1, 0.2, 0.3, 0.4],
            "timex/adv": [0.4, 0.3, 0.2, 0.1],
            "timex/t2c": [0.1, 0.3, np.nan, np.nan],
        },
        index=list("abcd"),
    )
    result = rq.rq2_correlations(table, {"all": list("abcd")}, "bh")["all"]
    assert result.computed and result.rho.loc["timex/base", "timex/adv"] == pytest.approx(-1.0)
    assert result.reason == "only 2 configuration(s) scored on timex/t2c"
    table["timex/len"] = [0.5, np.nan, 0.1, 0.3]  # scored by three, but two of them are not on timex/t2c
    table.loc["d", "timex/t2c"] = 0.2
    result = rq.rq2_correlations(table, {"all": list("abcd")}, "bh")["all"]
    assert result.reason == "only 2 configuration(s) scored on both timex/t2c and timex/len"
    full = rq.rq2_correlations(table.drop(columns="timex/t2c"), {"all": list("abcd")}, "bh")["all"]
    assert full.reason is None


def test_size_curves_without_any_score_are_empty_tables_with_their_columns():
    f1 = pd.DataFrame({"timex/base": [np.nan] * 4}, index=list(RUNS.index[:4]))
    curves, trend = rq.size_curves(f1, RUNS, {"fam": ["m1", "m2"]})
    assert curves.empty and list(curves.columns) == ["series", "model", "params_total_b", "dataset", "f1", "strategies"]
    assert trend.empty and list(trend.columns) == ["series", "dataset", "sizes", "rho", "p_value"]


def outcome(configs, better_pairs):
    """An outcome table where each (a, b) in better_pairs is 'better' (and b vs a 'worse'), the rest inconclusive."""
    table = pd.DataFrame("inconclusive", index=configs, columns=configs)
    for a, b in better_pairs:
        table.loc[a, b], table.loc[b, a] = "better", "worse"
    return table


RUNS = runs_table(
    [
        ("m1-I", "m1", "I", "prompted", "fam", "dense", 1.0, True, None),
        ("m1-D", "m1", "D", "prompted", "fam", "dense", 1.0, False, None),
        ("m2-I", "m2", "I", "prompted", "fam", "dense", 7.0, True, None),
        ("m2-D", "m2", "D", "prompted", "fam", "dense", 7.0, False, None),
        ("m3-I", "m3", "I", "prompted", "fam", "moe", 40.0, True, None),
        ("m3-D", "m3", "D", "prompted", "fam", "moe", 40.0, False, None),
        ("ft", "ft", "finetuned", "finetuned", "bert", "dense", 0.1, False, None),
    ]
)


def test_strategy_pairs_count_model_dataset_cells_per_dimension():
    configs = list(RUNS.index[:6])
    outcomes = {
        "timex/adv": outcome(configs, [("m1-I", "m1-D"), ("m3-D", "m3-I")]),
        "timex/t2c": outcome(configs, [("m1-I", "m1-D"), ("m2-I", "m2-D"), ("m3-I", "m3-D")]),
    }
    dimensions = {"robustness": ["timex/adv"], "domain": ["timex/t2c"], "structural": ["timex/len"]}
    table = rq.rq3_strategy_pairs(outcomes, RUNS, dimensions).set_index("dimension")
    assert table.loc["robustness", ["pairs", "n_better", "n_inconclusive", "n_worse"]].tolist() == [3, 1, 1, 1]
    assert table.loc["domain", "better"] == 1.0
    assert table.loc["structural", "pairs"] == 0
    assert table.loc["all", ["pairs", "n_better", "n_inconclusive", "n_worse"]].tolist() == [6, 4, 1, 1]
    assert table.loc["all", "n_study_almost_equal"] == 1  # the study's reading: equivalent + inconclusive
    assert (table["strategy_a"] == "I").all() and (table["strategy_b"] == "D").all()
    assert table.loc["all", "models"] == 3


def test_dense_vs_moe_within_a_family_and_its_reason_when_impossible():
    configs = list(RUNS.index[:6])
    outcomes = {"timex/adv": outcome(configs, [("m3-I", "m1-I"), ("m3-I", "m2-I"), ("m2-D", "m3-D")])}
    table, reason = rq.rq3_dense_vs_moe(outcomes, RUNS, {"robustness": ["timex/adv"]})
    assert reason is None
    row = table.set_index("dimension").loc["robustness"]
    assert row[["pairs", "n_better", "n_inconclusive", "n_worse"]].tolist() == [4, 2, 1, 1]
    assert row["moe_models"] == "m3" and row["dense_models"] == "m1, m2"
    empty, reason = rq.rq3_dense_vs_moe(outcomes, RUNS.loc[["m1-I", "m1-D"]], {"robustness": ["timex/adv"]})
    assert empty.empty and reason.startswith("needs more models") and "fam: dense" in reason


def test_size_series_from_the_param_else_from_a_family_at_several_sizes():
    assert rq.size_series(RUNS) == {"fam": ["m1", "m2"]}  # dense models of one family, two sizes
    tagged = RUNS.assign(size_series=["s", "s", "s", "s", None, None, None])
    assert rq.size_series(tagged) == {"s": ["m1", "m2"]}
    assert rq.size_series(RUNS.loc[["m1-I", "m3-I"]]) == {}
    f1 = pd.DataFrame({"timex/base": [0.2, 0.4, 0.6, 0.8, 0.5, 0.5]}, index=list(RUNS.index[:6]))
    curves, trend = rq.size_curves(f1, RUNS, {"fam": ["m1", "m2"]})
    assert curves[["model", "params_total_b", "strategies"]].values.tolist() == [["m1", 1.0, 2], ["m2", 7.0, 2]]
    np.testing.assert_allclose(curves["f1"], [0.3, 0.7])
    assert trend.loc[0, "sizes"] == 2 and np.isnan(trend.loc[0, "rho"])  # two sizes: no rank correlation


def test_error_breakdown_sums_configurations_and_gives_shares():
    scores = pd.DataFrame(
        [
            {
                "config": "a",
                "task": "timex",
                "dataset": "t2c",
                "errors.missing": 6.0,
                "errors.spurious": 2.0,
                "errors.boundary": 2.0,
            },
            {
                "config": "b",
                "task": "timex",
                "dataset": "t2c",
                "errors.missing": 4.0,
                "errors.spurious": 4.0,
                "errors.boundary": 2.0,
            },
            {
                "config": "a",
                "task": "timex",
                "dataset": "base",
                "errors.missing": 0.0,
                "errors.spurious": 0.0,
                "errors.boundary": 0.0,
            },
        ]
    )
    table = rq.error_breakdown(scores).set_index("dataset")
    assert list(table.index) == ["timex/base", "timex/t2c"]
    assert table.loc["timex/t2c", ["configs", "missing", "spurious", "boundary"]].tolist() == [2, 10, 6, 4]
    assert table.loc["timex/t2c", "share_missing"] == pytest.approx(0.5)
    assert np.isnan(table.loc["timex/base", "share_missing"])


def test_score_table_orders_datasets_as_the_study():
    scores = pd.DataFrame(
        [
            {"config": "a", "task": "comp", "dataset": "base", "f1": 0.1},
            {"config": "a", "task": "timex", "dataset": "len", "f1": 0.2},
            {"config": "a", "task": "timex", "dataset": "base", "f1": 0.3},
            {"config": "b", "task": "timex", "dataset": "base", "f1": 0.4},
        ]
    )
    table = rq.score_table(scores, ["b", "a"])
    assert list(table.columns) == ["timex/base", "timex/len", "comp/base"]
    assert list(table.index) == ["b", "a"] and np.isnan(table.loc["b", "timex/len"])


def test_dimensions_come_from_the_study_vocabulary():
    dimensions = load_dimensions()
    assert dimensions["robustness"] == ["timex/adv", "timex/adv_p", "eventx/adv", "eventx/adv_p"]
    assert dimensions["compositional"] == ["comp/base"]
    assert dimensions["structural"] == ["timex/len", "eventx/len"]
    assert not any("timex/base" in keys for keys in dimensions.values())


def test_groups_split_prompted_configurations_by_inductive_strategies():
    groups = strategy_groups(RUNS)
    assert groups["all"] == list(RUNS.index[:6])
    assert groups["inductive+"] == ["m1-I", "m2-I", "m3-I"]
    assert groups["non-inductive"] == ["m1-D", "m2-D", "m3-D"]


def test_close_noisy_pairs_are_inconclusive_not_equal_and_a_wide_margin_shows_equivalence():
    data = {"timex/base": stacked(["a", "b"], [noisy_stats(1.0, 0, 40), noisy_stats(1.0, 1, 40)])}
    narrow = comparisons.comparison_family(
        "p", data, ["a", "b"], 500, 0, 0.05, "holm", margin=0.01, power=PAIRWISE["power"]
    )
    wide = comparisons.comparison_family(
        "p", data, ["a", "b"], 500, 0, 0.05, "holm", margin=0.5, power=PAIRWISE["power"]
    )
    assert narrow.outcomes["holm"]["timex/base"].loc["a", "b"] == "inconclusive"
    assert wide.outcomes["holm"]["timex/base"].loc["a", "b"] == "equivalent"
    test = narrow.tests["timex/base"]
    assert test.mdd(0.05) > 0.01  # 40 noisy instances cannot detect a 0.01 difference


def test_equivalence_p_values_are_corrected_over_the_family():
    tests = {
        key: comparisons.PairwiseTests(
            key,
            ["x", "y"],
            np.zeros((2, 2)),
            np.array([[0.5, 0.4], [0.6, 0.5]]),
            np.full((2, 2), 10),
            p_equivalent=np.array([[0.0, tost], [tost, 0.0]]),
        )
        for key, tost in (("timex/base", 0.03), ("timex/adv", 0.01))
    }
    adjusted = comparisons.equivalence_adjusted(tests, "holm")
    assert adjusted["timex/base"][0, 1] == pytest.approx(0.03) and adjusted["timex/adv"][1, 0] == pytest.approx(0.02)
    outcomes = comparisons.outcome_tables(tests, 0.025, "holm")
    assert outcomes["none"]["timex/base"].loc["x", "y"] == "inconclusive"  # 0.03 >= 0.025
    assert outcomes["none"]["timex/adv"].loc["x", "y"] == "equivalent"
    assert outcomes["holm"]["timex/adv"].loc["x", "y"] == "equivalent"  # 0.02 after Holm
    assert outcomes["holm"]["timex/base"].loc["x", "y"] == "inconclusive"


def test_documents_are_resampled_together_and_the_draw_is_shared():
    """Sentence ids of 12 documents: the test equals all-pairs on per-document sums with the same draw."""
    ids = [f"doc{d}#s{s}" for d in range(12) for s in range(d % 4 + 1)]
    arrays = [noisy_stats(1.2, 0, len(ids)), noisy_stats(1.0, 1, len(ids))]
    data = stacked(["a", "b"], arrays, [ids, ids])
    test = comparisons.pairwise_tests({"timex/base": data}, resamples=300, seed=4, **PAIRWISE)["timex/base"]
    assert test.units[0, 1] == 12 and test.instances[0, 1] == len(ids)
    order = sorted(ids)
    sums = np.zeros((2, 12, 3))
    documents = list(dict.fromkeys(i.split("#s")[0] for i in order))
    for n, instance in enumerate(order):
        sums[:, documents.index(instance.split("#s")[0])] += data.stacked(["a", "b"], order)[:, n]
    counts = resample_counts(12, 300, comparisons.dataset_seed(4, "timex/base", tuple(order)))
    expected = all_pairs_bootstrap(sums, counts)
    assert test.p_value[0, 1] == pytest.approx(expected.p_value[0, 1])
    instance_level = comparisons.pairwise_tests({"timex/base": data}, 300, 4, unit="instance", **PAIRWISE)["timex/base"]
    assert instance_level.units[0, 1] == len(ids)
