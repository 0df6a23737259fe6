"""Scorer variants: a hand-computed table that separates them, brute force, bootstrap, names."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np
import pytest

from src.data.schema import Record
from src.scoring.metrics import score_pairs
from src.scoring.scorer_registry import (
    STAT_COLUMNS,
    VARIANTS,
    VariantSpec,
    get_variant,
    metric_names,
    report_columns,
)
from src.scoring.stats import bootstrap_f1, bootstrap_prf, resample_counts
from src.scoring.variants import (
    longest_common_run,
    paper_variant_score,
    score_all_variants,
    score_variant,
    variant_metrics,
)
from src.study import PRIMARY_SCORER as PRIMARY
from tests.helpers.records import make_record

T, E = "TIMEX", "EVENT"
NAMES = ("paper", "released", "released_best", "released_char", "released_char_best")


@dataclass(frozen=True)
class Case:
    """One instance and its expected (p_sum, r_sum) per variant, in the order of ``NAMES``."""

    name: str
    record: Record
    predictions: list
    n_pred: int
    n_gold: int
    expected: tuple[tuple[float, float], ...]


# Notation: paper = word LCS / max(|p|, |g|), one Hungarian (p_sum = r_sum = matched);
# tok = lower-cased whitespace tokens, run = longest common contiguous run, P weight run/|p|,
# R weight run/|g|; chr = the same over lower-cased characters; 1:1 = separate Hungarians,
# best = each side's best partner.
CASES = [
    Case(
        "identical span",
        make_record("r", "since last week", [("last week", T)]),
        ["last week"],
        1,
        1,
        # every variant: run = whole span on both sides -> 1, 1
        ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1)),
    ),
    Case(
        "contiguous vs subsequence",
        make_record("r", "in the last week", [("the last week", T)]),
        ["the week"],
        1,
        1,
        # paper: LCS(the week, the last week) = 2, max 3 -> 2/3
        # tok: longest contiguous run 1 ("the" or "week"): P 1/2, R 1/3
        # chr: "the week" (8) vs "the last week" (13): longest common substring " week" = 5 -> 5/8, 5/13
        ((2 / 3, 2 / 3), (1 / 2, 1 / 3), (1 / 2, 1 / 3), (5 / 8, 5 / 13), (5 / 8, 5 / 13)),
    ),
    Case(
        "punctuation split vs attached",
        make_record("r", "on Jan. 5 we", [("Jan. 5", T)]),
        ["Jan 5"],
        1,
        1,
        # paper words: [Jan, 5] vs [Jan, ., 5]: LCS 2, max 3 -> 2/3
        # tok: [jan, 5] vs [jan., 5]: run 1 ("5"), |p| = |g| = 2 -> 1/2, 1/2
        # chr: "jan 5" (5) vs "jan. 5" (6): run "jan" = 3 -> 3/5, 3/6
        ((2 / 3, 2 / 3), (1 / 2, 1 / 2), (1 / 2, 1 / 2), (3 / 5, 1 / 2), (3 / 5, 1 / 2)),
    ),
    Case(
        "trailing punctuation",
        make_record("r", "on Friday", [("Friday", T)]),
        ["Friday,"],
        1,
        1,
        # paper words: [Friday, ","] vs [Friday]: 1/2
        # tok: "friday," != "friday" -> run 0
        # chr: "friday," (7) vs "friday" (6): run 6 -> 6/7, 6/6
        ((1 / 2, 1 / 2), (0, 0), (0, 0), (6 / 7, 1), (6 / 7, 1)),
    ),
    Case(
        "case differs",
        make_record("r", "on Friday", [("Friday", T)]),
        ["FRIDAY"],
        1,
        1,
        # paper is case-sensitive by default: 0; the released scorer lower-cases: 1
        ((0, 0), (1, 1), (1, 1), (1, 1), (1, 1)),
    ),
    Case(
        "doubled whitespace",
        make_record("r", "last week", [("last week", T)]),
        ["last  week"],
        1,
        1,
        # paper and tok: same words/tokens -> 1
        # chr: "last  week" (10) vs "last week" (9): run "last " or " week" = 5 -> 5/10, 5/9
        ((1, 1), (1, 1), (1, 1), (1 / 2, 5 / 9), (1 / 2, 5 / 9)),
    ),
    Case(
        "word order",
        make_record("r", "last week", [("last week", T)]),
        ["week last"],
        1,
        1,
        # paper: LCS 1 of max 2 -> 1/2; tok: run 1 of 2 -> 1/2, 1/2
        # chr: "week last" vs "last week" (9 each): run "last" or "week" = 4 -> 4/9, 4/9
        ((1 / 2, 1 / 2), (1 / 2, 1 / 2), (1 / 2, 1 / 2), (4 / 9, 4 / 9), (4 / 9, 4 / 9)),
    ),
    Case(
        "duplicated prediction",
        make_record("r", "on Friday", [("Friday", T)]),
        ["Friday", "Friday"],
        2,
        1,
        # not de-duplicated: n_pred 2. 1:1: one of the two matches -> 1, 1.
        # best-of: both predictions take the one gold -> p_sum 1 + 1 = 2, r_sum 1
        ((1, 1), (1, 1), (2, 1), (1, 1), (2, 1)),
    ),
    Case(
        "two gold, one prediction",
        make_record("r", "Friday and Friday", [("Friday", T), ("Friday", T)]),
        ["Friday"],
        1,
        2,
        # 1:1: one gold matched -> 1, 1; best-of: both gold spans take the prediction -> r_sum 2
        ((1, 1), (1, 1), (1, 2), (1, 1), (1, 2)),
    ),
    Case(
        "no predictions",
        make_record("r", "last week on Friday", [("last week", T), ("Friday", T)]),
        [],
        0,
        2,
        # nothing matched; the gold spans still count (n_gold 2)
        ((0, 0), (0, 0), (0, 0), (0, 0), (0, 0)),
    ),
    Case(
        "no gold",
        make_record("r", "nothing here", []),
        ["Friday"],
        1,
        0,
        # nothing to match; the prediction still counts (n_pred 1)
        ((0, 0), (0, 0), (0, 0), (0, 0), (0, 0)),
    ),
    Case(
        "empty prediction string",
        make_record("r", "on Friday", [("Friday", T)]),
        ["", "Friday"],
        2,
        1,
        # "" has no words/tokens/characters: similarity 0 everywhere; "Friday" matches exactly.
        # best-of p_sum = 0 + 1, r_sum = 1
        ((1, 1), (1, 1), (1, 1), (1, 1), (1, 1)),
    ),
    Case(
        "comp: wrong types",
        make_record("r", "He met her yesterday.", [("met", E), ("yesterday", T)]),
        [{"text": "yesterday", "label": E}, {"text": "met", "label": T}],
        2,
        2,
        # paper: labels differ -> similarity 0 for both; released pools untyped -> both exact: 2, 2
        ((0, 0), (2, 2), (2, 2), (2, 2), (2, 2)),
    ),
    Case(
        "comp: one untyped span over both",
        make_record("r", "He met her yesterday.", [("met", E), ("yesterday", T)]),
        ["met yesterday"],
        1,
        2,
        # paper: LCS 1 of max 2 with either gold -> 1/2
        # tok: run 1 with each gold: P weight 1/2, R weight 1/1; 1:1 -> 1/2, 1; best -> 1/2, 1 + 1 = 2
        # chr: "met yesterday" (13): with "yesterday" run 9 -> P 9/13, R 1; with "met" run 3 -> P 3/13, R 1
        #      1:1 -> max P 9/13, max R 1; best -> 9/13, 1 + 1 = 2
        ((1 / 2, 1 / 2), (1 / 2, 1), (1 / 2, 2), (9 / 13, 1), (9 / 13, 2)),
    ),
    Case(
        "best-of vs one-to-one",
        make_record("r", "last week on Friday", [("last week", T), ("Friday", T)]),
        ["last week on Friday"],
        1,
        2,
        # paper: words 4; LCS 2 with "last week" -> 2/4, 1 with "Friday" -> 1/4; one match -> 1/2
        # tok: P weights 2/4, 1/4; R weights 2/2, 1/1; 1:1 -> 1/2, 1; best -> 1/2, 1 + 1 = 2
        # chr: 19 chars: with "last week" (9) run 9 -> P 9/19, R 1; with "friday" (6) run 6 -> P 6/19, R 1
        ((1 / 2, 1 / 2), (1 / 2, 1), (1 / 2, 2), (9 / 19, 1), (9 / 19, 2)),
    ),
    Case(
        "asymmetric normalisation",
        make_record("r", "in the last twenty four hours", [("the last twenty four hours", T)]),
        ["last twenty four"],
        1,
        1,
        # paper: LCS 3 of max 5 -> 3/5; tok: run 3 -> 3/3, 3/5
        # chr: the 16 characters of the prediction lie in the 26 of the gold -> 16/16, 16/26
        ((3 / 5, 3 / 5), (1, 3 / 5), (1, 3 / 5), (1, 8 / 13), (1, 8 / 13)),
    ),
    Case(
        "separate P and R assignments",
        make_record("r", "last week, the whole week long", [("last week", T), ("the whole week long", T)]),
        ["since last week ended", "last"],
        2,
        2,
        # rows p1 = "since last week ended" (4 tokens, 21 chars), p2 = "last" (1, 4);
        # cols g1 = "last week" (2, 9), g2 = "the whole week long" (4, 19).
        # paper sim [[2/4, 1/4], [1/2, 0]]: diagonal 1/2, anti-diagonal 3/4 -> 3/4
        # tok runs [[2, 1], [1, 0]]
        #   P weights [[2/4, 1/4], [1, 0]]: diagonal 1/2, anti 1/4 + 1 = 5/4 -> 5/4 (anti)
        #   R weights [[2/2, 1/4], [1/2, 0]]: diagonal 1, anti 1/4 + 1/2 = 3/4 -> 1 (diagonal)
        #   best: P 1/2 + 1 = 3/2; R max(1, 1/2) + max(1/4, 0) = 5/4
        # chr runs [[9 "last week", 6 " week "], [4 "last", 1 "t"]]
        #   P weights [[9/21, 6/21], [4/4, 1/4]]: diagonal 3/7 + 1/4 = 19/28, anti 2/7 + 1 = 9/7 -> 9/7
        #   R weights [[9/9, 6/19], [4/9, 1/19]]: diagonal 1 + 1/19 = 20/19, anti 6/19 + 4/9 = 130/171 -> 20/19
        #   best: P 3/7 + 1 = 10/7; R max(1, 4/9) + max(6/19, 1/19) = 25/19
        ((3 / 4, 3 / 4), (5 / 4, 1), (3 / 2, 5 / 4), (9 / 7, 20 / 19), (10 / 7, 25 / 19)),
    ),
    Case(
        "characters shared by different words",
        make_record("r", "Friday or Monday", [("Friday", T), ("Monday", T)]),
        ["Friday", "Friday"],
        2,
        2,
        # paper and tok: "Friday" vs "Monday" share nothing; one Friday-Friday match -> 1
        # tok best: both predictions take gold "Friday" -> P 2; R: 1 for Friday, 0 for Monday -> 1
        # chr: "friday" vs "monday" share "day" (3 of 6): weights [[1, 1/2], [1, 1/2]] on both sides
        #   1:1 -> 1 + 1/2 = 3/2 each; best -> P 1 + 1 = 2, R 1 + 1/2 = 3/2
        ((1, 1), (1, 1), (2, 1), (3 / 2, 3 / 2), (2, 3 / 2)),
    ),
]


def test_registry_order_primary_and_columns():
    assert tuple(VARIANTS) == NAMES
    assert PRIMARY == "paper" and [name for name, spec in VARIANTS.items() if spec.primary] == ["paper"]
    assert STAT_COLUMNS == ("p_sum", "r_sum", "n_pred", "n_gold")
    assert [name for name, _ in report_columns()] == list(NAMES)
    assert all(spec.description and spec.title for spec in VARIANTS.values())
    assert get_variant(VARIANTS["released"]) is VARIANTS["released"]
    with pytest.raises(KeyError, match="known: paper"):
        get_variant("nope")
    with pytest.raises(ValueError):
        VariantSpec("x", "x", "x", "tokens", "joint")  # joint matching is the paper's word metric only
    with pytest.raises(ValueError):
        VariantSpec("x", "x", "x", "bytes", "best_of")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_variant_against_the_hand_computed_table(case):
    assert len(CASES) >= 15
    scores = score_all_variants([(case.record, case.predictions)])
    for name, (p_sum, r_sum) in zip(NAMES, case.expected):
        np.testing.assert_allclose(
            scores[name].stats, [[p_sum, r_sum, case.n_pred, case.n_gold]], rtol=1e-12, err_msg=name
        )
        single = score_variant([(case.record, case.predictions)], name)  # one at a time gives the same
        np.testing.assert_array_equal(single.stats, scores[name].stats)
        assert single.ids == ["r"] and single.variant == name


def test_lowercase_folds_the_paper_metric_only():
    record, preds = make_record("r", "on Friday", [("Friday", T)]), ["FRIDAY"]
    assert score_variant([(record, preds)], "paper", lowercase=True).stats.tolist() == [[1, 1, 1, 1]]
    for name in NAMES[1:]:  # the released scorer always lower-cases
        assert score_variant([(record, preds)], name, lowercase=True).stats.tolist() == [[1, 1, 1, 1]]
        assert score_variant([(record, ["Friday"])], name, lowercase=False).stats.tolist() == [[1, 1, 1, 1]]


def test_micro_scores_over_a_corpus():
    # instances: "best-of vs one-to-one" (1 pred, 2 gold), "no predictions" (0, 2), "no gold" (1, 0):
    # n_pred 2, n_gold 4 in all.
    by_name = {case.name: case for case in CASES}
    corpus = [
        (by_name[name].record, by_name[name].predictions)
        for name in ("best-of vs one-to-one", "no predictions", "no gold")
    ]
    scores = score_all_variants(corpus)
    expected = {
        # matched 1/2: P 1/4, R 1/8, F1 2 (1/2) / (2 + 4) = 1/6
        "paper": (1 / 4, 1 / 8, 1 / 6),
        # p_sum 1/2, r_sum 1: P 1/4, R 1/4, F1 1/4
        "released": (1 / 4, 1 / 4, 1 / 4),
        # p_sum 1/2, r_sum 2: P 1/4, R 1/2, F1 2 (1/8) / (3/4) = 1/3
        "released_best": (1 / 4, 1 / 2, 1 / 3),
        # p_sum 9/19, r_sum 1: P 9/38, R 1/4, F1 2 (9/152) / (37/76) = 9/37
        "released_char": (9 / 38, 1 / 4, 9 / 37),
        # p_sum 9/19, r_sum 2: P 9/38, R 1/2, F1 2 (9/76) / (28/38) = 9/28
        "released_char_best": (9 / 38, 1 / 2, 9 / 28),
    }
    for name, prf in expected.items():
        assert scores[name].prf() == pytest.approx(prf, rel=1e-12), name
        assert scores[name].ids == ["r", "r", "r"]


def test_longest_common_run_on_strings_and_token_lists():
    assert longest_common_run("the week", "the last week") == 5
    assert longest_common_run(["the", "week"], ["the", "last", "week"]) == 1
    assert longest_common_run(["a", "b", "c"], ["x", "a", "b", "c"]) == 3
    assert longest_common_run("", "abc") == longest_common_run([], ["a"]) == 0
    rng = random.Random(2)
    for _ in range(300):
        a = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 9)))
        b = "".join(rng.choice("abc ") for _ in range(rng.randint(0, 9)))
        assert longest_common_run(a, b) == naive_run(a, b), (a, b)
        assert longest_common_run(a.split(), b.split()) == naive_run(a.split(), b.split()), (a, b)


# --- brute-force reference of the released scorer ----------------------------------------------


def naive_run(a, b) -> int:
    """Longest common contiguous run by trying every pair of start positions."""
    best = 0
    for i in range(len(a)):
        for j in range(len(b)):
            k = 0
            while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
                k += 1
            best = max(best, k)
    return best


def brute_assignment(weights: np.ndarray) -> float:
    """Best one-to-one total by trying every injection of the smaller side into the larger."""
    rows, cols = weights.shape
    if not rows or not cols:
        return 0.0
    if rows > cols:
        return brute_assignment(weights.T)
    return max(sum(weights[i, perm[i]] for i in range(rows)) for perm in itertools.permutations(range(cols), rows))


def reference_stats(predictions: list, gold: list[str], unit: str, matching: str) -> tuple[float, float]:
    split = (lambda s: s.lower().split()) if unit == "tokens" else (lambda s: s.lower())
    preds = [split(p["text"] if isinstance(p, dict) else p) for p in predictions]
    golds = [split(g) for g in gold]
    w_p = np.zeros((len(preds), len(golds)))
    w_r = np.zeros((len(preds), len(golds)))
    for i, p in enumerate(preds):
        for j, g in enumerate(golds):
            if p and g:
                run = naive_run(p, g)
                w_p[i, j], w_r[i, j] = run / len(p), run / len(g)
    if matching == "best_of":
        return (w_p.max(axis=1).sum() if w_p.size else 0.0), (w_r.max(axis=0).sum() if w_r.size else 0.0)
    return brute_assignment(w_p), brute_assignment(w_r)


def random_corpus(seed: int, n: int, max_spans: int = 4) -> list[tuple[Record, list]]:
    """Small-vocabulary instances with many ties, overlaps, duplicates, case and punctuation."""
    rng = random.Random(seed)
    vocab = ["a", "b", "c", "A", "b.", "ab", "a b", "c, a", "Cab"]

    def phrase(low: int) -> str:
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(low, 4)))

    pairs = []
    for k in range(n):
        gold = [(phrase(1), rng.choice((T, E))) for _ in range(rng.randint(0, max_spans))]
        text = " | ".join(g for g, _ in gold) or "empty"
        preds = []
        for _ in range(rng.randint(0, max_spans)):
            item = rng.choice([g for g, _ in gold]) if gold and rng.random() < 0.3 else phrase(0)
            preds.append({"text": item, "label": rng.choice((T, E))} if rng.random() < 0.3 else item)
        pairs.append((make_record(f"i{k}", text, gold), preds))
    return pairs


def test_released_variants_equal_brute_force_on_random_instances():
    pairs = random_corpus(seed=1, n=250)
    scores = score_all_variants(pairs)
    for name, spec in VARIANTS.items():
        if spec.primary:
            continue
        expected = np.array(
            [
                reference_stats(preds, [s.text for s in record.spans], spec.unit, spec.matching)
                for record, preds in pairs
            ]
        )
        np.testing.assert_allclose(scores[name].stats[:, :2], expected, rtol=1e-12, atol=1e-12, err_msg=name)
        counts = [(len(preds), len(record.spans)) for record, preds in pairs]
        np.testing.assert_array_equal(scores[name].stats[:, 2:], counts)


def test_paper_variant_equals_score_pairs_exactly():
    pairs = random_corpus(seed=4, n=120) + [(case.record, case.predictions) for case in CASES]
    for lowercase in (False, True):
        result = score_pairs(pairs, lowercase=lowercase)
        paper = score_variant(pairs, "paper", lowercase=lowercase)
        lcs = result.stats["lcs"]
        np.testing.assert_array_equal(paper.stats, np.column_stack([lcs[:, 0], lcs]))
        assert paper.ids == result.ids
        assert paper.prf() == result.prf("lcs")  # bit for bit
        np.testing.assert_array_equal(paper_variant_score(result).stats, paper.stats)
        reused = score_all_variants(pairs, ["paper"], paper_result=result)["paper"]
        np.testing.assert_array_equal(reused.stats, paper.stats)
    with pytest.raises(ValueError, match="ids differ"):
        score_all_variants(pairs[:3], ["paper"], paper_result=score_pairs(pairs[1:4]))


@pytest.mark.parametrize("name", NAMES)
def test_bootstrap_equals_rescoring_the_resampled_instances(name):
    pairs = random_corpus(seed=9, n=30)
    stats = score_variant(pairs, name).stats
    counts = resample_counts(len(pairs), 12, seed=3)
    boot_p, boot_r, boot_f = bootstrap_prf(stats, counts)
    np.testing.assert_array_equal(boot_f, bootstrap_f1(stats, counts))
    for row, (p, r, f) in zip(counts, zip(boot_p, boot_r, boot_f)):
        resampled = [pair for pair, times in zip(pairs, row) for _ in range(int(times))]
        assert len(resampled) == len(pairs)
        assert score_variant(resampled, name).prf() == pytest.approx((p, r, f), rel=1e-12, abs=1e-15)


def test_empty_dataset_scores_zero():
    for name, score in score_all_variants([]).items():
        assert score.stats.shape == (0, 4) and score.prf() == (0.0, 0.0, 0.0), name


def test_metric_names_and_flat_metrics():
    assert metric_names("timex", "base", "paper") == {
        "f1": "timex.base.f1",
        "precision": "timex.base.precision",
        "recall": "timex.base.recall",
    }
    assert metric_names("comp", "base", "released_char")["f1"] == "comp.base.released_char.f1"
    by_name = {case.name: case for case in CASES}
    case = by_name["best-of vs one-to-one"]
    scores = score_all_variants([(case.record, case.predictions)], ["paper", "released_best"])
    flat = variant_metrics("timex", "base", scores, ci={"released_best": (0.1, 0.9)})
    assert flat == pytest.approx(
        {
            # paper: matched 1/2 of 1 prediction, 2 gold -> P 1/2, R 1/4, F1 1/3
            "timex.base.f1": 1 / 3,
            "timex.base.precision": 1 / 2,
            "timex.base.recall": 1 / 4,
            # best-of: p_sum 1/2 -> P 1/2; r_sum 2 -> R 1; F1 2/3
            "timex.base.released_best.f1": 2 / 3,
            "timex.base.released_best.precision": 1 / 2,
            "timex.base.released_best.recall": 1.0,
            "timex.base.released_best.f1_ci_low": 0.1,
            "timex.base.released_best.f1_ci_high": 0.9,
        }
    )
    block = scores["released_best"].to_dict()
    assert block["columns"] == list(STAT_COLUMNS) and block["stats"] == [[0.5, 2.0, 1.0, 2.0]]
