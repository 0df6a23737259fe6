"""Prediction files: validation errors name file and line; pairing never drops an id silently."""

from __future__ import annotations

import json
import re

import pytest

from src.core.errors import DataError
from src.scoring.metrics import PredictedSpan
from src.scoring.predictions import load_pairs, pair_predictions, read_gold, read_predictions

GOLD_LINES = [
    {
        "id": "a",
        "doc_id": "d",
        "text": "He left on Monday.",
        "source": "t",
        "spans": [{"start": 11, "end": 17, "text": "Monday", "label": "TIMEX"}],
    },
    {"id": "b", "doc_id": "d", "text": "Nothing.", "source": "t", "spans": []},
]


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.fixture
def gold_file(tmp_path):
    return write_lines(tmp_path / "gold.jsonl", GOLD_LINES)


def test_reads_strings_and_labelled_objects_and_pairs_in_gold_order(tmp_path, gold_file):
    pred = write_lines(
        tmp_path / "pred.jsonl",
        [
            {"id": "b", "predictions": [], "raw": "ignored extra key"},
            {"id": "a", "predictions": ["Monday", {"text": "left", "label": "EVENT"}, {"text": "x", "label": None}]},
            "",  # blank lines at the end are fine
            "  ",
        ],
    )
    predictions = read_predictions(pred)
    assert predictions["a"] == (2, [PredictedSpan("Monday"), PredictedSpan("left", "EVENT"), PredictedSpan("x")])
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
    pred = write_lines(
        tmp_path / "pred.jsonl",
        [
            {"id": "a", "predictions": []},
            {"id": "b", "predictions": []},
            {"id": "zz", "predictions": []},
        ],
    )
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


def test_blank_line_between_records_is_an_error(tmp_path):
    pred = write_lines(tmp_path / "pred.jsonl", [{"id": "a", "predictions": []}, "", {"id": "b", "predictions": []}])
    with pytest.raises(DataError, match=r"pred.jsonl:2: blank line inside the file"):
        read_predictions(pred)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "pred.jsonl: no records"),
        (b"\n\n", "pred.jsonl: no records"),
        (
            b'{"id": "a", "predictions": [], "predictions": ["x"]}\n',
            "pred.jsonl:1: invalid JSON (duplicated key 'predictions')",
        ),
        (
            b'{"id": "a", "predictions": [{"text": "x", "text": "y"}]}\n',
            "pred.jsonl:1: invalid JSON (duplicated key 'text')",
        ),
        (
            '{"id": "\u00e9", "predictions": []}\n'.encode("latin-1"),
            "pred.jsonl:1: not UTF-8 text (byte 0xe9 at column 9)",
        ),
        ('{"id": "a", "predictions": []}\n'.encode("utf-16"), "pred.jsonl:1: not UTF-8 text (byte 0xff at column 1)"),
        (b"[" * 100_000 + b"\n", "pred.jsonl:1: invalid JSON (nested too deeply)"),
        (b'{"id": "a", "predictions": [], "n": NaN}\n', "pred.jsonl:1: invalid JSON (NaN is not valid JSON"),
        (
            b'{"id": "a", "predictions": [], "n": 1e400}\n',
            "pred.jsonl:1: invalid JSON (number '1e400' is out of range)",
        ),
        (
            b'{"id": "a", "predictions": [], "n": ' + b"7" * 5000 + b"}\n",
            "invalid JSON (integer with 5000 digits is out of range)",
        ),
        (b'{"id": "a", "predictions": [true]}\n', "pred.jsonl:1: predictions[0] must be a string or"),
        (
            b'{"id": "a", "predictions": [{"text": "x", "label": "timex"}]}\n',
            "predictions[0].label 'timex' is not one of",
        ),
    ],
)
def test_reader_rejects_encodings_duplicate_keys_and_unbounded_numbers(tmp_path, content, message):
    pred = tmp_path / "pred.jsonl"
    pred.write_bytes(content)
    with pytest.raises(DataError) as info:
        read_predictions(pred)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "span, message",
    [
        ({"start": 11.0, "end": 17, "text": "Monday", "label": "TIMEX"}, "spans[0].start must be an integer, got 11.0"),
        ({"start": True, "end": 17, "text": "Monday", "label": "TIMEX"}, "spans[0].start must be an integer, got True"),
        ({"start": "11", "end": 17, "text": "Monday", "label": "TIMEX"}, "spans[0].start must be an integer, got '11'"),
        ({"start": -1, "end": 17, "text": "Monday", "label": "TIMEX"}, "spans[0].start must be >= 0"),
        ({"start": 11, "end": 99, "text": "Monday", "label": "TIMEX"}, "span 11-99 outside text of length 18"),
        ({"start": 17, "end": 11, "text": "Monday", "label": "TIMEX"}, "span 17-11 is empty or reversed"),
        ({"start": 17, "end": 18, "text": ".", "label": "TIMEX"}, "spans[0] '.' has no word character"),
        ({"start": 11, "end": 17, "text": "Monday"}, "spans[0] is missing key(s) label"),
    ],
)
def test_gold_span_fields_must_be_exact(tmp_path, span, message):
    gold = write_lines(tmp_path / "gold.jsonl", [dict(GOLD_LINES[0], spans=[span])])
    with pytest.raises(DataError) as info:
        read_gold(gold)
    assert str(info.value).startswith(f"{gold}:1: record 'a'")
    assert message in str(info.value)


def test_gold_span_listed_twice_is_an_error(tmp_path):
    twice = dict(GOLD_LINES[0], spans=GOLD_LINES[0]["spans"] * 2)
    gold = write_lines(tmp_path / "gold.jsonl", [GOLD_LINES[1], twice])
    with pytest.raises(DataError, match=r"gold.jsonl:2: record 'a' spans\[1\] repeats spans\[0\] \(11-17 TIMEX\)"):
        read_gold(gold)
