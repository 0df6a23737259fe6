"""Span scoring: the study's Hungarian word-LCS micro-F1, strict and relaxed span F1, error types.

Every instance is reduced to small per-instance sufficient statistics
``(matched, n_pred, n_gold)`` for each metric (the released scorer's variants in
``src.scoring.variants`` use four, ``(p_sum, r_sum, n_pred, n_gold)``), so a dataset's micro-F1, and the
F1 of any bootstrap resample (``src.scoring.stats``), is a sum and a division, never a
re-matching.

Definitions (tested in ``tests/test_metrics.py``):

* Words come from :func:`src.data.text.words` (case-sensitive unless ``lowercase``).
* ``lcs``: similarity ``LCS(p, g) / max(|p|, |g|)`` over words (0 when a side has no
  words); one-to-one matching maximizing the total similarity (Hungarian); the
  instance's ``matched`` is that total.
* ``strict``: a predicted and a gold span match when their word sequences are
  identical (similarity 1, so whitespace differences between words do not count);
  one-to-one maximum matching; ``matched`` is the number of pairs.
* ``relaxed``: a pair matches when it shares at least one word (TempEval-3 style
  overlap, on strings rather than offsets); one-to-one maximum matching.
* Micro precision ``sum(matched) / sum(n_pred)``, recall ``sum(matched) / sum(n_gold)``
  (each 0 when its denominator is 0), F1 their harmonic mean, which equals
  ``2 matched / (n_pred + n_gold)`` (0 when both are 0). Duplicate predictions each
  count; an instance with neither predictions nor gold spans changes nothing.
* Labels: similarity is 0 when a prediction and a gold span both carry labels and
  they differ, so labelled (``comp``) predictions are matched within their label,
  plain strings against every gold span. The per-label block of label L uses the
  gold spans of L and the predictions labelled L **plus every unlabelled
  prediction**: for unlabelled output the per-label recall is the meaningful number,
  its precision divides by all unlabelled predictions (a lower bound).
* Error types from the ``lcs`` matching: ``boundary`` = matched pairs with
  0 < sim < 1, ``exact`` = pairs with sim 1, ``missing`` = gold spans with no
  positive-similarity partner, ``spurious`` = predictions with none. So
  ``n_pred = exact + boundary + spurious`` and ``n_gold = exact + boundary + missing``.
  When several assignments reach the same total similarity, SciPy's deterministic
  choice decides how they split between exact/boundary and missing/spurious.
* ``not_in_text`` counts predictions whose string does not occur verbatim in the
  instance text (case-folded with ``lowercase``); they are scored like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from src.data.schema import Record, Span
from src.data.text import words
from src.study import LABELS, METRICS, PRIMARY_METRIC

#: How a gold or predicted span fares under the matching: one exact class and three error types.
MATCH_CLASSES = ("exact", "boundary", "missing", "spurious")
#: The error types the report counts, in its order.
ERROR_TYPES = ("missing", "spurious", "boundary")


@dataclass(frozen=True)
class PredictedSpan:
    """One predicted span string; ``label`` is None for label-free (timex/eventx) output."""

    text: str
    label: str | None = None


def as_predicted_span(item: Any) -> PredictedSpan:
    """Normalize a prediction item (a string or a ``{"text", "label"}`` object).

    Raises:
        ValueError: the item is neither form, or its label is unknown.
    """
    if isinstance(item, PredictedSpan):
        return item
    if isinstance(item, str):
        return PredictedSpan(item)
    if isinstance(item, Mapping):
        text, label = item.get("text"), item.get("label")
        if not isinstance(text, str):
            raise ValueError(f"prediction object needs a string 'text', got {item!r}")
        if label is not None and label not in LABELS:
            raise ValueError(f"prediction label {label!r} is not one of {LABELS}")
        return PredictedSpan(text, label)
    raise ValueError(f"a prediction must be a string or a {{'text', 'label'}} object, got {item!r}")


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two word sequences (dynamic programming)."""
    if not a or not b:
        return 0
    if a == b:
        return len(a)
    previous = [0] * (len(b) + 1)
    for word_a in a:
        current = [0]
        for j, word_b in enumerate(b):
            current.append(previous[j] + 1 if word_a == word_b else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def span_similarity(pred: str, gold: str, lowercase: bool = False) -> float:
    """The study's similarity ``LCS(p, g) / max(|p|, |g|)`` over words; 0 if a side has no words."""
    p, g = words(pred, lowercase), words(gold, lowercase)
    if not p or not g:
        return 0.0
    return lcs_length(p, g) / max(len(p), len(g))


def optimal_matching(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One-to-one assignment maximizing the total weight (rows = predictions, cols = gold).

    Returns the matched row and column indices and the total weight.
    """
    rows, cols = linear_sum_assignment(weights, maximize=True)
    return rows, cols, float(weights[rows, cols].sum())


@dataclass(frozen=True)
class SpanMatch:
    """The optimal one-to-one matching of one instance's predictions (rows) and gold spans (cols):
    what every metric and every report of exact, boundary, missing and spurious spans reads."""

    common: np.ndarray  # LCS length of each (prediction, gold) pair
    longest: np.ndarray  # max(|p|, |g|), 1 where both are empty
    rows: np.ndarray  # matched predictions
    cols: np.ndarray  # their gold spans

    @property
    def similarity(self) -> np.ndarray:
        return self.common / self.longest

    def classes(self) -> tuple[list[str], list[str], list[int | None]]:
        """(class of each gold span, class of each prediction, each prediction's gold partner or None):
        a matched pair of similarity 1 is ``exact``, one above 0 ``boundary``; the rest are
        ``missing`` (gold) and ``spurious`` (predictions)."""
        gold = ["missing"] * self.common.shape[1]
        preds: list[str] = ["spurious"] * self.common.shape[0]
        partner: list[int | None] = [None] * self.common.shape[0]
        similarity = self.similarity
        for i, j in zip(self.rows, self.cols):
            if similarity[i, j] > 0:
                cls = "exact" if similarity[i, j] == 1.0 else "boundary"
                gold[j], preds[i], partner[i] = cls, cls, int(j)
        return gold, preds, partner


def match_spans(preds: Sequence[PredictedSpan], gold: Sequence[Any], lowercase: bool = False) -> SpanMatch:
    """Match predictions to gold spans (anything with ``text`` and ``label``) by the study's word LCS
    similarity; a prediction with a label only matches gold spans of that label."""
    pred_words = [words(p.text, lowercase) for p in preds]
    gold_words = [words(g.text, lowercase) for g in gold]
    gold_vocab = [set(gw) for gw in gold_words]
    shape = (len(preds), len(gold))
    common = np.zeros(shape, dtype=np.int64)
    longest = np.ones(shape, dtype=np.int64)
    for i, (p, pw) in enumerate(zip(preds, pred_words)):
        for j, (g, gw) in enumerate(zip(gold, gold_words)):
            if (p.label is not None and p.label != g.label) or gold_vocab[j].isdisjoint(pw):
                continue  # similarity 0 (no shared word: skip the DP, common for long documents)
            common[i, j] = lcs_length(pw, gw)
            longest[i, j] = max(len(pw), len(gw), 1)
    rows, cols, _ = optimal_matching(common / longest)
    return SpanMatch(common, longest, rows, cols)


@dataclass(frozen=True)
class InstanceScore:
    """Sufficient statistics and error counts of one instance."""

    lcs: float
    strict: int
    relaxed: int
    n_pred: int
    n_gold: int
    exact: int
    boundary: int
    missing: int
    spurious: int
    not_in_text: int


def score_instance(
    text: str,
    gold: Sequence[Span],
    predictions: Sequence[Any],
    lowercase: bool = False,
) -> InstanceScore:
    """Match one instance's predictions against its gold spans under all three metrics."""
    preds = [as_predicted_span(p) for p in predictions]
    match = match_spans(preds, gold, lowercase)
    common, longest = match.common, match.longest
    matched = match.similarity[match.rows, match.cols]
    lcs_total = float(matched.sum())
    exact = int(np.count_nonzero(matched == 1.0))
    boundary = int(np.count_nonzero((matched > 0) & (matched < 1)))
    strict = optimal_matching((common == longest) & (common > 0))[2]
    relaxed = optimal_matching(common > 0)[2]
    haystack = text.lower() if lowercase else text
    not_in_text = sum(
        1 for p in preds if not words(p.text, lowercase) or (p.text.lower() if lowercase else p.text) not in haystack
    )
    return InstanceScore(
        lcs=lcs_total,
        strict=int(strict),
        relaxed=int(relaxed),
        n_pred=len(preds),
        n_gold=len(gold),
        exact=exact,
        boundary=boundary,
        missing=len(gold) - exact - boundary,
        spurious=len(preds) - exact - boundary,
        not_in_text=not_in_text,
    )


def precision_recall_f1(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Micro P, R, F1 from summed statistics, 3 or 4 columns on the last axis.

    * ``(..., 3) = (matched, n_pred, n_gold)``: one matching serves precision and recall
      (``P = matched / n_pred``, ``R = matched / n_gold``, ``F1 = 2 matched / (n_pred + n_gold)``).
    * ``(..., 4) = (p_sum, r_sum, n_pred, n_gold)``: precision and recall have their own
      matched sums (the released scorer's variants, ``src.scoring.variants``):
      ``P = p_sum / n_pred``, ``R = r_sum / n_gold``, ``F1 = 2 P R / (P + R)``. Where
      ``p_sum == r_sum`` the F1 is computed with the 3-column formula, which is the same
      number, so a 3-column statistic widened to 4 columns gives bit-identical scores.

    Vectorised over leading axes (used for every bootstrap resample at once);
    a zero denominator gives 0.

    Raises:
        ValueError: the last axis is neither 3 nor 4 wide.
    """
    totals = np.asarray(totals, dtype=np.float64)
    width = totals.shape[-1] if totals.ndim else 0
    if width == 3:
        p_sum = r_sum = totals[..., 0]
        n_pred, n_gold = totals[..., 1], totals[..., 2]
    elif width == 4:
        p_sum, r_sum, n_pred, n_gold = totals[..., 0], totals[..., 1], totals[..., 2], totals[..., 3]
    else:
        raise ValueError(
            "statistics need 3 (matched, n_pred, n_gold) or 4 (p_sum, r_sum, n_pred, n_gold) columns, "
            f"got shape {totals.shape}"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(n_pred > 0, p_sum / n_pred, 0.0)
        recall = np.where(n_gold > 0, r_sum / n_gold, 0.0)
        f1 = np.where(n_pred + n_gold > 0, 2.0 * p_sum / (n_pred + n_gold), 0.0)
        if width == 4:
            harmonic = np.where(precision + recall > 0, 2.0 * precision * recall / (precision + recall), 0.0)
            f1 = np.where(p_sum == r_sum, f1, harmonic)
    return precision, recall, f1


@dataclass
class ScoreResult:
    """Scores of one system on one dataset, with per-instance statistics kept for resampling.

    Attributes:
        ids: instance ids in gold order.
        stats: metric name -> float array (N, 3) of (matched, n_pred, n_gold).
        errors: match class (``MATCH_CLASSES``) -> int array (N,).
        not_in_text: int array (N,) of predictions not found in the text.
        per_label: label -> the same result restricted to that label (only when
            the gold has more than one label).
    """

    ids: list[str]
    stats: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    not_in_text: np.ndarray
    per_label: dict[str, ScoreResult] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def prf(self, metric: str = PRIMARY_METRIC) -> tuple[float, float, float]:
        """Micro precision, recall and F1 of ``metric`` over the whole dataset."""
        p, r, f = precision_recall_f1(self.stats[metric].sum(axis=0))
        return float(p), float(r), float(f)

    def summary(self) -> dict[str, Any]:
        """JSON-ready block: P/R/F1 per metric, error totals, counts (no per-label blocks)."""
        out: dict[str, Any] = {"n": len(self)}
        for metric in METRICS:
            p, r, f = self.prf(metric)
            out[metric] = {"precision": p, "recall": r, "f1": f}
        out["errors"] = {name: int(values.sum()) for name, values in self.errors.items()}
        out["n_pred"] = int(self.stats[PRIMARY_METRIC][:, 1].sum())
        out["n_gold"] = int(self.stats[PRIMARY_METRIC][:, 2].sum())
        out["predictions_not_in_text"] = int(self.not_in_text.sum())
        return out

    def to_dict(self) -> dict[str, Any]:
        """``summary()`` plus a ``per_label`` block when the gold has several labels."""
        out = self.summary()
        if self.per_label:
            out["per_label"] = {label: result.summary() for label, result in self.per_label.items()}
        return out


def _collect(ids: list[str], scores: list[InstanceScore]) -> ScoreResult:
    n = len(scores)
    stats = {
        metric: np.array([(getattr(s, metric), s.n_pred, s.n_gold) for s in scores], dtype=np.float64).reshape(n, 3)
        for metric in METRICS
    }
    errors = {name: np.array([getattr(s, name) for s in scores], dtype=np.int64) for name in MATCH_CLASSES}
    not_in_text = np.array([s.not_in_text for s in scores], dtype=np.int64)
    return ScoreResult(list(ids), stats, errors, not_in_text)


def score_pairs(pairs: Iterable[tuple[Record, Sequence[Any]]], lowercase: bool = False) -> ScoreResult:
    """Score (gold record, predictions) pairs; adds per-label results when the gold has 2+ labels."""
    pairs = [(record, [as_predicted_span(p) for p in preds]) for record, preds in pairs]
    ids = [record.id for record, _ in pairs]
    result = _collect(ids, [score_instance(r.text, r.spans, preds, lowercase) for r, preds in pairs])
    gold_labels = {span.label for record, _ in pairs for span in record.spans}
    if len(gold_labels) > 1:
        for label in [lab for lab in LABELS if lab in gold_labels]:
            scores = [
                score_instance(
                    record.text,
                    [s for s in record.spans if s.label == label],
                    [p for p in preds if p.label in (label, None)],
                    lowercase,
                )
                for record, preds in pairs
            ]
            result.per_label[label] = _collect(ids, scores)
    return result


def stack_stats(results: Sequence[ScoreResult], metric: str = PRIMARY_METRIC) -> np.ndarray:
    """Per-instance statistics of several systems on the same instances as one (S, N, 3) array.

    This is the input of ``src.scoring.stats.bootstrap_f1_matrix`` / ``all_pairs_bootstrap``.

    Raises:
        ValueError: the results do not cover the same instance ids in the same order.
    """
    if not results:
        raise ValueError("no results to stack")
    for index, result in enumerate(results[1:], start=1):
        if result.ids != results[0].ids:
            raise ValueError(f"result {index} is not scored on the same instances (same ids, same order) as result 0")
    return np.stack([result.stats[metric] for result in results])
