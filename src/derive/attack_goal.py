"""An untargeted TextAttack goal for token classification: make the victim get gold spans wrong.

TextAttack 0.3 has goal functions for classification and text-to-text only; SeqAttack wrote
its own for sequence labelling, and so do we. For a candidate text, the gold spans are
re-located (they are never edited) and tagged as in training; the victim's most probable
tag of each word is compared with them. Three *success criteria*:

* ``any_span`` (SeqAttack's meaning, the default): at least one gold span that the victim
  predicted exactly on the original text is no longer predicted exactly (its words are not
  read off as exactly one span of the victim's BIO tags, decoded as
  :func:`src.finetune.bio.bio_to_spans` does).
* ``span_share``: the share of those originally correct gold spans that are no longer
  predicted exactly reaches ``threshold``.
* ``word_share``: the share of gold words whose most probable tag differs from the gold
  BIO tag reaches ``threshold`` (the *mislabel rate*; absolute, not relative to the original).

An instance is skipped when the goal is already met on the original text; for the span
criteria also when the victim predicts no gold span exactly there (nothing to break).

The search needs a score that moves before a span breaks, or greedy search never accepts a
swap; each score is lexicographic: whole broken spans (or mislabelled words) first, then a
*closeness* in [0, 1) of the next one to break: for a span, the largest probability mass
off the tag its words need (the gold tag inside, anything but ``I-`` on the word after it);
the span criteria weigh the nearest span 0.8 and the mean over unbroken spans 0.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from textattack.goal_function_results import GoalFunctionResult
from textattack.goal_functions import GoalFunction
from textattack.shared.validators import MODELS_BY_GOAL_FUNCTION

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.attack_gold import GoldTracker
from src.derive.attack_victim import WordProbs

SUCCESS_CRITERIA = ("any_span", "span_share", "word_share")
DEFAULT_CRITERION = "any_span"
OUTSIDE = "O"


@dataclass(frozen=True)
class Mislabelling:
    """How the victim fares on the gold words of one text."""

    gold_words: int
    mislabelled: int
    off_gold_mass: float  # mean over gold words of 1 - p(gold tag)

    @property
    def rate(self) -> float:
        return self.mislabelled / self.gold_words if self.gold_words else 0.0

    @property
    def score(self) -> float:
        return (self.mislabelled + self.off_gold_mass) / (self.gold_words + 1)


@dataclass(frozen=True)
class SpanDamage:
    """How the victim fares on the gold spans of one text, relative to the original.

    Attributes:
        gold_spans: gold spans of the task's label (tagged) in the text.
        exact: indices of the gold spans the victim predicts exactly in this text.
        reference: indices of the gold spans it predicted exactly on the original text.
        closeness: for each reference span still predicted exactly, how close it is to
            breaking (0: safe, towards 1: about to break).
    """

    gold_spans: int
    exact: frozenset[int]
    reference: frozenset[int]
    closeness: tuple[float, ...] = ()

    @property
    def broken(self) -> int:
        return len(self.reference - self.exact)

    @property
    def rate(self) -> float:
        """Share of the originally correct gold spans no longer predicted exactly."""
        return self.broken / len(self.reference) if self.reference else 0.0


def gold_ranges(tags: Sequence[str]) -> list[tuple[int, int]]:
    """Word ranges ``[a, b)`` of the gold spans in gold BIO ``tags`` (a ``B-`` opens a span)."""
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    for i, tag in enumerate(tags):
        if tag.startswith("I-") and start is not None:
            continue
        if start is not None:
            ranges.append((start, i))
            start = None
        if tag != OUTSIDE:
            start = i
    if start is not None:
        ranges.append((start, len(tags)))
    return ranges


def predicted_exactly(pred: Sequence[str], start: int, end: int) -> bool:
    """Whether the predicted BIO tags read off exactly one span over words ``[start, end)``.

    Lenient IOB2 decoding as :func:`src.finetune.bio.bio_to_spans`: a span opens at ``B-``,
    or at ``I-`` after ``O``; ``I-`` continues an open span.
    """
    if not 0 <= start < end <= len(pred) or pred[start] == OUTSIDE:
        return False
    opens = pred[start].startswith("B-") or start == 0 or pred[start - 1] == OUTSIDE
    inside = all(tag.startswith("I-") for tag in pred[start + 1 : end])
    closes = end == len(pred) or not pred[end].startswith("I-")
    return opens and inside and closes


def span_closeness(probs: np.ndarray, labels: Sequence[str], tags: Sequence[str], start: int, end: int) -> float:
    """How close an exactly predicted span is to breaking: max mass off the tag each word needs."""
    column = {label: j for j, label in enumerate(labels)}
    off = [1.0 - float(probs[i, column[tags[i]]]) for i in range(start, end)]
    inside = [label for label in labels if label.startswith("I-")]
    if end < len(tags) and inside:  # the next word must not continue the span
        off.append(float(sum(probs[end, column[label]] for label in inside)))
    return min(max(off), 1.0 - 1e-6)


class TokenLabelGoalFunctionResult(GoalFunctionResult):
    """A goal function result whose displayed output is the damage rate of the criterion."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, goal_function_result_type="Token labelling", **kwargs)

    def get_text_color_input(self) -> str:
        return "blue"

    def get_text_color_perturbed(self) -> str:
        return "red"

    def get_colored_output(self, color_method: Any = None) -> str:
        return f"damage {self.output:.2f}"


class GoldLabelGoal(GoalFunction):
    """Untargeted goal: break the victim's labelling of the gold spans (see the module docstring).

    Args:
        model_wrapper: a :class:`~src.derive.attack_victim.VictimModel`.
        tracker: the :class:`GoldTracker` reset to the instance under attack.
        criterion: ``any_span``, ``span_share`` or ``word_share``.
        threshold: share at which ``span_share`` / ``word_share`` succeed (unused by ``any_span``).
        query_budget: most victim queries per attack.
    """

    def __init__(
        self,
        model_wrapper: Any,
        tracker: GoldTracker,
        criterion: str = DEFAULT_CRITERION,
        threshold: float = 0.5,
        **kwargs: Any,
    ):
        if criterion not in SUCCESS_CRITERIA:
            raise ValueError(f"criterion must be one of {SUCCESS_CRITERIA}, got {criterion!r}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        super().__init__(model_wrapper, **kwargs)
        self.tracker = tracker
        self.criterion = criterion
        self.threshold = threshold
        self.labels = list(model_wrapper.labels)
        self.reference: frozenset[int] | None = None
        # set by a chained attack that continues from another attack's text: success stays
        # relative to the spans the victim predicted exactly on the *original* text
        self.pinned_reference: frozenset[int] | None = None

    # --- what the victim gets wrong -------------------------------------------------------
    def _gold(self, output: WordProbs) -> tuple[list[str], list[tuple[int, int]]] | None:
        bio = self.tracker.bio(output.text)
        if bio is None:
            return None
        _, offsets, tags = bio
        if offsets != output.offsets:
            raise RuntimeError("victim and gold tracker split the text into different words")
        return tags, gold_ranges(tags)

    def mislabelling(self, output: WordProbs) -> Mislabelling:
        """Gold-word statistics of one victim output (zero gold words when the spans are lost)."""
        gold = self._gold(output)
        if gold is None:
            return Mislabelling(0, 0, 0.0)
        tags = gold[0]
        words = [i for i, tag in enumerate(tags) if tag != OUTSIDE]
        if not words:
            return Mislabelling(0, 0, 0.0)
        columns = np.array([self.labels.index(tags[i]) for i in words])
        probs = output.probs[np.array(words)]
        wrong = int((probs.argmax(axis=1) != columns).sum())
        off = float(np.mean(1.0 - probs[np.arange(len(words)), columns]))
        return Mislabelling(len(words), wrong, off)

    def exact_spans(self, output: WordProbs) -> frozenset[int] | None:
        """Indices of the gold spans predicted exactly in ``output`` (None when the spans are lost)."""
        gold = self._gold(output)
        if gold is None:
            return None
        pred = [self.labels[j] for j in output.probs.argmax(axis=1)] if len(output.probs) else []
        return frozenset(k for k, (a, b) in enumerate(gold[1]) if predicted_exactly(pred, a, b))

    def span_damage(self, output: WordProbs) -> SpanDamage:
        """Broken reference spans and the closeness of the others (reference: the original's)."""
        gold = self._gold(output)
        exact = self.exact_spans(output)
        if gold is None or exact is None:
            return SpanDamage(0, frozenset(), frozenset())
        reference = self.reference if self.reference is not None else exact
        ranges = gold[1]
        closeness = tuple(
            span_closeness(output.probs, self.labels, gold[0], *ranges[k]) for k in sorted(reference & exact)
        )
        return SpanDamage(len(ranges), exact, frozenset(reference), closeness)

    def damage(self, output: WordProbs) -> float:
        """The criterion's rate in [0, 1]: mislabel rate (word_share) or broken span share."""
        if self.criterion == "word_share":
            return self.mislabelling(output).rate
        return self.span_damage(output).rate

    # --- TextAttack interface --------------------------------------------------------------
    def init_attack_example(self, attacked_text: Any, ground_truth_output: Any) -> Any:
        """Fix the reference spans (those predicted exactly on the original) before the search."""
        self.reference = None
        if self.pinned_reference is not None:
            self.reference = self.pinned_reference
        else:
            original = self._call_model([attacked_text])[0]
            self.reference = self.exact_spans(original) or frozenset()
        return super().init_attack_example(attacked_text, ground_truth_output)

    def _process_model_outputs(self, inputs: Any, outputs: Any) -> list[WordProbs]:
        outputs = list(outputs)
        if not all(isinstance(o, WordProbs) for o in outputs):
            raise TypeError("the victim must return one WordProbs per input")
        return outputs

    def _is_goal_complete(self, model_output: WordProbs, attacked_text: Any) -> bool:
        if self.criterion == "word_share":
            found = self.mislabelling(model_output)
            return found.gold_words > 0 and found.rate >= self.threshold
        damage = self.span_damage(model_output)
        if not damage.reference:
            return False
        if self.criterion == "any_span":
            return damage.broken >= 1
        return damage.rate >= self.threshold

    def _should_skip(self, model_output: WordProbs, attacked_text: Any) -> bool:
        if self.criterion != "word_share" and not self.span_damage(model_output).reference:
            return True  # the victim gets no gold span right: nothing to break
        return self._is_goal_complete(model_output, attacked_text)

    def _get_score(self, model_output: WordProbs, attacked_text: Any) -> float:
        if self.criterion == "word_share":
            return self.mislabelling(model_output).score
        damage = self.span_damage(model_output)
        if not damage.reference:
            return 0.0
        # mostly the span nearest to breaking, a little the others (so any progress counts)
        nearest = 0.8 * max(damage.closeness, default=0.0) + 0.2 * float(np.mean(damage.closeness or [0.0]))
        if self.criterion == "any_span":
            return 1.0 if damage.broken else nearest
        return (damage.broken + nearest) / (len(damage.reference) + 1)

    def _get_displayed_output(self, raw_output: WordProbs) -> float:
        return self.damage(raw_output)

    def _goal_function_result_type(self) -> type:
        return TokenLabelGoalFunctionResult

    def extra_repr_keys(self) -> list[str]:
        return ["criterion", "threshold"] + super().extra_repr_keys()


class MislabelGoldWords(GoldLabelGoal):
    """The ``word_share`` goal (the mislabel rate of gold words reaches ``threshold``)."""

    def __init__(self, model_wrapper: Any, tracker: GoldTracker, threshold: float = 0.5, **kwargs: Any):
        super().__init__(model_wrapper, tracker, criterion="word_share", threshold=threshold, **kwargs)


# TextAttack checks a goal function against the model classes it knows to work with it and
# warns twice per attack ("No entry found for goal function ...") when the goal is not in its
# table; these goals are written for the project's own victim, so they are entered there.
for _goal in (GoldLabelGoal, MislabelGoldWords):
    MODELS_BY_GOAL_FUNCTION[_goal] = [r"^src\.finetune\.predict\.TokenClassifier$"]
