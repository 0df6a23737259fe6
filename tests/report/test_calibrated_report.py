"""The report's verdicts are the calibrated ones: each example of issue 47's "Why", re-run through the report."""

from __future__ import annotations

import numpy as np
import pytest

from src.report import comparisons
from src.report.analysis import AnalysisSettings
from src.report.heatmap import gap_test
from src.report.results import DatasetStats
from src.report.static_page import instance_f1 as page_f1
from src.scoring.calibrated import compare_documents, instance_f1
from src.scoring.clustered import resampling_units
from tests.helpers.analysis_settings import PAIRWISE, STUDY

SETTINGS = AnalysisSettings(resamples=200, seed=0, alpha=0.05, correction="holm", unit="document", **STUDY)


def dataset(stats: dict[str, np.ndarray], ids: dict[str, list[str]], name: str = "base") -> DatasetStats:
    return DatasetStats("timex", name, list(stats), ids, stats)


def sentences(documents: int, per_document: int) -> list[str]:
    return [f"doc{d:03d}#s{k}" for d in range(documents) for k in range(per_document)]


def drawn(ids: list[str], skill: float, seed: int) -> np.ndarray:
    """Two gold spans per sentence, each matched with probability ``skill`` (document effects on top)."""
    rng = np.random.default_rng(seed)
    documents = sorted({i.split("#")[0] for i in ids})
    effect = dict(zip(documents, rng.normal(0, 0.2, len(documents))))
    p = np.clip([skill + effect[i.split("#")[0]] for i in ids], 0, 1)
    return np.column_stack([rng.binomial(2, p), np.full(len(ids), 2.0), np.full(len(ids), 2.0)]).astype(float)


@pytest.mark.parametrize("documents", [1, 3])
def test_too_few_documents_give_no_verdict_however_large_the_difference(documents):
    ids = sentences(documents, 4)
    data = dataset({"a": drawn(ids, 0.9, 1), "b": drawn(ids, 0.2, 2)}, {"a": ids, "b": ids})
    test = comparisons.pairwise_tests({"timex/base": data}, resamples=200, seed=0, **PAIRWISE)["timex/base"]
    assert test.documents[0, 1] == documents and test.minimum_documents == 6
    assert np.isnan(test.p_two_sided[0, 1]) and np.isnan(test.mdd_pairs[0, 1])
    outcomes = comparisons.outcome_tables({"timex/base": test}, 0.05, "holm")
    assert outcomes["none"]["timex/base"].loc["a", "b"] == "inconclusive"
    # the study's bootstrap still calls it: the reading kept beside, not the verdict
    assert comparisons.study_tables({"timex/base": test}, 0.05, "holm")["none"]["timex/base"].loc["a", "b"] == "better"


@pytest.mark.parametrize("spurious", [0, 3])
def test_sentences_without_gold_never_make_two_systems_equivalent(spurious):
    ids = sentences(10, 2)
    silent = np.zeros((20, 3))
    noisy = np.column_stack([np.zeros(20), np.full(20, float(spurious)), np.zeros(20)])
    data = dataset({"a": silent, "b": noisy}, {"a": ids, "b": ids})
    test = comparisons.pairwise_tests({"timex/base": data}, resamples=200, seed=0, **PAIRWISE)["timex/base"]
    assert test.documents[0, 1] == 0 and np.isnan(test.p_equivalent[0, 1])
    outcomes = comparisons.outcome_tables({"timex/base": test}, 0.05, "holm")
    assert (
        outcomes["none"]["timex/base"].loc["a", "b"] == outcomes["holm"]["timex/base"].loc["a", "b"] == "inconclusive"
    )


def test_a_gap_is_paired_on_the_shared_sentences_and_the_composition_is_named():
    """Base and shifted identical on 400 shared sentences, 40 more shifted sentences at F1 0: no shift
    effect (it was *worse*, Holm p 0.004, from a difference of composition)."""
    shared = sentences(40, 10)
    extra = [f"extra{d:02d}#s0" for d in range(40)]
    scores = drawn(shared, 0.6, 3)
    base = dataset({"m": scores}, {"m": shared})
    miss = np.column_stack([np.zeros(40), np.full(40, 2.0), np.full(40, 2.0)])
    shifted = dataset({"m": np.vstack([scores, miss])}, {"m": shared + extra}, "adv")
    test, (paired, n_shared, dropped, added) = gap_test(SETTINGS, base, shifted, "m", np.random.default_rng(0))
    assert (paired, n_shared, dropped, added) == (True, 400, 0, 40)
    assert test.delta == 0 and test.p_value == 1.0 and test.verdict == "equivalent"


def test_disjoint_sets_get_a_two_sample_test_that_finds_a_real_gap_and_not_a_null_one():
    base_ids, shifted_ids = sentences(30, 4), [f"clin{d:03d}#s{k}" for d in range(30) for k in range(4)]
    base = dataset({"m": drawn(base_ids, 0.7, 4)}, {"m": base_ids})
    drop = dataset({"m": drawn(shifted_ids, 0.3, 5)}, {"m": shifted_ids}, "t2c")
    same = dataset({"m": drawn(shifted_ids, 0.7, 6)}, {"m": shifted_ids}, "t2c")
    found, composition = gap_test(SETTINGS, base, drop, "m", np.random.default_rng(0))
    assert composition == (False, 0, 120, 120) and found.verdict == "worse" and found.ci_high < 0
    null, _ = gap_test(SETTINGS, base, same, "m", np.random.default_rng(0))
    assert null.verdict != "worse" and null.ci_low < 0 < null.ci_high + 0.1


def test_the_report_and_python_m_src_compare_give_the_same_test():
    """Issue 47: the CLI resampled instances, the report documents; both now run one calibrated test."""
    ids = sentences(9, 3)  # 2 ** 9 swaps: exact, so no seed can make them differ
    a, b = drawn(ids, 0.6, 7), drawn(ids, 0.4, 8)
    test = comparisons.pairwise_tests(
        {"timex/base": dataset({"a": a, "b": b}, {"a": ids, "b": ids})}, 200, 0, **PAIRWISE
    )
    units = resampling_units(np.stack([a, b]), ids, "document")
    cli = compare_documents(units[0], units[1])
    assert test["timex/base"].p_two_sided[0, 1] == pytest.approx(cli.p_value)
    assert test["timex/base"].p_equivalent[0, 1] == pytest.approx(cli.p_equivalent)
    assert test["timex/base"].ci_low[0, 1] == pytest.approx(cli.ci_low)


def test_one_empty_gold_convention_in_the_metric_pages_and_robustness():
    from src.report.robustness import instance_f1 as robustness_f1

    assert page_f1(0, 0, 0) == instance_f1(np.zeros(3)) == robustness_f1(np.zeros((1, 3)))[0] == 1.0
    assert page_f1(0, 3, 0) == instance_f1(np.array([0.0, 3.0, 0.0])) == 0.0
