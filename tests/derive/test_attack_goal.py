"""The attack goal on hand-built victim outputs: each success criterion, its score and skip rule (no model)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from src.data.schema import Record, Span
from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.attack_goal import (  # noqa: E402
    SUCCESS_CRITERIA,
    GoldLabelGoal,
    MislabelGoldWords,
    gold_ranges,
    predicted_exactly,
)
from src.derive.attack_gold import GoldTracker  # noqa: E402
from src.derive.attack_victim import VictimModel, WordProbs  # noqa: E402
from src.finetune.predict import TokenClassifier  # noqa: E402

LABELS = ["O", "B-E", "I-E"]
TEXT = "The firm announced profits and took over the rival yesterday ."
EVENTS = ["announced", "profits", "took over"]


class NoModel:
    """Only the interface: these tests build the victim's outputs by hand."""

    labels = LABELS

    def predict_word_probs(self, batch):  # pragma: no cover - never called
        raise AssertionError("no model call expected")


def record() -> Record:
    spans, cursor = [], 0
    for string in EVENTS:
        start = TEXT.index(string, cursor)
        spans.append(Span(start, start + len(string), string, "EVENT"))
        cursor = start + len(string)
    return Record("r", "d", TEXT, spans, "test")


def goal(criterion: str, threshold: float = 0.5) -> tuple[GoldLabelGoal, GoldTracker]:
    tracker = GoldTracker("EVENT")
    tracker.reset(record())
    victim = VictimModel(NoModel(), splitter=tracker.word_offsets)
    return GoldLabelGoal(victim, tracker, criterion=criterion, threshold=threshold), tracker


def output(tracker: GoldTracker, tags: list[str], confidence: float = 0.9) -> WordProbs:
    """A victim output whose argmax tags are ``tags`` (the rest of the mass spread evenly)."""
    _, offsets, _ = tracker.bio(TEXT)
    assert len(tags) == len(offsets)
    probs = np.full((len(tags), 3), (1 - confidence) / 2, dtype=np.float32)
    for i, tag in enumerate(tags):
        probs[i, LABELS.index(tag)] = confidence
    return WordProbs(TEXT, offsets, probs)


# words: The firm announced profits and took over the rival yesterday .
GOLD = ["O", "O", "B-E", "B-E", "O", "B-E", "I-E", "O", "O", "O", "O"]
ONE_MISSED = ["O", "O", "O", "B-E", "O", "B-E", "I-E", "O", "O", "O", "O"]  # announced lost
SPAN_GROWN = ["O", "O", "B-E", "B-E", "O", "B-E", "I-E", "I-E", "O", "O", "O"]  # took over the
HALF_SPAN = ["O", "O", "B-E", "B-E", "O", "B-E", "O", "O", "O", "O", "O"]  # took (over lost)
TWO_MISSED = ["O", "O", "O", "O", "O", "B-E", "I-E", "O", "O", "O", "O"]
NONE_RIGHT = ["O"] * 11


def test_gold_tags_and_exact_prediction_follow_lenient_iob2():
    g, tracker = goal("any_span")
    assert tracker.bio(TEXT)[2] == GOLD
    assert gold_ranges(GOLD) == [(2, 3), (3, 4), (5, 7)]
    assert predicted_exactly(GOLD, 5, 7) and predicted_exactly(GOLD, 2, 3)
    assert not predicted_exactly(SPAN_GROWN, 5, 7) and not predicted_exactly(HALF_SPAN, 5, 7)
    assert predicted_exactly(["O", "I-E", "I-E", "O"], 1, 3)  # I- after O opens a span
    assert not predicted_exactly(["B-E", "I-E", "O"], 1, 2)  # inside a longer span
    assert g.exact_spans(output(tracker, GOLD)) == {0, 1, 2}


@pytest.mark.parametrize("tags", [ONE_MISSED, SPAN_GROWN, HALF_SPAN])
def test_any_span_succeeds_when_one_correct_span_is_no_longer_exact(tags):
    g, tracker = goal("any_span")
    g.reference = g.exact_spans(output(tracker, GOLD))
    damaged = output(tracker, tags)
    assert g._is_goal_complete(damaged, None)
    assert g.span_damage(damaged).broken == 1
    assert not g._is_goal_complete(output(tracker, GOLD), None)


def test_any_span_counts_only_spans_that_were_right_on_the_original():
    g, tracker = goal("any_span")
    g.reference = g.exact_spans(output(tracker, ONE_MISSED))  # "announced" was already missed
    assert g.reference == {1, 2}
    assert not g._is_goal_complete(output(tracker, ONE_MISSED), None)
    assert g._is_goal_complete(output(tracker, TWO_MISSED), None)  # now "profits" is lost too


def test_span_share_needs_the_threshold_share_of_correct_spans():
    g, tracker = goal("span_share", threshold=0.5)
    g.reference = g.exact_spans(output(tracker, GOLD))
    assert not g._is_goal_complete(output(tracker, ONE_MISSED), None)  # 1 of 3
    assert g._is_goal_complete(output(tracker, TWO_MISSED), None)  # 2 of 3
    assert g.damage(output(tracker, TWO_MISSED)) == pytest.approx(2 / 3)
    assert goal("span_share", threshold=1 / 3)[0].threshold == pytest.approx(1 / 3)


def test_word_share_is_the_absolute_mislabel_rate_of_gold_words():
    g, tracker = goal("word_share", threshold=0.5)
    assert not g._is_goal_complete(output(tracker, ONE_MISSED), None)  # 1 of 4 gold words
    assert not g._is_goal_complete(output(tracker, HALF_SPAN), None)  # "over": 1 of 4
    assert g._is_goal_complete(output(tracker, TWO_MISSED), None)  # 2 of 4
    assert g.damage(output(tracker, TWO_MISSED)) == 0.5
    # word_share ignores the span boundary: a grown span mislabels no gold word
    assert g.mislabelling(output(tracker, SPAN_GROWN)).rate == 0.0


@pytest.mark.parametrize("criterion", SUCCESS_CRITERIA)
def test_score_rises_as_the_victim_loses_confidence_before_anything_breaks(criterion):
    g, tracker = goal(criterion)
    g.reference = g.exact_spans(output(tracker, GOLD))
    sure, unsure = output(tracker, GOLD, 0.95), output(tracker, GOLD, 0.6)
    broken = output(tracker, TWO_MISSED, 0.95)
    assert g._get_score(sure, None) < g._get_score(unsure, None) < g._get_score(broken, None)


@pytest.mark.parametrize("criterion", ["any_span", "span_share"])
def test_span_criteria_skip_an_instance_with_no_correct_span(criterion):
    g, tracker = goal(criterion)
    g.reference = g.exact_spans(output(tracker, NONE_RIGHT))
    assert g._should_skip(output(tracker, NONE_RIGHT), None)
    g.reference = g.exact_spans(output(tracker, GOLD))
    assert not g._should_skip(output(tracker, GOLD), None)


def test_bad_criterion_or_threshold_is_refused():
    with pytest.raises(ValueError, match="criterion"):
        goal("all_words")
    with pytest.raises(ValueError, match="threshold"):
        goal("span_share", threshold=0.0)


@pytest.mark.parametrize("goal_class", [GoldLabelGoal, MislabelGoldWords])
def test_textattack_knows_the_goals_fit_the_project_victim(goal_class):
    """TextAttack warned twice per attack that it had no entry for these goals (noise in every
    `adv` stage); the project's victim is now their registered model class."""
    from textattack.shared.utils import logger as textattack_logger
    from textattack.shared.validators import validate_model_goal_function_compatibility

    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = records.append
    textattack_logger.addHandler(handler)
    try:
        validate_model_goal_function_compatibility(goal_class, TokenClassifier)
        validate_model_goal_function_compatibility(goal_class, NoModel)
    finally:
        textattack_logger.removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "NoModel" in warnings[0]  # an unknown victim still warns
