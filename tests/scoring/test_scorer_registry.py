"""A scorer outside the unit x matching grid is one registered function, and it reaches the output."""

from __future__ import annotations

import pytest

from src.data.schema import Record, Span
from src.scoring.evaluate import InstanceOutput, evaluate_dataset
from src.scoring.scorer_registry import VARIANTS, register_scorer, report_columns, unregister_scorer
from src.study import PRIMARY_SCORER


def located(record_id: str, text: str, spans: list[str]) -> Record:
    """A TIMEX record whose spans are found left to right in ``text``."""
    out, position = [], 0
    for span in spans:
        start = text.index(span, position)
        out.append(Span(start, start + len(span), span, "TIMEX"))
        position = start + len(span)
    return Record(record_id, "doc", text, out, "test")


RECORDS = [
    located("a", "since last week", ["last week"]),
    located("b", "on June 5 and now", ["June 5", "now"]),
    located("c", "today or tomorrow", ["today", "tomorrow"]),
]
PREDICTIONS = [["last week", "Friday"], ["June"], ["today"]]
# exact_string, per instance (p_sum, r_sum, n_pred, n_gold):
#   a: "last week" is gold, "Friday" is not; the gold span is predicted -> (1, 1, 2, 1)
#   b: "June" is no gold string; neither gold span is predicted         -> (0, 0, 1, 2)
#   c: "today" is gold; "today" predicted, "tomorrow" not              -> (1, 1, 1, 2)
EXPECTED_STATS = [[1, 1, 2, 1], [0, 0, 1, 2], [1, 1, 1, 2]]
# totals 2, 2, 4, 5: P = 2/4, R = 2/5, F1 = 2 P R / (P + R) = 0.4 / 0.9
EXPECTED = {"precision": 0.5, "recall": 0.4, "f1": 4 / 9}


@pytest.fixture
def exact_string():
    """The toy scorer, registered for one test and removed after it."""

    @register_scorer("exact_string", "exact string", "a span counts when its string equals one on the other side")
    def score(record, predictions, lowercase):
        gold = [span.text for span in record.spans]
        predicted = [prediction.text for prediction in predictions]
        return (
            sum(text in gold for text in predicted),
            sum(text in predicted for text in gold),
            len(predicted),
            len(gold),
        )

    yield score
    unregister_scorer("exact_string")


def test_a_registered_function_is_logged_beside_the_primary_metric(exact_string):
    outputs = [InstanceOutput(predictions=list(p)) for p in PREDICTIONS]
    plain = evaluate_dataset("timex", "base", RECORDS, outputs, resamples=10, seed=0)
    scored = evaluate_dataset("timex", "base", RECORDS, outputs, resamples=10, seed=0, variants=["exact_string"])

    metrics = scored.metrics()
    for stat, value in EXPECTED.items():
        assert metrics[f"timex.base.exact_string.{stat}"] == pytest.approx(value)
    assert scored.bootstrap_artifact()["variant_stats"]["exact_string"] == EXPECTED_STATS
    # the primary metric is untouched by the extra scorer
    assert {k: v for k, v in metrics.items() if ".exact_string." not in k} == plain.metrics()
    assert not any(".exact_string." in name for name in plain.metrics())


def test_registration_adds_a_report_column_after_the_grid_and_removal_takes_it_away(exact_string):
    assert list(VARIANTS)[-1] == "exact_string"
    assert report_columns()[-1] == ("exact_string", "exact string")
    assert list(VARIANTS)[0] == PRIMARY_SCORER
    with pytest.raises(ValueError, match="already registered"):
        register_scorer("exact_string", "again", "a second scorer under the same name")(exact_string)
    with pytest.raises(ValueError, match="built-in grid"):
        unregister_scorer(PRIMARY_SCORER)


def test_an_unknown_scorer_name_is_refused():
    with pytest.raises(KeyError, match="unknown scorer variant 'exact_string'"):
        evaluate_dataset("timex", "base", RECORDS, [InstanceOutput([])] * 3, 10, 0, variants=["exact_string"])
