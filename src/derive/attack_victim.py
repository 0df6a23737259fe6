"""The fine-tuned token classifier as a TextAttack victim model.

TextAttack concatenates NumPy outputs across inputs, which breaks per-word outputs of
varying length ("Got N outputs for 1 inputs"); the wrapper therefore returns one
:class:`WordProbs` object per input text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from textattack.models.wrappers import ModelWrapper

from src.data.text import word_offsets
from src.derive import attack_env  # noqa: F401  (NLTK data path, before textattack)

WordSplitter = Callable[[str], list[tuple[int, int]]]


@dataclass(eq=False)
class WordProbs:
    """The victim's label probabilities for the words of one text.

    Attributes:
        text: the text that was classified.
        offsets: (start, end) of each word in ``text``.
        probs: ``(n_words, n_labels)`` probabilities, columns in the classifier's label order.
    """

    text: str
    offsets: list[tuple[int, int]]
    probs: np.ndarray


class VictimModel(ModelWrapper):
    """Wraps a :class:`src.finetune.predict.TokenClassifier` for TextAttack.

    Args:
        classifier: anything with ``labels`` and ``predict_word_probs(list[list[str]])``.
        splitter: text -> word offsets. The attack passes one that splits words at gold span
            boundaries exactly as training did (:func:`src.finetune.bio.record_to_bio`).
    """

    def __init__(self, classifier: Any, splitter: WordSplitter = word_offsets):
        self.model = classifier
        self.splitter = splitter

    @property
    def labels(self) -> list[str]:
        return list(self.model.labels)

    def __call__(self, text_input_list: Sequence[Any], **kwargs: Any) -> list[WordProbs]:
        texts = [t if isinstance(t, str) else " ".join(t) for t in text_input_list]
        offsets = [self.splitter(text) for text in texts]
        batch = [[text[a:b] for a, b in text_offsets] for text, text_offsets in zip(texts, offsets)]
        probs = self.model.predict_word_probs(batch)
        return [WordProbs(text, o, np.asarray(p)) for text, o, p in zip(texts, offsets, probs)]
