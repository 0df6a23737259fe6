"""Training configuration, schedule, metrics, and tiny real training runs (slow)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from src.core.settings import PARAMS_FILE, load_params
from src.data.schema import write_records
from src.finetune.align import EncodedSentence
from src.finetune.hf_trainer import make_compute_metrics
from src.finetune.train_config import TrainConfig, load_config, make_config, parse_overrides, schedule
from src.rounding import rounded
from tests.helpers.finetune_data import LOCAL, make_synthetic_records, project_block, train_config

PREPARED = PARAMS_FILE.parent / "data" / "prepared"


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


def write_params(path: Path, text: str) -> Path:
    """A params file holding the project's finetune block, the keys of LOCAL and then ``text``."""
    block = {**project_block(), **LOCAL}
    extra = yaml.safe_load(text) or {}
    merged = {
        **{k: v for k, v in extra.items() if k != "finetune"},
        "finetune": {**block, **(extra.get("finetune") or {})},
    }
    path.write_text(yaml.safe_dump(merged), encoding="utf-8")
    return path


def test_params_yaml_holds_the_study_values_and_every_key():
    """The defaults live in params.yaml only: the schema has none, the file has them all."""
    assert all(f.default is dataclasses.MISSING or f.default == "???" for f in dataclasses.fields(TrainConfig))
    with pytest.raises(ValueError, match="missing mandatory value"):
        make_config({}, where="empty")
    study = load_config(PARAMS_FILE, model="roberta-base")
    assert (study.learning_rate, study.weight_decay, study.warmup_steps) == (2e-5, 0.01, 500)
    assert (study.num_train_epochs, study.train_batch_size, study.eval_batch_size) == (3, 16, 32)
    assert (study.eval_steps, study.early_stopping_patience) == (250, 3)
    assert study.include_negatives is True and study.report_to == "mlflow"
    for hub_model in ("gpt2", "flan-t5-small"):
        assert load_config(PARAMS_FILE, model=hub_model) == study  # the study's values for every hub model
    assert load_config(PARAMS_FILE, model="minilm").learning_rate == pytest.approx(1e-4)


def test_params_block_and_overrides(tmp_path):
    params = write_params(
        tmp_path / "params.yaml", "seed: 1\npaths: {prepared: p}\nfinetune:\n  learning_rate: 3e-5\n  seed: 7\n"
    )
    loaded = load_config(params, parse_overrides(["eval_steps=100", "num_train_epochs=2"]))
    assert loaded.learning_rate == pytest.approx(3e-5)  # YAML reads "3e-5" as a string; still a float here
    assert (loaded.seed, loaded.eval_steps, loaded.num_train_epochs, loaded.report_to) == (7, 100, 2.0, "none")
    assert load_config(params).seed == 7
    assert load_config(params, {"num_threads": None}).num_threads is None
    shared = load_config(
        write_params(tmp_path / "shared.yaml", "seed: 13\npaths:\n  prepared: elsewhere\n"), {"eval_steps": 5}
    )
    assert (shared.seed, shared.data_dir, shared.eval_steps) == (13, "elsewhere", 5)
    (tmp_path / "empty.yaml").write_text("other: 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.yaml: finetune: .*missing mandatory value"):
        load_config(tmp_path / "empty.yaml")


def test_per_model_values_sit_between_the_block_and_the_command_line(tmp_path):
    params = write_params(
        tmp_path / "params.yaml",
        "seed: 1\npaths: {prepared: p}\nfinetune:\n  learning_rate: 2e-5\n  models:\n    minilm:\n"
        "      learning_rate: 1e-4\n      seed: 3\n",
    )
    assert load_config(params, model="smollm2").learning_rate == pytest.approx(2e-5)
    minilm = load_config(params, model="minilm")
    assert (minilm.learning_rate, minilm.seed) == (pytest.approx(1e-4), 3)
    assert load_config(params, {"seed": 9}, model="minilm").seed == 9
    write_params(params, "seed: 1\npaths: {prepared: p}\nfinetune:\n  models:\n    minilm: 1\n")
    with pytest.raises(ValueError, match="finetune.models must map"):
        load_config(params, model="minilm")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"learning_rat": 1e-5}, "Key 'learning_rat' not in 'TrainConfig'"),
        ({"seed": "x"}, "could not be converted to Integer"),
        ({"seed": 1.5}, "could not be converted to Integer"),
        ({"train_batch_size": 0}, "train_batch_size must be >= 1"),
        ({"report_to": "wandb"}, "report_to must be one of"),
        ({"report_to": "auto"}, "report_to must be one of"),
        ({"full_determinism": "maybe"}, "is not a valid bool"),
        ({"num_threads": 0}, "num_threads must be >= 1"),
        ({"warmup_max_fraction": 2}, "warmup_max_fraction must be in"),
    ],
)
def test_bad_values_are_named(values, message):
    with pytest.raises(ValueError, match=f"test: .*{message}"):
        train_config(**values)
    with pytest.raises(ValueError, match="not key=value"):
        parse_overrides(["seed"])


def test_limit_accepts_null_for_dvc_templates():
    from src.finetune.train import main

    with pytest.raises(SystemExit):  # argparse rejects a malformed limit before any work
        main(["--model", "minilm", "--task", "timex", "--out", "x", "--limit", "seven"])


def test_mlflow_reporting_follows_report_to():
    assert train_config(report_to="mlflow").reports_to_mlflow()
    assert not train_config(report_to="none").reports_to_mlflow()


def test_schedule_caps_warmup_and_evaluation_for_small_data():
    small = schedule(train_config(), 469)  # the timex train split
    assert small == {"steps_per_epoch": 30, "total_steps": 90, "warmup_steps": 9, "eval_steps": 30}
    large = schedule(train_config(), 200_000)
    assert large["warmup_steps"] == 500 and large["eval_steps"] == 250
    exact = schedule(train_config(warmup_max_fraction=1.0), 469)
    assert exact["warmup_steps"] == 90
    assert schedule(train_config(max_steps=7), 469)["total_steps"] == 7


def test_negatives_need_the_prepared_files(tmp_path):
    from src.finetune.train import run

    write_records(tmp_path / "train.jsonl", make_synthetic_records(8))
    with pytest.raises(ValueError, match="include_negatives=false"):
        run(
            "minilm",
            "timex",
            tmp_path / "out",
            train_config(include_negatives=True, data_dir=str(PREPARED)),
            train_file=tmp_path / "train.jsonl",
            val_file=tmp_path / "train.jsonl",
        )


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

    records = make_synthetic_records(80, seed=1)
    write_records(tmp_path / "train.jsonl", records[:64])
    write_records(tmp_path / "val.jsonl", records[64:])
    out = tmp_path / "minilm-timex"
    started = time.perf_counter()
    code = main(
        [
            "--model",
            "minilm",
            "--task",
            "timex",
            "--out",
            str(out),
            "--train-file",
            str(tmp_path / "train.jsonl"),
            "--val-file",
            str(tmp_path / "val.jsonl"),
            "--set",
            "learning_rate=3e-4",
            "--set",
            "train_batch_size=8",
            "--set",
            "eval_batch_size=16",
            "--set",
            "num_train_epochs=3",
            "--set",
            "logging_steps=2",
            "--set",
            "max_length=64",
            "--set",
            "early_stopping_patience=10",
            "--set",
            "num_threads=1",
            "--set",
            "include_negatives=false",
            "--set",
            "report_to=none",
            "--set",
            "calibrate_outside_bias=true",
        ]
    )
    elapsed = time.perf_counter() - started
    assert code == 0
    summary = json.loads((out / "training_summary.json").read_text(encoding="utf-8"))
    losses = [entry["loss"] for entry in summary["log_history"] if "loss" in entry]
    assert len(losses) >= 6
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:2]), losses
    assert summary["steps"] == 24 and summary["schedule"]["warmup_steps"] == 2
    assert summary["best_val_f1"] is not None and 0.0 <= summary["best_val_f1"] <= 1.0
    assert summary["val_metrics"]["f1"] == summary["best_val_f1"]
    assert "train_examples_per_s" not in summary and "train_time_s" not in summary  # timings: log and MLflow
    assert not (out / "checkpoints").exists() and not (out / "training_args.bin").exists()

    # the O weight kept is the grid point with the best validation LCS F1 (ties: the smaller weight)
    by_bias = summary["val_lcs_f1_by_outside_bias"]
    grid = load_params().finetune["outside_bias_grid"]
    assert sorted(by_bias) == sorted(f"{b:g}" for b in grid)
    best = max(by_bias.values())
    assert by_bias[f"{summary['outside_bias']:g}"] == best
    assert abs(summary["outside_bias"]) == min(abs(float(b)) for b, f1 in by_bias.items() if f1 == best)

    classifier = TokenClassifier.load(out)
    assert classifier.labels == ["O", "B-T", "I-T"] and classifier.max_length == 64
    assert classifier.outside_bias == summary["outside_bias"]
    text = "Sales rose 5 % in the third quarter after the merger ."
    [spans] = classifier.predict_spans([Record("t", "d", text, [], "s")])
    assert all(span in text for span in spans)
    print(f"tiny training run: {elapsed:.1f} s, best val F1 {summary['best_val_f1']:.3f}, predicted {spans}")


def test_the_checkpoint_summary_keeps_no_timing_or_run_id():
    """``training_summary.json`` is a DVC output: two trainings that differ only in their timings
    and MLflow run write the same bytes; the timings stay in the returned summary (MLflow)."""
    from src.finetune.train import checkpoint_summary

    def summary(seconds: float, run_id: str) -> dict:
        return {
            "steps": 12,
            "best_val_f1": 0.5,
            "train_time_s": seconds,
            "eval_time_s": seconds / 10,
            "train_examples_per_s": 64 / seconds,
            "train_examples_per_s_excluding_eval": 70 / seconds,
            "mlflow_run_id": run_id,
            "log_history": [
                {"loss": 1.2, "step": 1, "epoch": 0.25},
                {"eval_f1": 0.5, "eval_runtime": seconds, "eval_samples_per_second": 9 / seconds, "step": 4},
                {"train_runtime": seconds, "train_steps_per_second": 4 / seconds, "train_loss": 1.0, "total_flos": 7},
            ],
        }

    first, second = checkpoint_summary(summary(0.8, "a" * 32)), checkpoint_summary(summary(1.7, "b" * 32))
    assert json.dumps(first) == json.dumps(second)
    assert first == {
        "steps": 12,
        "best_val_f1": 0.5,
        "log_history": [
            {"loss": 1.2, "step": 1, "epoch": 0.25},
            {"eval_f1": 0.5, "step": 4},
            {"train_loss": 1.0, "total_flos": 7},
        ],
    }


def _fake_checkpoint(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    return folder


@pytest.mark.slow  # an sqlite MLflow store takes ~10 s to create
def test_the_training_run_is_found_by_the_weights_hash(tmp_path, monkeypatch):
    """The evaluation run links to its training run through MLflow (tag ``weights_sha256``), not
    through a file in the checkpoint: the latest FINISHED training of those weights."""
    import mlflow

    from src.finetune.mlflow_logging import find_training_run, weights_digest

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    checkpoint = _fake_checkpoint(tmp_path / "ckpt", b"weights")
    other = _fake_checkpoint(tmp_path / "other", b"other weights")
    assert find_training_run(checkpoint, "none-yet", uri) is None  # no experiment: no link, no error
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("link-test")

    def training(digest: str, status: str, kind: str = "training") -> str:
        run = client.create_run(experiment, tags={"kind": kind, "weights_sha256": digest})
        client.set_terminated(run.info.run_id, status)
        return run.info.run_id

    assert find_training_run(checkpoint, "link-test", uri) is None
    older = training(weights_digest(checkpoint), "FINISHED")
    training(weights_digest(other), "FINISHED")
    training(weights_digest(checkpoint), "FAILED")
    training(weights_digest(checkpoint), "FINISHED", kind="evaluation")
    assert find_training_run(checkpoint, "link-test", uri) == older
    newer = training(weights_digest(checkpoint), "FINISHED")
    assert find_training_run(checkpoint, "link-test", uri) == newer
    assert find_training_run(other, "link-test", uri) not in (older, newer, None)


@pytest.mark.slow
def test_training_twice_writes_a_byte_identical_checkpoint(tmp_path, tiny_checkpoint, monkeypatch):
    """Two tracked trainings with one seed into the same (relative, as in dvc.yaml) folder write
    the same bytes in every file, although their MLflow runs and timings differ; the Trainer's
    ``training_args.bin`` (a dated, host-named logging folder) is not kept, and the evaluation
    run finds the latest training run by the weights hash."""
    import mlflow
    from transformers import AutoModelForTokenClassification, AutoTokenizer, set_seed

    from src.finetune.mlflow_logging import RUN_FILE, find_training_run
    from src.finetune.train import TRAINING_ARGS_FILE, train_classifier

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    records = make_synthetic_records(40, seed=2)
    config = train_config(
        learning_rate=1e-3,
        train_batch_size=8,
        num_train_epochs=2,
        logging_steps=1,
        max_length=24,
        seed=5,
        report_to="mlflow",
    )
    out = Path("models/finetuned/tiny-timex")
    runs = []
    for _ in range(2):
        set_seed(config.seed)
        model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint)
        tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
        summary = train_classifier(
            model, tokenizer, records[:32], records[32:], "TIMEX", config, out, "tiny-timex-train", None, "twice", uri
        )
        files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        runs.append((summary, files))
        time.sleep(0.01)  # distinct run start times
    (first, files), (second, again) = runs
    assert [e["loss"] for e in first["log_history"] if "loss" in e] == [
        e["loss"] for e in second["log_history"] if "loss" in e
    ]
    assert first["mlflow_run_id"] != second["mlflow_run_id"]
    assert first["train_time_s"] > 0 and second["train_time_s"] > 0  # measured, kept out of the folder
    assert {"model.safetensors", "config.json", "label_map.json", "training_summary.json"} <= set(files)
    assert TRAINING_ARGS_FILE not in files and RUN_FILE not in files and "checkpoints" not in files
    assert files.keys() == again.keys()
    assert [name for name in files if files[name] != again[name]] == []
    for name in files:
        assert b"train_time_s" not in files[name] and str(tmp_path).encode() not in files[name], name
        assert first["mlflow_run_id"].encode() not in files[name], name  # nor any run id
    assert find_training_run(out, "twice", uri) == second["mlflow_run_id"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    logged = client.get_run(second["mlflow_run_id"]).data.metrics["train_time_s"]
    assert logged == rounded(second["train_time_s"])  # as every training metric, to 6 significant digits


@pytest.mark.slow
def test_a_training_run_lands_in_mlflow_with_params_metrics_and_the_weights_hash(
    tmp_path, tiny_checkpoint, monkeypatch
):
    import mlflow
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from src.finetune.mlflow_logging import RUN_FILE, find_training_run, weights_digest
    from src.finetune.train import train_classifier

    monkeypatch.chdir(tmp_path)  # an sqlite store outside mlruns/ puts artifacts under ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the store src.tracking.store.tracking_uri() picks
    records = make_synthetic_records(40, seed=4)
    write_records(tmp_path / "train.jsonl", records[:32])
    write_records(tmp_path / "val.jsonl", records[32:])
    config = train_config(
        learning_rate=1e-3, train_batch_size=8, num_train_epochs=3, logging_steps=1, max_length=24, report_to="mlflow"
    )
    model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    out = tmp_path / "out"
    summary = train_classifier(
        model,
        tokenizer,
        records[:32],
        records[32:],
        "TIMEX",
        config,
        out,
        run_name="tiny-timex-train",
        experiment="finetune-test",
        summary_extra={"model": "tiny", "task": "timex"},
        data_files=[tmp_path / "train.jsonl", tmp_path / "val.jsonl"],
        evidence=tmp_path / "evidence/training/tiny-timex",
    )
    assert mlflow.active_run() is None  # the run was closed
    assert not (out / RUN_FILE).exists()  # the link is the weights hash in MLflow, not a file
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("finetune-test")
    [run] = client.search_runs([experiment.experiment_id])
    assert find_training_run(out, "finetune-test") == run.info.run_id == summary["mlflow_run_id"]
    assert run.info.run_name == "tiny-timex-train" and run.info.status == "FINISHED"
    assert run.data.tags["kind"] == "training"
    assert run.data.tags["weights_sha256"] == weights_digest(out)
    assert run.data.tags["checkpoint"] == str(out.resolve())
    params = run.data.params
    assert float(params["learning_rate"]) == pytest.approx(1e-3) and params["train_batch_size"] == "8"
    assert params["include_negatives"] == "False" and params["schedule.total_steps"] == "12"
    assert params["data_version"].startswith("raw:") and params["data_version"] == run.data.tags["data_version"]
    history = client.get_metric_history(run.info.run_id, "eval_f1")
    assert sorted(m.step for m in history) == [4, 8, 12]  # every epoch (4 steps) evaluated
    assert len(client.get_metric_history(run.info.run_id, "loss")) >= 10  # per logging step
    assert {"eval_precision", "eval_recall", "train_time_s", "best_val_f1"} <= set(run.data.metrics)
    assert run.data.metrics["train_time_s"] == rounded(summary["train_time_s"])  # logged to 6 significant digits
    logged_file = client.download_artifacts(run.info.run_id, "training/training_summary.json", str(tmp_path))
    on_disk = json.loads((out / "training_summary.json").read_text(encoding="utf-8"))
    assert json.loads(Path(logged_file).read_text(encoding="utf-8")) == on_disk  # the checkpoint's own file
    assert "train_time_s" not in on_disk and "mlflow_run_id" not in on_disk  # the timings live in the metrics

    # issue 38: the training travels as evidence and a restore rebuilds it, history and all
    from src.tracking.evidence import MACHINE_METRIC, restore_runs
    from src.tracking.keys import KEY_TAG

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    created, _ = restore_runs(tmp_path / "evidence", uri=fresh)
    copy = mlflow.MlflowClient(tracking_uri=fresh).get_run(created[0])
    assert copy.info.run_name == run.info.run_name and copy.data.tags["kind"] == "training"
    assert copy.data.tags[KEY_TAG] == run.data.tags[KEY_TAG] and "mlflow.parentRunId" not in copy.data.tags
    assert copy.data.params == {k: v for k, v in params.items() if k != "git_commit"}
    assert copy.data.metrics == {k: v for k, v in run.data.metrics.items() if not MACHINE_METRIC.search(k)}
    for name in ("loss", "eval_f1", "learning_rate"):
        original = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
        restored = mlflow.MlflowClient(tracking_uri=fresh).get_metric_history(copy.info.run_id, name)
        assert sorted((m.step, m.value) for m in restored) == sorted(original), name


@pytest.mark.slow
def test_an_untracked_run_writes_no_run_link(tmp_path, tiny_checkpoint):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from src.finetune.mlflow_logging import RUN_FILE
    from src.finetune.train import train_classifier

    out = tmp_path / "out"
    out.mkdir()
    (out / RUN_FILE).write_text("{}")  # a stale link from an earlier run is removed
    records = make_synthetic_records(24, seed=5)
    config = train_config(learning_rate=1e-3, train_batch_size=8, max_steps=2, logging_steps=1, max_length=24)
    model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    train_classifier(model, tokenizer, records[:16], records[16:], "TIMEX", config, out)
    assert not (out / RUN_FILE).exists()


@pytest.mark.slow
def test_an_interrupted_training_closes_its_run_as_killed(tmp_path, monkeypatch):
    import mlflow

    from src.finetune.mlflow_logging import training_run

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(KeyboardInterrupt):
        with training_run(train_config(report_to="mlflow"), "tiny-timex-train", "interrupted", uri):
            raise KeyboardInterrupt
    client = mlflow.MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("interrupted").experiment_id])
    assert run.info.status == "KILLED" and run.data.tags["kind"] == "training"
    assert mlflow.active_run() is None


def test_length_grouped_training_evaluates_in_the_validation_order(tmp_path, tiny_checkpoint):
    """With ``group_by_length`` transformers 4.57 reorders evaluation batches too, and the F1 of
    :func:`make_compute_metrics` (gold tags by position) read 0.0 on every real run; evaluation
    must see the validation sentences in their order."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification, Trainer

    from src.finetune.hf_trainer import (
        SentenceDataset as _SentenceDataset,
        encode_records,
        in_order_trainer_class,
        training_arguments,
    )

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    encoded = encode_records(make_synthetic_records(40, seed=3), "TIMEX", tokenizer, 24)
    lengths = [len(sentence.features["input_ids"]) for sentence in encoded]
    assert len(set(lengths)) > 3, "the check needs sentences of different lengths"
    config = train_config(group_by_length=True, eval_batch_size=4)
    plan = schedule(config, len(encoded))

    def evaluation_order(trainer_class) -> list[int]:
        trainer = trainer_class(
            model=AutoModelForTokenClassification.from_pretrained(tiny_checkpoint),
            args=training_arguments(config, plan, tmp_path / trainer_class.__name__, "order"),
            train_dataset=_SentenceDataset(encoded),
            eval_dataset=_SentenceDataset(encoded),
            data_collator=DataCollatorForTokenClassification(tokenizer, label_pad_token_id=-100),
            processing_class=tokenizer,
        )
        batches = trainer.get_eval_dataloader()
        return [int(row.sum()) for batch in batches for row in batch["attention_mask"]]

    assert evaluation_order(Trainer) != lengths  # what the plain Trainer does with group_by_length
    assert evaluation_order(in_order_trainer_class()) == lengths
