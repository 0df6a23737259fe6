"""Target-free sentences of the training documents: where they come from, and what they teach."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from src.data.schema import Record, read_records
from src.finetune.negatives import negative_sentences, sentence_pool, with_negatives
from tests.helpers.paths import REPO_ROOT
from tests.helpers.records import make_record

PARAMS = REPO_ROOT / "params.yaml"


def project_params(**data_changes) -> dict:
    """params.yaml with every corpus and data path absolute (tests may run from any folder)."""
    params = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    params["paths"] = {**params["paths"], "prepared": str(REPO_ROOT / params["paths"]["prepared"])}
    data = dict(params["data"])
    for key in ("timebank_dir", "aquaint_dir", "e3c_dir"):
        data[key] = str(REPO_ROOT / data[key])
    params["data"] = {**data, **data_changes}
    return params


@pytest.fixture(scope="module")
def params(tmp_path_factory) -> dict:
    """The project's params; without data/prepared (a fresh clone, CI), prepare runs into a temp folder."""
    values = project_params()
    if not Path(values["data"]["timebank_dir"]).is_dir():
        pytest.skip("needs data/raw (dvc pull data.dvc)")
    if not Path(values["paths"]["prepared"]).is_dir():
        import subprocess
        import sys

        folder = tmp_path_factory.mktemp("prepared")
        values["paths"] = {**values["paths"], "prepared": str(folder)}
        params_file = folder / "params.yaml"
        params_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        subprocess.run(
            [sys.executable, "-m", "src.data.prepare", "--params", str(params_file)],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return values


def prepared(params: dict, task: str, name: str) -> list[Record]:
    return read_records(Path(params["paths"]["prepared"]) / task / f"{name}.jsonl")


@pytest.mark.parametrize("task", ["timex", "eventx"])
def test_negatives_come_from_the_training_documents_only(params, task):
    label = {"timex": "TIMEX", "eventx": "EVENT"}[task]
    test_docs = {r.doc_id for name in ("base", "len") for r in prepared(params, task, name)}
    for split in ("train", "val"):
        negatives = negative_sentences(task, split, params)
        positives = prepared(params, task, split)
        assert negatives and all(not r.spans for r in negatives)
        assert not {r.id for r in negatives} & {r.id for r in positives}
        assert not {r.doc_id for r in negatives} & test_docs  # never a base or len test document
        # together they are every sentence of the split's documents, and none of those holds a target
        pool = {r.id: r for r in sentence_pool(split, params)}
        assert {r.id for r in negatives} | {r.id for r in positives} == set(pool)
        assert all(not any(s.label == label for s in pool[r.id].spans) for r in negatives)
        assert {r.doc_id for r in positives} <= {r.doc_id for r in pool.values()}
    train_docs = {r.doc_id for r in negative_sentences(task, "train", params)}
    assert not train_docs & {r.doc_id for r in negative_sentences(task, "val", params)}


def test_sentences_are_rebuilt_exactly_as_prepared(params):
    """The sentence records of the pool carry prepare's ids and texts: the positives match train.jsonl."""
    pool = {r.id: r for r in sentence_pool("train", params)}
    for record in prepared(params, "timex", "train"):
        assert pool[record.id].text == record.text


def test_a_prepared_file_from_other_parameters_is_refused(params):
    other = {**params, "seed": params["seed"] + 1}
    with pytest.raises(ValueError, match="re-run the prepare stage"):
        negative_sentences("timex", "val", other)
    with pytest.raises(ValueError, match="splits"):
        negative_sentences("timex", "base", params)


def test_with_negatives_keeps_document_order_and_limits_by_positive():
    def record(doc: str, index: int, target: bool) -> Record:
        text, spans = ("on Monday", ["Monday"]) if target else ("nothing here", [])
        return make_record(f"{doc}#s{index}", text, spans, source="t")

    positives = [record("a", 0, True), record("a", 10, True), record("b", 1, True)]
    negatives = [record("a", 2, False), record("b", 0, False), record("c", 0, False)]
    assert [r.id for r in with_negatives(positives, negatives)] == ["a#s0", "a#s2", "a#s10", "b#s0", "b#s1", "c#s0"]
    # limit: the first positives, and the negatives of their documents
    assert [r.id for r in with_negatives(positives, negatives, limit=2)] == ["a#s0", "a#s2", "a#s10"]
    with pytest.raises(ValueError, match="both with and without"):
        with_negatives(positives, [record("a", 0, False)])


def test_training_and_validation_data_hold_the_negatives(params, monkeypatch, tmp_path):
    """What train.run hands to the Trainer: positives plus the target-free sentences (model not trained)."""
    from src.finetune import train

    seen = {}

    def fake_train(model, tokenizer, train_records, val_records, label, config, out_dir, **kwargs):
        seen.update(train=train_records, val=val_records, extra=kwargs["summary_extra"])
        return {}

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(train, "train_classifier", fake_train)
    monkeypatch.setattr(train, "load_model", lambda spec, labels, tokenizer: None)
    config = train.load_config(
        PARAMS, {"include_negatives": True, "report_to": "none", "data_dir": params["paths"]["prepared"]}
    )
    train.run("minilm", "timex", tmp_path / "out", config, params=params)
    for split in ("train", "val"):
        ids = {r.id for r in seen[split]}
        assert {r.id for r in prepared(params, "timex", split)} <= ids
        assert {r.id for r in negative_sentences("timex", split, params)} <= ids
        assert seen["extra"][f"n_{split}_negatives"] == sum(1 for r in seen[split] if not r.spans) > 0
    train.run("minilm", "timex", tmp_path / "out", config, limit=10, params=params)
    positives = [r for r in seen["train"] if r.spans]
    assert len(positives) == 10 and {r.doc_id for r in seen["train"]} == {r.doc_id for r in positives}
    off = train.load_config(
        PARAMS, {"include_negatives": False, "report_to": "none", "data_dir": params["paths"]["prepared"]}
    )
    train.run("minilm", "timex", tmp_path / "out", off, params=params)
    assert all(r.spans for r in seen["train"]) and seen["extra"]["n_train_negatives"] == 0


@pytest.mark.slow
def test_a_tagger_trained_with_negatives_stays_silent_on_target_free_sentences(params, tmp_path):
    """48 timex sentences (+ the target-free ones of their documents) vs the 48 alone, same steps.

    Scored on target-free sentences neither run saw (training documents beyond the 48
    sentences' ones): the share of sentences in which the tagger finds a (spurious) time
    expression, and the mean over sentences of the highest non-O probability of a word (a
    continuous, steadier measure of the same tendency).
    """
    import numpy as np
    import torch
    from transformers import set_seed

    from src.data.text import word_offsets
    from src.finetune.bio import tag_set
    from src.finetune.models import get_spec, load_model, load_tokenizer
    from src.finetune.predict import TokenClassifier
    from src.finetune.train import load_config, train_classifier

    threads = torch.get_num_threads()
    positives = prepared(params, "timex", "train")[:48]
    seen_docs = {r.doc_id for r in positives}
    train_negatives = negative_sentences("timex", "train", params)
    target_free = [r for r in train_negatives if r.doc_id not in seen_docs][:300]
    val_negatives = negative_sentences("timex", "val", params)[:8]
    val = prepared(params, "timex", "val")[:8] + val_negatives  # small: evaluation stays cheap
    config = load_config(
        PARAMS,
        {
            "include_negatives": False,
            "report_to": "none",
            "data_dir": params["paths"]["prepared"],
            "learning_rate": 2e-4,
            "max_steps": 60,
            "train_batch_size": 16,
            "early_stopping_patience": 100,
            "logging_steps": 10,
            "num_threads": 2,  # the tendency, not a byte-identical model: CI's two cores halve its time
            "max_length": 128,
            "seed": 13,
        },
        model="minilm",
    )
    rates, peaks = {}, {}
    try:
        for include in (False, True):
            train_records = with_negatives(positives, train_negatives, limit=48) if include else positives
            set_seed(config.seed)
            spec = get_spec("minilm")
            tokenizer = load_tokenizer(spec)
            model = load_model(spec, tag_set("TIMEX"), tokenizer)
            out = tmp_path / f"negatives-{include}"
            train_classifier(model, tokenizer, train_records, val, "TIMEX", config, out)
            classifier = TokenClassifier.load(out)
            predicted = classifier.predict_spans(target_free)
            rates[include] = sum(1 for spans in predicted if spans) / len(target_free)
            words = [[r.text[s:e] for s, e in word_offsets(r.text)] for r in target_free]
            outside = classifier.labels.index("O")
            probs = classifier.predict_word_probs(words)
            peaks[include] = float(np.mean([1.0 - p[:, outside].min() for p in probs if len(p)]))
    finally:
        torch.set_num_threads(threads)
    print(
        f"{len(target_free)} target-free sentences: share with a predicted span {rates[False]:.3f} (positives "
        f"only) vs {rates[True]:.3f} (with negatives); mean peak non-O probability {peaks[False]:.3f} vs "
        f"{peaks[True]:.3f}"
    )
    assert rates[True] < rates[False]
    assert peaks[True] <= 0.8 * peaks[False]
