"""Calibration of a trained tagger's ``O`` weight on validation sentences, target-free ones included."""

from __future__ import annotations

import logging
from typing import Any

from src.data.schema import Record
from src.finetune.bio import tag_set
from src.finetune.predict import TokenClassifier
from src.scoring.metrics import score_pairs
from src.study import PRIMARY_METRIC

logger = logging.getLogger(__name__)


def calibrate_outside_bias(
    model: Any, tokenizer: Any, val_records: list[Record], label: str, max_length: int, grid: list[float]
) -> dict[str, Any]:
    """The ``O`` weight (:attr:`TokenClassifier.outside_bias`) with the best validation LCS F1
    over whole sentences, target-free ones included, among the log-weights of ``grid``
    (``finetune.outside_bias_grid``); ties go to the smaller weight."""

    classifier = TokenClassifier(model, tokenizer, tag_set(label), label, max_length, device=str(model.device))
    by_bias: dict[str, float] = {}
    for bias in grid:
        classifier.outside_bias = bias
        predictions = classifier.predict_spans(val_records)
        by_bias[f"{bias:g}"] = round(score_pairs(zip(val_records, predictions)).prf(PRIMARY_METRIC)[2], 6)
    best = min(grid, key=lambda b: (-by_bias[f"{b:g}"], abs(b)))
    logger.info("outside bias %g: validation LCS F1 %s", best, by_bias)
    return {"outside_bias": best, "val_lcs_f1_by_outside_bias": by_bias}
