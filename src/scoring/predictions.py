"""Prediction files: read and validate them, and pair them one-to-one with gold records.

A prediction file is JSONL, one ``{"id": str, "predictions": [...]}`` object per line,
items being strings (label-free) or ``{"text": str, "label": "TIMEX"|"EVENT"}``
objects (comp; ``label`` may be absent or null); other keys are ignored. Nothing is
ever scored on a silent subset: an id missing on either side, a duplicated id, an
empty file or a malformed line (see :func:`~src.data.schema.iter_jsonl` for the JSON
rules) is a :class:`~src.data.schema.DataError` that names the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.core.errors import DataError
from src.data.schema import Record, iter_jsonl, read_numbered_records, short_repr
from src.scoring.metrics import PredictedSpan, as_predicted_span
from src.study import LABELS


def read_gold(path: str | Path) -> list[tuple[int, Record]]:
    """Read a dataset file as (line number, record) pairs; duplicated ids are errors."""
    return read_numbered_records(path)


def predicted_span(item: Any, where: str) -> PredictedSpan:
    """One prediction item: a string, or an object with a string ``text`` and a known or null ``label``."""
    if isinstance(item, dict):
        if not isinstance(item.get("text"), str):
            raise ValueError(f"{where}.text must be a string, got {short_repr(item.get('text'))}")
        if item.get("label") is not None and item["label"] not in LABELS:
            raise ValueError(f"{where}.label {short_repr(item['label'])} is not one of {LABELS}")
    elif not isinstance(item, str):
        raise ValueError(f"{where} must be a string or a {{'text', 'label'}} object, got {short_repr(item)}")
    return as_predicted_span(item)


def prediction_line(obj: Any) -> tuple[str, list[PredictedSpan]]:
    """Validate one decoded prediction line into (id, predictions); ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [key for key in ("id", "predictions") if key not in obj]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    if not isinstance(obj["id"], str):
        raise ValueError(f"'id' must be a string, got {short_repr(obj['id'])}")
    if not isinstance(obj["predictions"], list):
        raise ValueError(f"'predictions' must be a list, got {type(obj['predictions']).__name__}")
    return obj["id"], [predicted_span(item, f"predictions[{i}]") for i, item in enumerate(obj["predictions"])]


def read_predictions(path: str | Path) -> dict[str, tuple[int, list[PredictedSpan]]]:
    """Read a prediction file into ``id -> (line number, predictions)``."""
    out: dict[str, tuple[int, list[PredictedSpan]]] = {}
    for number, obj in iter_jsonl(path):
        try:
            pred_id, spans = prediction_line(obj)
        except ValueError as exc:
            raise DataError(path, str(exc), number) from None
        if pred_id in out:
            raise DataError(path, f"duplicated id {short_repr(pred_id)} (first on line {out[pred_id][0]})", number)
        out[pred_id] = (number, spans)
    if not out:
        raise DataError(path, "no records")
    return out


def pair_predictions(
    gold: list[tuple[int, Record]],
    predictions: dict[str, tuple[int, list[PredictedSpan]]],
    gold_path: str | Path,
    pred_path: str | Path,
) -> list[tuple[Record, list[PredictedSpan]]]:
    """Pair every gold record with its predictions, in gold order; any unmatched id is an error."""
    gold_ids = {record.id for _, record in gold}
    for pred_id, (number, _) in predictions.items():
        if pred_id not in gold_ids:
            raise DataError(pred_path, f"id {short_repr(pred_id)} is not in the gold file {gold_path}", number)
    for number, record in gold:
        if record.id not in predictions:
            raise DataError(
                gold_path, f"id {short_repr(record.id)} has no line in the prediction file {pred_path}", number
            )
    return [(record, predictions[record.id][1]) for _, record in gold]


def load_pairs(gold_path: str | Path, pred_path: str | Path) -> list[tuple[Record, list[PredictedSpan]]]:
    """Read a gold file and a prediction file and pair them (see :func:`pair_predictions`)."""
    gold = read_gold(gold_path)
    if not gold:
        raise DataError(gold_path, "no records")
    return pair_predictions(gold, read_predictions(pred_path), gold_path, pred_path)
