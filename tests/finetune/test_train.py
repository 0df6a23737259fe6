"""Training configuration, schedule, metrics, and tiny real training runs (slow)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from src.data.schema import write_records
from src.finetune.align import EncodedSentence
from src.finetune.train import TrainConfig, make_compute_metrics, parse_overrides, schedule

from .conftest import make_records


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def restore_threads():
    """Training may set torch's thread count; give the rest of the session its own back."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_defaults_are_the_study_values():
    config = TrainConfig()
    assert (config.learning_rate, config.weight_decay, config.warmup_steps) == (2e-5, 0.01, 500)
    assert (config.num_train_epochs, config.train_batch_size, config.eval_batch_size) == (3, 16, 32)
    assert (config.eval_steps, config.early_stopping_patience) == (250, 3)


def test_params_block_and_overrides(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("seed: 1\nfinetune:\n  learning_rate: 3e-5\n  seed: 7\n  report_to: none\n", encoding="utf-8")
    config = TrainConfig.from_params(params, parse_overrides(["eval_steps=100", "num_train_epochs=2"]))
    assert config.learning_rate == pytest.approx(3e-5)  # YAML reads "3e-5" as a string; still a float here
    assert (config.seed, config.eval_steps, config.num_train_epochs, config.report_to) == (7, 100, 2.0, "none")
    assert TrainConfig.from_params(tmp_path / "params.yaml").seed == 7
    assert TrainConfig.from_dict({"num_threads": None}).num_threads is None
    (tmp_path / "empty.yaml").write_text("other: 1\n", encoding="utf-8")
    assert TrainConfig.from_params(tmp_path / "empty.yaml") == TrainConfig()
    (tmp_path / "shared.yaml").write_text("seed: 13\npaths:\n  prepared: elsewhere\nfinetune:\n  eval_steps: 5\n")
    shared = TrainConfig.from_params(tmp_path / "shared.yaml")
    assert (shared.seed, shared.data_dir, shared.eval_steps) == (13, "elsewhere", 5)


def test_per_model_values_sit_between_the_block_and_the_command_line(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(
        "finetune:\n  learning_rate: 2e-5\n  models:\n    minilm:\n      learning_rate: 1e-4\n      seed: 3\n",
        encoding="utf-8",
    )
    assert TrainConfig.from_params(params, model="smollm2").learning_rate == pytest.approx(2e-5)
    minilm = TrainConfig.from_params(params, model="minilm")
    assert (minilm.learning_rate, minilm.seed) == (pytest.approx(1e-4), 3)
    assert TrainConfig.from_params(params, {"seed": 9}, model="minilm").seed == 9
    params.write_text("finetune:\n  models:\n    minilm: 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="finetune.models must map"):
        TrainConfig.from_params(params, model="minilm")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"learning_rat": 1e-5}, "unknown key"),
        ({"seed": "x"}, "seed must be an integer"),
        ({"train_batch_size": 0}, "train_batch_size must be >= 1"),
        ({"report_to": "wandb"}, "report_to must be one of"),
        ({"full_determinism": "yes"}, "true or false"),
        ({"num_threads": 0}, "num_threads must be >= 1"),
    ],
)
def test_bad_values_are_named(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values, "params.yaml: finetune")
    with pytest.raises(ValueError, match="not key=value"):
        parse_overrides(["seed"])


def test_limit_accepts_null_for_dvc_templates():
    from src.finetune.train import main

    with pytest.raises(SystemExit):  # argparse rejects a malformed limit before any work
        main(["--model", "minilm", "--task", "timex", "--out", "x", "--limit", "seven"])


def test_mlflow_reporting_follows_the_tracking_uri(monkeypatch):
    assert not TrainConfig().reports_to_mlflow()
    assert TrainConfig(report_to="mlflow").reports_to_mlflow()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    assert TrainConfig().reports_to_mlflow()
    assert not TrainConfig(report_to="none").reports_to_mlflow()


def test_schedule_caps_warmup_and_evaluation_for_small_data():
    small = schedule(TrainConfig(), 469)  # the timex train split
    assert small == {"steps_per_epoch": 30, "total_steps": 90, "warmup_steps": 9, "eval_steps": 30}
    large = schedule(TrainConfig(), 200_000)
    assert large["warmup_steps"] == 500 and large["eval_steps"] == 250
    exact = schedule(TrainConfig(warmup_max_fraction=1.0), 469)
    assert exact["warmup_steps"] == 90
    assert schedule(TrainConfig(max_steps=7), 469)["total_steps"] == 7


def test_metrics_read_first_pieces_only():
    labels = ["O", "B-T", "I-T"]
    # sentence 0: words at positions 1, 2 (word 1 split over 2-3); sentence 1: one word, one missing
    encoded = [
        EncodedSentence({}, [1, 2], ["O", "B-T"]),
        EncodedSentence({}, [1, -1], ["B-T", "O"]),
    ]
    logits = np.full((2, 5, 3), -5.0)
    logits[0, 1, 0] = logits[0, 2, 1] = logits[0, 3, 0] = 5.0  # the non-first piece says O: ignored
    logits[1, 1, 0] = 5.0  # misses the second sentence's span
    metrics = make_compute_metrics(encoded, labels)(type("P", (), {"predictions": logits})())
    assert metrics == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3)}


@pytest.mark.slow
def test_tiny_training_run_lowers_the_loss_and_writes_a_loadable_checkpoint(tmp_path, restore_threads):
    from src.data.schema import Record
    from src.finetune.predict import TokenClassifier
    from src.finetune.train import main

    records = make_records(80, seed=1)
    write_records(tmp_path / "train.jsonl", records[:64])
    write_records(tmp_path / "val.jsonl", records[64:])
    out = tmp_path / "minilm-timex"
    started = time.perf_counter()
    code = main([
        "--model", "minilm", "--task", "timex", "--out", str(out),
        "--train-file", str(tmp_path / "train.jsonl"), "--val-file", str(tmp_path / "val.jsonl"),
        "--set", "learning_rate=3e-4", "--set", "train_batch_size=8", "--set", "eval_batch_size=16",
        "--set", "num_train_epochs=3", "--set", "logging_steps=2", "--set", "max_length=64",
        "--set", "early_stopping_patience=10", "--set", "num_threads=1",
    ])
    elapsed = time.perf_counter() - started
    assert code == 0
    summary = json.loads((out / "training_summary.json").read_text(encoding="utf-8"))
    losses = [entry["loss"] for entry in summary["log_history"] if "loss" in entry]
    assert len(losses) >= 6
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:2]), losses
    assert summary["steps"] == 24 and summary["schedule"]["warmup_steps"] == 2
    assert summary["best_val_f1"] is not None and 0.0 <= summary["best_val_f1"] <= 1.0
    assert summary["val_metrics"]["f1"] == summary["best_val_f1"]
    assert summary["train_examples_per_s"] > 0
    assert not (out / "checkpoints").exists()

    classifier = TokenClassifier.load(out)
    assert classifier.labels == ["O", "B-T", "I-T"] and classifier.max_length == 64
    text = "Sales rose 5 % in the third quarter after the merger ."
    [spans] = classifier.predict_spans([Record("t", "d", text, [], "s")])
    assert all(span in text for span in spans)
    print(f"tiny training run: {elapsed:.1f} s, best val F1 {summary['best_val_f1']:.3f}, predicted {spans}")


@pytest.mark.slow
def test_training_is_deterministic_given_the_seed(tmp_path, tiny_checkpoint):
    """Two runs with one seed give the same losses and weights (tiny random BERT, a few steps)."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer, set_seed

    from src.finetune.train import train_classifier

    records = make_records(40, seed=2)
    config = TrainConfig(learning_rate=1e-3, train_batch_size=8, num_train_epochs=2, logging_steps=1, max_length=24, seed=5)
    results = []
    for run in range(2):
        set_seed(config.seed)
        model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint)
        tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
        summary = train_classifier(model, tokenizer, records[:32], records[32:], "TIMEX", config, tmp_path / f"run{run}")
        weights = AutoModelForTokenClassification.from_pretrained(tmp_path / f"run{run}").state_dict()
        results.append(([e["loss"] for e in summary["log_history"] if "loss" in e], weights))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(results[0][1][k], results[1][1][k]) for k in results[0][1])


@pytest.mark.slow
def test_metrics_of_every_evaluation_land_in_mlflow(tmp_path, tiny_checkpoint, monkeypatch):
    import mlflow
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from src.finetune.train import train_classifier

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "finetune-test")
    records = make_records(40, seed=4)
    config = TrainConfig(learning_rate=1e-3, train_batch_size=8, num_train_epochs=3, logging_steps=1, max_length=24)
    model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    train_classifier(model, tokenizer, records[:32], records[32:], "TIMEX", config, tmp_path / "out", run_name="ft-test")
    assert mlflow.active_run() is None  # the Trainer's run was closed
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("finetune-test")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "ft-test"
    history = client.get_metric_history(run.info.run_id, "eval_f1")
    assert sorted(m.step for m in history) == [4, 8, 12]  # every epoch (4 steps) evaluated
    assert len(client.get_metric_history(run.info.run_id, "loss")) >= 10
