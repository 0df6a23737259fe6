"""Span metrics: hand-computed edge cases, LCS and Hungarian against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from src.scoring.metrics import (
    InstanceScore,
    PredictedSpan,
    as_predicted_span,
    lcs_length,
    optimal_matching,
    precision_recall_f1,
    score_instance,
    score_pairs,
    span_similarity,
    stack_stats,
)
from tests.helpers.records import make_record

TEXT = "We met last week on Friday."
TIMEX_RECORD = make_record("r1", TEXT, [("last week", "TIMEX"), ("Friday", "TIMEX")])
COMP_RECORD = make_record("c1", "He met her yesterday.", [("yesterday", "TIMEX"), ("met", "EVENT")])


def brute_force_lcs(a: list[str], b: list[str]) -> int:
    """Longest subsequence of ``a`` (all 2^|a| of them) that is also a subsequence of ``b``."""

    def is_subsequence(seq, target):
        it = iter(target)
        return all(any(x == y for y in it) for x in seq)

    for size in range(len(a), -1, -1):
        for picked in itertools.combinations(a, size):
            if is_subsequence(picked, b):
                return size
    return 0


@pytest.mark.parametrize(
    "pred, gold, lowercase, expected",
    [
        ("last week", "last week", False, 1.0),
        ("the last week", "last week", False, 2 / 3),
        ("week", "last week", False, 1 / 2),
        ("Friday", "last week", False, 0.0),
        ("Last Week", "last week", False, 0.0),
        ("Last Week", "last week", True, 1.0),
        ("Jan. 5", "Jan 5", False, 2 / 3),  # words: Jan . 5 vs Jan 5
        ("week last", "last week", False, 1 / 2),  # order matters for LCS
        ("last  week", "last week", False, 1.0),  # whitespace is not a word
        ("", "last week", False, 0.0),
        ("   ", "", False, 0.0),
    ],
)
def test_span_similarity_hand_computed(pred, gold, lowercase, expected):
    assert span_similarity(pred, gold, lowercase) == pytest.approx(expected)


def test_lcs_matches_brute_force_on_random_word_lists():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 7))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 7))]
        assert lcs_length(a, b) == brute_force_lcs(a, b), (a, b)


def test_hungarian_matches_brute_force_assignment():
    rng = np.random.default_rng(3)
    for _ in range(200):
        rows, cols = (int(v) for v in rng.integers(0, 5, size=2))
        weights = rng.integers(0, 4, size=(rows, cols)) / 3.0  # ties are common
        small, large = sorted((rows, cols))
        best = 0.0
        for perm in itertools.permutations(range(large), small):
            pairs = zip(range(small), perm) if rows <= cols else zip(perm, range(small))
            best = max(best, sum(weights[i, j] for i, j in pairs))
        r, c, total = optimal_matching(weights)
        assert total == pytest.approx(best)
        assert len(set(r)) == len(r) and len(set(c)) == len(c)  # one-to-one


def test_instance_with_boundary_duplicate_and_out_of_text_prediction():
    # sim: "the last week"-"last week" = 2/3, "Friday"-"Friday" = 1; the second "Friday" is spurious.
    score = score_instance(TEXT, TIMEX_RECORD.spans, ["the last week", "Friday", "Friday"])
    assert score == InstanceScore(
        lcs=pytest.approx(5 / 3),
        strict=1,
        relaxed=2,
        n_pred=3,
        n_gold=2,
        exact=1,
        boundary=1,
        missing=0,
        spurious=1,
        not_in_text=1,
    )
    result = score_pairs([(TIMEX_RECORD, ["the last week", "Friday", "Friday"])])
    assert result.prf("lcs") == pytest.approx((5 / 9, 5 / 6, 2 / 3))
    assert result.prf("strict") == pytest.approx((1 / 3, 1 / 2, 2 / 5))
    assert result.prf("relaxed") == pytest.approx((2 / 3, 1.0, 4 / 5))


def test_no_predictions_no_gold_and_both_empty():
    no_pred = score_instance(TEXT, TIMEX_RECORD.spans, [])
    assert (no_pred.lcs, no_pred.n_pred, no_pred.n_gold, no_pred.missing, no_pred.spurious) == (0, 0, 2, 2, 0)
    no_gold = score_instance(TEXT, [], ["Friday", "noon"])
    assert (no_gold.lcs, no_gold.n_pred, no_gold.n_gold, no_gold.missing, no_gold.spurious) == (0, 2, 0, 0, 2)
    assert no_gold.not_in_text == 1
    empty_record = make_record("e", "Nothing here.", [])
    alone = score_pairs([(empty_record, [])])
    assert alone.prf("lcs") == (0.0, 0.0, 0.0)
    # an instance with neither side does not move the micro scores
    base = score_pairs([(TIMEX_RECORD, ["last week"])])
    with_empty = score_pairs([(TIMEX_RECORD, ["last week"]), (empty_record, [])])
    assert base.prf("lcs") == with_empty.prf("lcs") == pytest.approx((1.0, 0.5, 2 / 3))
    # predictions only in the empty instance: precision drops, recall does not
    spurious = score_pairs([(TIMEX_RECORD, ["last week"]), (empty_record, ["here"])])
    assert spurious.prf("lcs") == pytest.approx((0.5, 0.5, 0.5))


def test_duplicate_predictions_each_count_but_match_once():
    score = score_instance(TEXT, TIMEX_RECORD.spans[:1], ["last week", "last week"])
    assert (score.lcs, score.strict, score.relaxed, score.n_pred, score.spurious) == (1.0, 1, 1, 2, 1)


def test_prediction_without_words_is_spurious_and_not_in_text():
    score = score_instance(TEXT, TIMEX_RECORD.spans, ["", "Friday"])
    assert (score.lcs, score.exact, score.spurious, score.not_in_text) == (1.0, 1, 1, 1)


def test_lowercase_option_applies_to_matching_and_text_lookup():
    strict_case = score_instance(TEXT, TIMEX_RECORD.spans, ["friday"])
    assert (strict_case.lcs, strict_case.not_in_text) == (0.0, 1)
    folded = score_instance(TEXT, TIMEX_RECORD.spans, ["friday"], lowercase=True)
    assert (folded.lcs, folded.not_in_text) == (1.0, 0)


def test_relaxed_counts_any_shared_word_one_to_one():
    # "on Friday" overlaps "Friday"; "week" overlaps "last week": relaxed 2 of 2, lcs 1/2 + 1/2.
    score = score_instance(TEXT, TIMEX_RECORD.spans, ["on Friday", "week"])
    assert (score.relaxed, score.strict, score.boundary) == (2, 0, 2)
    assert score.lcs == pytest.approx(1.0)


def test_labelled_predictions_match_within_their_label_only():
    preds = [{"text": "met", "label": "TIMEX"}, {"text": "yesterday", "label": "TIMEX"}]
    result = score_pairs([(COMP_RECORD, preds)])
    assert result.prf("lcs") == pytest.approx((0.5, 0.5, 0.5))  # "met" labelled TIMEX scores 0
    assert set(result.per_label) == {"TIMEX", "EVENT"}
    assert result.per_label["TIMEX"].prf("lcs") == pytest.approx((0.5, 1.0, 2 / 3))
    assert result.per_label["EVENT"].prf("lcs") == (0.0, 0.0, 0.0)
    assert result.per_label["EVENT"].summary()["n_gold"] == 1
    assert result.per_label["EVENT"].summary()["errors"]["missing"] == 1


def test_plain_predictions_in_two_label_gold_count_for_every_label():
    result = score_pairs([(COMP_RECORD, ["met", "yesterday", "today"])])
    assert result.prf("lcs") == pytest.approx((2 / 3, 1.0, 0.8))
    # each label's block sees all three unlabelled predictions: P = 1/3, R = 1
    for label in ("TIMEX", "EVENT"):
        assert result.per_label[label].prf("lcs") == pytest.approx((1 / 3, 1.0, 0.5))


def test_single_label_gold_has_no_per_label_blocks():
    result = score_pairs([(TIMEX_RECORD, ["Friday"])])
    assert result.per_label == {}
    assert "per_label" not in result.to_dict()


def test_statistics_arrays_and_error_identities():
    second = make_record("r2", "It rained for three days in May.", [("three days", "TIMEX"), ("May", "TIMEX")])
    pairs = [(TIMEX_RECORD, ["the last week", "Friday", "Friday"]), (second, ["days", "June"])]
    result = score_pairs(pairs)
    assert result.ids == ["r1", "r2"]
    np.testing.assert_allclose(result.stats["lcs"], [[5 / 3, 3, 2], [1 / 2, 2, 2]])
    np.testing.assert_allclose(result.stats["strict"], [[1, 3, 2], [0, 2, 2]])
    np.testing.assert_allclose(result.stats["relaxed"], [[2, 3, 2], [1, 2, 2]])
    errors = result.errors
    n_pred, n_gold = result.stats["lcs"][:, 1], result.stats["lcs"][:, 2]
    np.testing.assert_array_equal(errors["exact"] + errors["boundary"] + errors["spurious"], n_pred)
    np.testing.assert_array_equal(errors["exact"] + errors["boundary"] + errors["missing"], n_gold)
    summary = result.to_dict()
    assert summary["errors"] == {"exact": 1, "boundary": 2, "missing": 1, "spurious": 2}
    assert summary["predictions_not_in_text"] == 2  # "the last week" and "June"
    # micro, not macro: (5/3 + 1/2) / 5 predictions, / 4 gold
    assert result.prf("lcs") == pytest.approx((13 / 30, 13 / 24, 2 * (13 / 6) / 9))


def test_precision_recall_f1_vectorised_and_zero_denominators():
    p, r, f = precision_recall_f1(np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(p, [0.5, 0.0, 0.0])
    np.testing.assert_allclose(r, [0.25, 0.0, 0.0])
    np.testing.assert_allclose(f, [1 / 3, 0.0, 0.0])


def test_precision_recall_f1_four_columns():
    # (p_sum, r_sum, n_pred, n_gold): P = 1/2, R = 1/4 -> F1 2 (1/8) / (3/4) = 1/3; P = 0 and R = 0 -> 0
    p, r, f = precision_recall_f1(np.array([[1.0, 1.0, 2.0, 4.0], [3.0, 1.0, 4.0, 2.0], [0.0, 0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(p, [0.5, 0.75, 0.0])
    np.testing.assert_allclose(r, [0.25, 0.5, 0.0])
    np.testing.assert_allclose(f, [1 / 3, 0.6, 0.0])  # 2 (3/8) / (5/4) = 3/5
    three = np.array([[1 / 3, 3.0, 7.0], [0.1, 0.7, 0.3]])
    four = np.column_stack([three[:, 0], three])
    for a, b in zip(precision_recall_f1(three), precision_recall_f1(four)):
        np.testing.assert_array_equal(a, b)  # p_sum == r_sum: bit-identical to the 3-column form
    with pytest.raises(ValueError, match="columns"):
        precision_recall_f1(np.ones(5))


def test_prediction_items_are_validated():
    assert as_predicted_span("x") == PredictedSpan("x")
    assert as_predicted_span({"text": "x", "label": "EVENT"}) == PredictedSpan("x", "EVENT")
    for bad in (3, None, {"label": "TIMEX"}, {"text": "x", "label": "DATE"}):
        with pytest.raises(ValueError):
            as_predicted_span(bad)


def test_stack_stats_requires_the_same_instances():
    second = make_record("r2", "It rained in May.", [("May", "TIMEX")])
    a = score_pairs([(TIMEX_RECORD, ["Friday"]), (second, [])])
    b = score_pairs([(TIMEX_RECORD, []), (second, ["May"])])
    stacked = stack_stats([a, b], "strict")
    assert stacked.shape == (2, 2, 3)
    np.testing.assert_allclose(stacked[:, :, 0], [[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="same instances"):
        stack_stats([a, score_pairs([(second, []), (TIMEX_RECORD, [])])])
