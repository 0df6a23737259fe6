"""TokenClassifier on a tiny random checkpoint, and the prediction command's file format."""

from __future__ import annotations

import json

import numpy as np
import pytest

from src.data.schema import Record, write_records
from src.finetune import predict as predict_module
from src.finetune.predict import TokenClassifier
from tests.helpers.finetune_data import long_document


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def classifier(tiny_checkpoint) -> TokenClassifier:
    return TokenClassifier.load(tiny_checkpoint)


def test_load_reads_the_label_map(classifier):
    assert classifier.labels == ["O", "B-T", "I-T"]
    assert classifier.span_label == "TIMEX"
    assert classifier.max_length == 24
    assert classifier.max_pieces == 22  # [CLS] and [SEP]


def test_word_probabilities(classifier):
    batch = [["The", "talks", "ended", "yesterday", "."], [], ["unbelievably"]]
    probs = classifier.predict_word_probs(batch)
    assert [p.shape for p in probs] == [(5, 3), (0, 3), (1, 3)]
    for p in probs:
        assert np.allclose(p.sum(axis=1), 1.0, atol=1e-5)
    # a word's probabilities do not depend on the other sentences of the batch
    alone = classifier.predict_word_probs([batch[0]])[0]
    assert np.allclose(alone, probs[0], atol=1e-5)


def test_too_long_sentence_is_refused(classifier):
    with pytest.raises(ValueError, match="window of 24"):
        classifier.predict_word_probs([["word"] * 40])


def test_spans_of_long_documents_are_windowed(classifier):
    text = long_document(30)
    records = [Record("long", "d", text, [], "s"), Record("empty", "d", "", [], "s")]
    spans = classifier.predict_span_objects(records, batch_size=4)
    assert spans[1] == []
    assert all(text[s.start : s.end] == s.text and s.label == "TIMEX" for s in spans[0])
    assert all(a.end <= b.start for a, b in zip(spans[0], spans[0][1:]))  # merged: no overlaps
    assert classifier.predict_spans(records, batch_size=4) == [[s.text for s in spans[0]], []]


def test_outside_bias_moves_the_decision_threshold_and_is_read_from_the_label_map(tiny_checkpoint, tmp_path):
    import shutil

    words = [["The", "talks", "ended", "yesterday", "after", "three", "long", "days", "."]]
    plain = TokenClassifier.load(tiny_checkpoint)
    probs = plain.predict_word_probs(words)[0]
    outside = plain.labels.index("O")
    for bias in (-3.0, 0.0, 3.0):
        plain.outside_bias = bias
        weighted = probs.copy()
        weighted[:, outside] *= np.exp(bias)
        assert plain.predict_tags(words)[0] == [plain.labels[k] for k in weighted.argmax(axis=1)]
    plain.outside_bias = 50.0  # O always wins: no span at all
    assert plain.predict_tags(words)[0] == ["O"] * len(words[0])
    plain.outside_bias = -50.0  # O never wins
    assert "O" not in plain.predict_tags(words)[0]
    copy = tmp_path / "biased"
    shutil.copytree(tiny_checkpoint, copy)
    label_map = json.loads((copy / "label_map.json").read_text())
    (copy / "label_map.json").write_text(json.dumps({**label_map, "outside_bias": 1.5}))
    assert TokenClassifier.load(copy).outside_bias == 1.5
    assert TokenClassifier.load(tiny_checkpoint).outside_bias == 0.0  # older checkpoints: no bias


def test_prediction_command_writes_the_scorer_format(tiny_checkpoint, tmp_path, synthetic_records):
    records = synthetic_records[:10] + [Record("doc-long", "d", long_document(15), [], "s")]
    source = tmp_path / "input.jsonl"
    write_records(source, records)
    output = tmp_path / "out" / "pred.jsonl"
    code = predict_module.main(["--checkpoint", str(tiny_checkpoint), "--input", str(source), "--output", str(output)])
    assert code == 0
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in lines] == [r.id for r in records]
    for line, record in zip(lines, records):
        assert set(line) == {"id", "predictions"}
        assert all(isinstance(p, str) and p in record.text for p in line["predictions"])


def test_load_rejects_a_folder_without_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        TokenClassifier.load(tmp_path)
