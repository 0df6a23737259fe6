"""Prediction files: read and validate them, and pair them one-to-one with gold records.

A prediction file is JSONL, one ``{"id": str, "predictions": [...]}`` object per line,
items being strings (label-free) or ``{"text": str, "label": "TIMEX"|"EVENT"}``
objects (comp); other keys are ignored. Nothing is ever scored on a silent subset:
an id missing on either side, a duplicated id or a malformed line is a
:class:`~src.data.schema.DataError` that names the file and line.
"""

from __future__ import annotations

from pathlib import Path

from src.data.schema import DataError, Record, iter_jsonl, record_from_dict
from src.scoring.metrics import PredictedSpan, as_predicted_span


def read_gold(path: str | Path) -> list[tuple[int, Record]]:
    """Read a dataset file as (line number, record) pairs; duplicated ids are errors."""
    out: list[tuple[int, Record]] = []
    seen: dict[str, int] = {}
    for number, obj in iter_jsonl(path):
        record = record_from_dict(obj, path, number)
        if record.id in seen:
            raise DataError(path, f"duplicated id {record.id!r} (first on line {seen[record.id]})", number)
        seen[record.id] = number
        out.append((number, record))
    return out


def read_predictions(path: str | Path) -> dict[str, tuple[int, list[PredictedSpan]]]:
    """Read a prediction file into ``id -> (line number, predictions)``."""
    out: dict[str, tuple[int, list[PredictedSpan]]] = {}
    for number, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise DataError(path, f"expected a JSON object, got {type(obj).__name__}", number)
        missing = [key for key in ("id", "predictions") if key not in obj]
        if missing:
            raise DataError(path, f"missing key(s) {', '.join(missing)}", number)
        if not isinstance(obj["id"], str):
            raise DataError(path, "'id' must be a string", number)
        if not isinstance(obj["predictions"], list):
            raise DataError(path, "'predictions' must be a list", number)
        if obj["id"] in out:
            raise DataError(path, f"duplicated id {obj['id']!r} (first on line {out[obj['id']][0]})", number)
        try:
            spans = [as_predicted_span(item) for item in obj["predictions"]]
        except ValueError as exc:
            raise DataError(path, str(exc), number) from None
        out[obj["id"]] = (number, spans)
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
            raise DataError(pred_path, f"id {pred_id!r} is not in the gold file {gold_path}", number)
    for number, record in gold:
        if record.id not in predictions:
            raise DataError(gold_path, f"id {record.id!r} has no line in the prediction file {pred_path}", number)
    return [(record, predictions[record.id][1]) for _, record in gold]


def load_pairs(gold_path: str | Path, pred_path: str | Path) -> list[tuple[Record, list[PredictedSpan]]]:
    """Read a gold file and a prediction file and pair them (see :func:`pair_predictions`)."""
    gold = read_gold(gold_path)
    if not gold:
        raise DataError(gold_path, "no records")
    return pair_predictions(gold, read_predictions(pred_path), gold_path, pred_path)
