"""An untargeted TextAttack goal for token classification: make the victim mislabel gold words.

TextAttack 0.3 has goal functions for classification and text-to-text only; SeqAttack wrote
its own for sequence labelling, and so do we. For a candidate text, the gold words are the
words inside the (re-located) gold spans; the *mislabel rate* is the share of them whose
most probable tag differs from the gold BIO tag. The goal is reached when that rate reaches
``threshold``.

The search needs a score that moves before a whole word flips, or greedy search never
accepts a swap; the score is therefore lexicographic:
``(mislabelled words + mean probability mass off the gold tags) / (gold words + 1)``,
so one more mislabelled word always outranks any change in confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)
from src.derive.attack_gold import GoldTracker
from src.derive.attack_victim import WordProbs
from textattack.goal_function_results import GoalFunctionResult
from textattack.goal_functions import GoalFunction


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


class TokenLabelGoalFunctionResult(GoalFunctionResult):
    """A goal function result whose displayed output is the mislabel rate."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, goal_function_result_type="Token labelling", **kwargs)

    def get_text_color_input(self) -> str:
        return "blue"

    def get_text_color_perturbed(self) -> str:
        return "red"

    def get_colored_output(self, color_method: Any = None) -> str:
        return f"mislabelled {self.output:.2f}"


class MislabelGoldWords(GoalFunction):
    """Untargeted goal: raise the share of gold words the victim tags wrongly.

    Args:
        model_wrapper: a :class:`~src.derive.attack_victim.VictimModel`.
        tracker: the :class:`GoldTracker` reset to the instance under attack.
        threshold: mislabel rate at which the attack has succeeded.
        query_budget: most victim queries per attack.
    """

    def __init__(self, model_wrapper: Any, tracker: GoldTracker, threshold: float = 0.5, **kwargs: Any):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        super().__init__(model_wrapper, **kwargs)
        self.tracker = tracker
        self.threshold = threshold
        self.labels = list(model_wrapper.labels)

    def mislabelling(self, output: WordProbs) -> Mislabelling:
        """Gold-word statistics of one victim output (zero gold words when the spans are lost)."""
        bio = self.tracker.bio(output.text)
        if bio is None:
            return Mislabelling(0, 0, 0.0)
        _, offsets, tags = bio
        if offsets != output.offsets:
            raise RuntimeError("victim and gold tracker split the text into different words")
        gold = [i for i, tag in enumerate(tags) if tag != "O"]
        if not gold:
            return Mislabelling(0, 0, 0.0)
        columns = np.array([self.labels.index(tags[i]) for i in gold])
        probs = output.probs[np.array(gold)]
        wrong = int((probs.argmax(axis=1) != columns).sum())
        off = float(np.mean(1.0 - probs[np.arange(len(gold)), columns]))
        return Mislabelling(len(gold), wrong, off)

    def _process_model_outputs(self, inputs: Any, outputs: Any) -> list[WordProbs]:
        outputs = list(outputs)
        if not all(isinstance(o, WordProbs) for o in outputs):
            raise TypeError("the victim must return one WordProbs per input")
        return outputs

    def _is_goal_complete(self, model_output: WordProbs, attacked_text: Any) -> bool:
        found = self.mislabelling(model_output)
        return found.gold_words > 0 and found.rate >= self.threshold

    def _get_score(self, model_output: WordProbs, attacked_text: Any) -> float:
        return self.mislabelling(model_output).score

    def _get_displayed_output(self, raw_output: WordProbs) -> float:
        return self.mislabelling(raw_output).rate

    def _goal_function_result_type(self) -> type:
        return TokenLabelGoalFunctionResult

    def extra_repr_keys(self) -> list[str]:
        return ["threshold"] + super().extra_repr_keys()
