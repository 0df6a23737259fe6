"""Prediction files: validation errors name file and line; pairing never drops an id silently."""

from __future__ import annotations

import json
import re

import pytest

from src.data.schema import DataError
from src.scoring.metrics import PredictedSpan
from src.scoring.predictions import load_pairs, pair_predictions, read_gold, read_predictions

GOLD_LINES = [
    {"id": "a", "doc_id": "d", "text": "He left on Monday.", "source": "t",
     "spans": [{"start": 11, "end": 17, "text": "Monday", "label": "TIMEX"}]},
    {"id": "b", "doc_id": "d", "text": "Nothing.", "source": "t", "spans": []},
]


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.fixture
def gold_file(tmp_path):
    return write_lines(tmp_path / "gold.jsonl", GOLD_LINES)


def test_reads_strings_and_labelled_objects_and_pairs_in_gold_order(tmp_path, gold_file):
    pred = write_lines(tmp_path / "pred.jsonl", [
        {"id": "b", "predictions": [], "raw": "ignored extra key"},
        "",
        {"id": "a", "predictions": ["Monday", {"text": "left", "label": "EVENT"}]},
    ])
    predictions = read_predictions(pred)
    # the blank line 2 still counts: "a" is on line 3
    assert predictions["a"] == (3, [PredictedSpan("Monday"), PredictedSpan("left", "EVENT")])
    pairs = load_pairs(gold_file, pred)
    assert [record.id for record, _ in pairs] == ["a", "b"]
    assert pairs[1][1] == []


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("{not json", "invalid JSON"),
        ('["a", []]', "expected a JSON object"),
        ('{"id": "a"}', "missing key(s) predictions"),
        ('{"id": 1, "predictions": []}', "'id' must be a string"),
        ('{"id": "a", "predictions": "Monday"}', "'predictions' must be a list"),
        ('{"id": "a", "predictions": [5]}', "must be a string or"),
        ('{"id": "a", "predictions": [{"text": "x", "label": "DATE"}]}', "label 'DATE'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    pred = write_lines(tmp_path / "pred.jsonl", [{"id": "b", "predictions": []}, bad_line])
    with pytest.raises(DataError, match=re.escape(message)) as info:
        read_predictions(pred)
    assert info.value.line == 2
    assert str(info.value).startswith(f"{pred}:2: ")


def test_duplicated_prediction_id_names_both_lines(tmp_path):
    pred = write_lines(tmp_path / "pred.jsonl", [{"id": "a", "predictions": []}] * 2)
    with pytest.raises(DataError, match=r"pred.jsonl:2: duplicated id 'a' \(first on line 1\)"):
        read_predictions(pred)


def test_id_missing_from_predictions_names_the_gold_line(tmp_path, gold_file):
    pred = write_lines(tmp_path / "pred.jsonl", [{"id": "a", "predictions": []}])
    with pytest.raises(DataError, match=r"gold.jsonl:2: id 'b' has no line in the prediction file"):
        load_pairs(gold_file, pred)


def test_id_not_in_gold_names_the_prediction_line(tmp_path, gold_file):
    pred = write_lines(tmp_path / "pred.jsonl", [
        {"id": "a", "predictions": []}, {"id": "b", "predictions": []}, {"id": "zz", "predictions": []},
    ])
    with pytest.raises(DataError, match=r"pred.jsonl:3: id 'zz' is not in the gold file"):
        load_pairs(gold_file, pred)


def test_gold_errors_name_the_line(tmp_path):
    duplicated = write_lines(tmp_path / "dup.jsonl", [GOLD_LINES[0], GOLD_LINES[0]])
    with pytest.raises(DataError, match=r"dup.jsonl:2: duplicated id 'a'"):
        read_gold(duplicated)
    broken_span = dict(GOLD_LINES[0], spans=[{"start": 0, "end": 2, "text": "Monday", "label": "TIMEX"}])
    with pytest.raises(DataError, match=r"bad.jsonl:1: "):
        read_gold(write_lines(tmp_path / "bad.jsonl", [broken_span]))
    empty = write_lines(tmp_path / "empty.jsonl", [])
    with pytest.raises(DataError, match="no records"):
        load_pairs(empty, empty)


def test_pair_predictions_keeps_gold_line_numbers(tmp_path, gold_file):
    gold = read_gold(gold_file)
    assert [number for number, _ in gold] == [1, 2]
    pairs = pair_predictions(gold, {"a": (1, []), "b": (2, [PredictedSpan("x")])}, gold_file, "p.jsonl")
    assert pairs[1][1] == [PredictedSpan("x")]
