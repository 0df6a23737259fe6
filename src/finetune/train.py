"""Fine-tune a token classifier on a task's prepared train/val splits with the HF Trainer.

Usage::

    python -m src.finetune.train --model minilm --task timex --out models/finetuned/minilm-timex \\
        [--params params.yaml] [--limit 64] [--set learning_rate=3e-5 --set seed=1]

Configuration is read one way: :class:`TrainConfig` is an OmegaConf structured-config schema
(types only, every field mandatory); the values come from ``params.yaml`` -- the top-level
``seed`` and ``paths.prepared``, then the ``finetune`` block, then its ``models.<model>``
mapping, then ``--set key=value`` -- so each default is written once, in ``params.yaml``.

With ``include_negatives`` the training and validation sets hold, beside the prepared
sentences with targets, the target-free sentences of the same documents
(:mod:`src.finetune.negatives`), so that the tagger learns to predict nothing on running text;
the best model is chosen on validation F1 over those whole sentences.

The output folder holds the best model (by validation entity F1, seqeval), its tokenizer,
``label_map.json``, ``training_summary.json`` and, when the run is tracked,
``training_run.json`` (``run_id`` of the MLflow run, for the evaluation run to link to);
:meth:`TokenClassifier.load` reads it. Every tracked run is one MLflow run named
``{model}-{task}-train`` (tag ``kind=training``) in the project's store
(:func:`src.tracking.tracking_uri`): hyperparameters and data version as params, loss and
validation metrics per logging/evaluation step, training time, checkpoint path and weights hash.

Two schedule values adapt to small runs (both recorded in the summary):
warmup is ``min(warmup_steps, warmup_max_fraction * total steps)``, so a run shorter than
500 steps still leaves warmup (set ``warmup_max_fraction: 1.0`` for exactly 500 steps);
evaluation/checkpoint interval is ``min(eval_steps, steps per epoch)``, so every epoch is
evaluated at least once, and the last step is always evaluated.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from src.cli import optional_int
from src.data.schema import Record, read_records
from src.finetune.align import EncodedSentence, encode_tagged
from src.finetune.bio import record_to_bio, span_label_for_task, tag_set
from src.finetune.predict import model_window, save_label_map
from src.params import PARAMS_FILE

logger = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
RUN_FILE = "training_run.json"
REPORT_CHOICES = ("mlflow", "none")
DEFAULT_EXPERIMENT = "tempgen"  # conf/config.yaml mlflow.experiment, as src.finetune.evaluate
WEIGHT_PATTERNS = ("model*.safetensors", "pytorch_model*.bin")
#: log-weights of ``O`` tried on validation after training (calibrate_outside_bias)
OUTSIDE_BIAS_GRID = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)


@dataclass
class TrainConfig:
    """Fine-tuning hyperparameters: the schema only (no defaults: OmegaConf makes every field
    mandatory); the values live in ``params.yaml``.

    Beyond the usual Trainer ones: ``warmup_max_fraction`` caps warmup for short runs
    (module docstring); ``max_steps`` > 0 overrides the epochs (smoke runs); ``max_length``
    caps the pieces per sentence (also the inference window); ``full_determinism`` asks
    torch for deterministic kernels on top of the seeds; ``num_threads`` sets torch's CPU
    threads (null: torch's default); ``report_to`` is ``mlflow`` (one MLflow run per
    training) or ``none``; ``include_negatives`` adds the target-free sentences of the
    train/val documents; ``group_by_length`` batches sentences of similar length together
    (less padding, the same epochs; other batches, so other weights); ``seed`` and ``data_dir`` come from the top-level ``seed`` and
    ``paths.prepared`` (``data_dir`` holds ``{task}/train.jsonl`` and ``{task}/val.jsonl``).
    """

    learning_rate: float
    weight_decay: float
    warmup_steps: int
    warmup_max_fraction: float
    num_train_epochs: float
    max_steps: int
    train_batch_size: int
    eval_batch_size: int
    eval_steps: int
    early_stopping_patience: int
    max_length: int
    logging_steps: int
    full_determinism: bool
    calibrate_outside_bias: bool
    num_threads: int | None
    report_to: str
    include_negatives: bool
    group_by_length: bool
    seed: int
    data_dir: str

    def validate(self, where: str = "finetune") -> TrainConfig:
        """Range checks OmegaConf's types cannot express; returns the config."""
        if self.report_to not in REPORT_CHOICES:
            raise ValueError(f"{where}: report_to must be one of {REPORT_CHOICES}, got {self.report_to!r}")
        for name in ("train_batch_size", "eval_batch_size", "eval_steps", "logging_steps", "max_length", "num_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{where}: {name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_max_fraction <= 1.0:
            raise ValueError(f"{where}: warmup_max_fraction must be in [0, 1], got {self.warmup_max_fraction}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reports_to_mlflow(self) -> bool:
        return self.report_to == "mlflow"


def make_config(*layers: Mapping[str, Any], where: str = "finetune") -> TrainConfig:
    """Merge mappings (lowest precedence first) onto the schema; every field must end up set.

    Unknown keys, wrongly typed values and missing values are ValueErrors naming ``where``.
    """
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(TrainConfig), *[OmegaConf.create(dict(layer)) for layer in layers]
        )
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ValueError(f"{where}: {str(exc).splitlines()[0]}") from None
    assert isinstance(config, TrainConfig)
    return config.validate(where)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["learning_rate=1e-4", "seed=3"]`` -> a mapping (OmegaConf dot-list values)."""
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} is not key=value")
    return OmegaConf.to_container(OmegaConf.from_dotlist(list(items)))  # type: ignore[return-value]


def load_config(
    params: str | Path = PARAMS_FILE, overrides: Mapping[str, Any] | None = None, model: str | None = None
) -> TrainConfig:
    """The configuration of one training run, read from a params file.

    Precedence, lowest first: the file's top-level ``seed`` and ``paths.prepared`` (so
    neither is written twice), the ``finetune`` block, its ``models.<model>`` mapping
    (values one model needs, e.g. a higher learning rate for the small MiniLM), then
    ``overrides``.
    """
    values = OmegaConf.to_container(OmegaConf.load(params)) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{params}: not a mapping")
    block = values.get("finetune") or {}
    if not isinstance(block, dict):
        raise ValueError(f"{params}: 'finetune' must be a mapping")
    block = dict(block)
    per_model = block.pop("models", None) or {}
    if not isinstance(per_model, dict) or not all(isinstance(v, dict) for v in per_model.values()):
        raise ValueError(f"{params}: finetune.models must map model names to mappings")
    shared: dict[str, Any] = {}
    if "seed" in values:
        shared["seed"] = values["seed"]
    if isinstance(values.get("paths"), dict) and "prepared" in values["paths"]:
        shared["data_dir"] = values["paths"]["prepared"]
    model_values = per_model.get(model, {}) if model else {}
    return make_config(shared, block, model_values, overrides or {}, where=f"{params}: finetune")


def schedule(config: TrainConfig, n_train: int) -> dict[str, int]:
    """Total steps, effective warmup and evaluation interval for ``n_train`` examples."""
    steps_per_epoch = max(1, math.ceil(n_train / config.train_batch_size))
    total = config.max_steps if config.max_steps > 0 else math.ceil(steps_per_epoch * config.num_train_epochs)
    warmup = min(config.warmup_steps, int(config.warmup_max_fraction * total))
    eval_steps = min(config.eval_steps, steps_per_epoch, total)
    return {"steps_per_epoch": steps_per_epoch, "total_steps": total, "warmup_steps": warmup, "eval_steps": eval_steps}


class _SentenceDataset:
    """Encoded sentences as the list-like dataset the Trainer iterates."""

    def __init__(self, encoded: list[EncodedSentence]):
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.encoded[index].features


def encode_records(records: list[Record], label: str, tokenizer: Any, max_length: int) -> list[EncodedSentence]:
    """BIO-tag records (words split at gold boundaries) and align tags to pieces."""
    label2id = {tag: i for i, tag in enumerate(tag_set(label))}
    words_batch, tags_batch = [], []
    for record in records:
        words, _, tags = record_to_bio(record, label)
        words_batch.append(words)
        tags_batch.append(tags)
    return encode_tagged(tokenizer, words_batch, tags_batch, label2id, max_length)


def make_compute_metrics(encoded: list[EncodedSentence], labels: list[str]):
    """Entity precision/recall/F1 (seqeval) from first-piece predictions of each word."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    def compute(prediction: Any) -> dict[str, float]:
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        best = logits.argmax(axis=-1)
        gold, predicted = [], []
        for row, sentence in enumerate(encoded):
            gold.append(sentence.tags)
            predicted.append([labels[best[row, p]] if p >= 0 else "O" for p in sentence.first_pieces])
        return {
            "precision": precision_score(gold, predicted, zero_division=0),
            "recall": recall_score(gold, predicted, zero_division=0),
            "f1": f1_score(gold, predicted, zero_division=0),
        }

    return compute


def training_arguments(config: TrainConfig, plan: dict[str, int], checkpoint_dir: Path, run_name: str) -> Any:
    """The Trainer's arguments: AdamW + linear decay, step-wise eval/save, best model by val F1."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(checkpoint_dir),
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        optim="adamw_torch",
        lr_scheduler_type="linear",
        warmup_steps=plan["warmup_steps"],
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.train_batch_size,
        per_device_eval_batch_size=config.eval_batch_size,
        group_by_length=config.group_by_length,
        eval_strategy="steps",
        eval_steps=plan["eval_steps"],
        save_strategy="steps",
        save_steps=plan["eval_steps"],
        save_total_limit=2,
        save_only_model=True,
        load_best_model_at_end=True,
        metric_for_best_model="f1",
        greater_is_better=True,
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_first_step=True,
        report_to="none",  # MLflow: one run per training, opened by train_classifier (mlflow_metrics_callback)
        run_name=run_name,
        seed=config.seed,
        data_seed=config.seed,
        full_determinism=config.full_determinism,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )


#: Length grouping sorts windows of this many batches (transformers' default, 50, sorts 800
#: sentences at once: the short target-free ones then train in batches of their own).
LENGTH_GROUP_BATCHES = 4


def in_order_trainer_class() -> type:
    """The Trainer with evaluation batches in the validation set's order: ``group_by_length``
    also reorders evaluation in transformers 4.57, but :func:`make_compute_metrics` maps the
    predictions back to the validation sentences by position (reordered, every F1 read 0.0)."""
    from torch.utils.data import SequentialSampler
    from transformers import Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

    class WindowedLengthGroups(LengthGroupedSampler):
        def __iter__(self):
            grouped = get_length_grouped_indices(self.lengths, self.batch_size, LENGTH_GROUP_BATCHES, self.generator)
            return iter(grouped)

    class InOrderEvaluation(Trainer):
        def _get_eval_sampler(self, eval_dataset):
            return SequentialSampler(eval_dataset)

        def _get_train_sampler(self, train_dataset=None):
            if not self.args.group_by_length:
                return super()._get_train_sampler(train_dataset)
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            lengths = [len(dataset[i]["input_ids"]) for i in range(len(dataset))]
            return WindowedLengthGroups(self.args.train_batch_size, lengths=lengths)

    return InOrderEvaluation


def mlflow_metrics_callback() -> Any:
    """A TrainerCallback that logs every Trainer log (loss, learning rate, eval_*) into the active MLflow run."""
    from transformers import TrainerCallback

    class MlflowMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            import mlflow

            numeric = {
                k: float(v)
                for k, v in (logs or {}).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            }
            if numeric and mlflow.active_run() is not None:
                mlflow.log_metrics(numeric, step=state.global_step)

    return MlflowMetrics()


def weights_digest(directory: str | Path) -> str:
    """SHA-256 over the saved weight files of a checkpoint folder (names and bytes, sorted)."""
    directory = Path(directory)
    files = sorted({p for pattern in WEIGHT_PATTERNS for p in directory.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"{directory}: no weight files ({', '.join(WEIGHT_PATTERNS)})")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode("utf-8"))
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def training_run(config: TrainConfig, run_name: str, experiment: str, tracking_uri: str | None) -> Iterator[Any]:
    """The MLflow run of one training (None when ``report_to`` is ``none``), closed in a finally."""
    if not config.reports_to_mlflow():
        yield None
        return
    import mlflow

    from src.tracking import start_experiment

    start_experiment(experiment, tracking_uri)
    active = mlflow.start_run(run_name=run_name)
    status = "FAILED"
    try:
        mlflow.set_tags({"kind": "training"})
        yield active
        status = "FINISHED"
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM (main installs the handler)
        status = "KILLED"
        raise
    finally:
        mlflow.end_run(status=status)


def train_classifier(
    model: Any,
    tokenizer: Any,
    train_records: list[Record],
    val_records: list[Record],
    label: str,
    config: TrainConfig,
    out_dir: str | Path,
    run_name: str = "finetune",
    summary_extra: dict[str, Any] | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    tracking_uri: str | None = None,
    data_files: list[Path] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` and write the best checkpoint to ``out_dir``; returns the summary.

    With ``report_to: mlflow`` the training is one MLflow run (``run_name``, tag
    ``kind=training``) in ``tracking_uri`` (default: :func:`src.tracking.tracking_uri`) and
    its id is written to ``out_dir/training_run.json``; ``data_files`` give the data version.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).unlink(missing_ok=True)  # never leave a stale link to an earlier run
    with training_run(config, run_name, experiment, tracking_uri) as active:
        splits = (train_records, val_records)
        summary = _train(
            model, tokenizer, splits, label, config, out, run_name, summary_extra, tracked=active is not None
        )
        if active is not None:
            _log_training(active, summary, config, out, data_files or [], experiment)
    return summary


def _log_training(
    active: Any, summary: dict[str, Any], config: TrainConfig, out: Path, data_files: list[Path], experiment: str
) -> None:
    """Params, final metrics, tags and the summary of a finished training into its run; writes RUN_FILE."""
    import mlflow

    from src.tracking import data_version, git_commit

    digest = weights_digest(out)
    version = data_version([Path(p) for p in data_files]) if data_files else "unknown"
    extra = {
        k: v
        for k, v in summary.items()
        if k
        in (
            "model",
            "family",
            "task",
            "train_file",
            "val_file",
            "limit",
            "n_train",
            "n_val",
            "n_train_negatives",
            "n_val_negatives",
            "max_length",
        )
    }
    params = {
        **config.to_dict(),
        **{f"schedule.{k}": v for k, v in summary["schedule"].items()},
        **{("window" if k == "max_length" else k): v for k, v in extra.items()},
        "data_version": version,
        "git_commit": git_commit(),
    }
    mlflow.log_params(params)
    final = {
        "train_time_s": summary["train_time_s"],
        "eval_time_s": summary["eval_time_s"],
        "best_val_f1": summary["best_val_f1"],
        "best_step": summary["best_step"],
        "train_examples_per_s": summary["train_examples_per_s"],
        **{f"best_val_{k}": v for k, v in summary["val_metrics"].items()},
    }
    mlflow.log_metrics(
        {k: float(v) for k, v in final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    )
    mlflow.set_tags(
        {
            "model": summary.get("model", ""),
            "task": summary.get("task", ""),
            "checkpoint": str(out.resolve()),
            "weights_sha256": digest,
            "data_version": version,
        }
    )
    mlflow.log_text(json.dumps(summary, indent=1), "training/" + SUMMARY_FILE)
    link = {
        "run_id": active.info.run_id,
        "experiment_id": active.info.experiment_id,
        "experiment": experiment,
        "tracking_uri": mlflow.get_tracking_uri(),
        "run_name": active.info.run_name,
        "weights_sha256": digest,
        "data_version": version,
    }
    (out / RUN_FILE).write_text(json.dumps(link, indent=2) + "\n", encoding="utf-8")
    summary["mlflow_run_id"] = active.info.run_id
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def _train(
    model: Any,
    tokenizer: Any,
    splits: tuple[list[Record], list[Record]],
    label: str,
    config: TrainConfig,
    out: Path,
    run_name: str,
    summary_extra: dict[str, Any] | None,
    tracked: bool,
) -> dict[str, Any]:
    """The training itself: encode the (train, validation) ``splits``, run the Trainer, save the
    best model and the summary."""
    from transformers import DataCollatorForTokenClassification, EarlyStoppingCallback, TrainerCallback

    if config.num_threads is not None:
        import torch

        torch.set_num_threads(config.num_threads)
    train_records, val_records = splits
    if not train_records or not val_records:
        raise ValueError(f"need training and validation records (got {len(train_records)} and {len(val_records)})")
    labels = tag_set(label)
    if [model.config.id2label[i] for i in range(model.config.num_labels)] != labels:
        raise ValueError(f"the model's labels {model.config.id2label} are not {labels}")
    checkpoints = out / "checkpoints"
    max_length = model_window(model, tokenizer, config.max_length)
    train_set = encode_records(train_records, label, tokenizer, max_length)
    val_set = encode_records(val_records, label, tokenizer, max_length)
    plan = schedule(config, len(train_set))

    class EvaluateAtEnd(TrainerCallback):
        """The last step is evaluated and saved too, so the best-model choice sees it."""

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                control.should_evaluate = True
                control.should_save = True
            return control

    callbacks = [EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience), EvaluateAtEnd()]
    if tracked:
        callbacks.append(mlflow_metrics_callback())
    arguments = training_arguments(config, plan, checkpoints, run_name)

    trainer = in_order_trainer_class()(
        model=model,
        args=arguments,
        train_dataset=_SentenceDataset(train_set),
        eval_dataset=_SentenceDataset(val_set),
        data_collator=DataCollatorForTokenClassification(tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
        compute_metrics=make_compute_metrics(val_set, labels),
        callbacks=callbacks,
    )
    logger.info("training on %d sentences, validating on %d: %s", len(train_set), len(val_set), plan)
    started = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - started
    trainer.save_model(str(out))
    identity = {k: v for k, v in (summary_extra or {}).items() if k in ("model", "family", "task")}
    calibration = (
        calibrate_outside_bias(model, tokenizer, val_records, label, max_length)
        if config.calibrate_outside_bias
        else {}
    )
    bias = calibration.get("outside_bias", 0.0)
    save_label_map(out, labels, label, max_length, outside_bias=bias, **identity)
    best_step = _checkpoint_step(trainer.state.best_model_checkpoint)
    examples_seen = trainer.state.epoch * len(train_set)  # fractional epochs when stopped early
    eval_seconds = sum(entry.get("eval_runtime", 0.0) for entry in trainer.state.log_history)
    step_seconds = max(train_seconds - eval_seconds, 1e-9)
    summary = {
        **(summary_extra or {}),
        "span_label": label,
        "params": config.to_dict(),
        "schedule": plan,
        "max_length": max_length,
        "n_train": len(train_set),
        "n_val": len(val_set),
        "steps": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "best_val_f1": trainer.state.best_metric,
        "best_step": best_step,
        "val_metrics": _eval_entry(trainer.state.log_history, best_step),
        "outside_bias": bias,
        **calibration,
        "train_loss": result.training_loss,
        "train_time_s": train_seconds,
        "eval_time_s": eval_seconds,
        "train_examples": examples_seen,
        "train_examples_per_s": examples_seen / train_seconds if train_seconds > 0 else None,
        "train_examples_per_s_excluding_eval": examples_seen / step_seconds,
        "log_history": trainer.state.log_history,
    }
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(checkpoints, ignore_errors=True)
    return summary


def calibrate_outside_bias(
    model: Any, tokenizer: Any, val_records: list[Record], label: str, max_length: int
) -> dict[str, Any]:
    """The ``O`` weight (:attr:`TokenClassifier.outside_bias`) with the best validation LCS F1
    over whole sentences, target-free ones included; ties go to the smaller weight."""
    from src.finetune.predict import TokenClassifier
    from src.scoring.metrics import score_pairs

    classifier = TokenClassifier(model, tokenizer, tag_set(label), label, max_length, device=str(model.device))
    by_bias: dict[str, float] = {}
    for bias in OUTSIDE_BIAS_GRID:
        classifier.outside_bias = bias
        predictions = classifier.predict_spans(val_records)
        by_bias[f"{bias:g}"] = round(score_pairs(zip(val_records, predictions)).prf("lcs")[2], 6)
    best = min(OUTSIDE_BIAS_GRID, key=lambda b: (-by_bias[f"{b:g}"], abs(b)))
    logger.info("outside bias %g: validation LCS F1 %s", best, by_bias)
    return {"outside_bias": best, "val_lcs_f1_by_outside_bias": by_bias}


def _eval_entry(log_history: list[dict[str, Any]], step: int | None) -> dict[str, Any]:
    """The validation metrics logged at ``step`` (the kept model's), without the ``eval_`` prefix."""
    for entry in log_history:
        if entry.get("step") == step and "eval_f1" in entry:
            return {k.removeprefix("eval_"): v for k, v in entry.items() if k.startswith("eval_")}
    return {}


def _checkpoint_step(path: str | None) -> int | None:
    if not path:
        return None
    name = Path(path).name
    return int(name.rsplit("-", 1)[1]) if name.startswith("checkpoint-") else None


def run(
    model_name: str,
    task: str,
    out_dir: str | Path,
    config: TrainConfig,
    limit: int | None = None,
    train_file: str | Path | None = None,
    val_file: str | Path | None = None,
    params: str | Path | Mapping[str, Any] = PARAMS_FILE,
    experiment: str = DEFAULT_EXPERIMENT,
    tracking_uri: str | None = None,
) -> dict[str, Any]:
    """Load the model and the task's splits (plus negatives), train, and write the checkpoint.

    ``params`` (the parameter file) tells :func:`src.finetune.negatives.negative_sentences`
    how the prepared splits were built; negatives need the prepared files, not ``--train-file``.
    """
    from transformers import set_seed

    from src.finetune.models import get_spec, load_model, load_tokenizer
    from src.finetune.negatives import load_params, negative_sentences, with_negatives

    spec = get_spec(model_name)
    label = span_label_for_task(task)
    prepared = {
        "train": Path(config.data_dir) / task / "train.jsonl",
        "val": Path(config.data_dir) / task / "val.jsonl",
    }
    paths = {
        "train": Path(train_file) if train_file else prepared["train"],
        "val": Path(val_file) if val_file else prepared["val"],
    }
    for path in paths.values():
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (run the prepare stage first)")
    if config.include_negatives and (paths != prepared):
        raise ValueError(
            "include_negatives adds the target-free sentences of the prepared splits "
            f"({prepared['train']}, {prepared['val']}); with other files set include_negatives=false"
        )
    records, negatives = {}, {"train": 0, "val": 0}
    for split, path in paths.items():
        positives = read_records(path)
        if config.include_negatives:
            extra = negative_sentences(task, split, {**load_params(params), "paths": {"prepared": config.data_dir}})
            records[split] = with_negatives(positives, extra, limit)
            negatives[split] = sum(1 for r in records[split] if not r.spans)
        else:
            records[split] = positives[:limit] if limit is not None else positives
    set_seed(config.seed)  # the new classification head is initialised from this seed
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tag_set(label), tokenizer)
    run_name = f"{model_name}-{task}-train"
    extra = {
        "model": model_name,
        "family": spec.family,
        "task": task,
        "run_name": run_name,
        "train_file": str(paths["train"]),
        "val_file": str(paths["val"]),
        "limit": limit,
        "n_train_negatives": negatives["train"],
        "n_val_negatives": negatives["val"],
    }
    return train_classifier(
        model,
        tokenizer,
        records["train"],
        records["val"],
        label,
        config,
        out_dir,
        run_name=run_name,
        summary_extra=extra,
        experiment=experiment,
        tracking_uri=tracking_uri,
        data_files=list(paths.values()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fine-tune a BIO token classifier for one task.")
    parser.add_argument("--model", required=True, help="model choice (src.finetune.models.MODEL_SPECS)")
    parser.add_argument("--task", required=True, choices=["timex", "eventx"])
    parser.add_argument("--out", required=True, help="checkpoint folder to write")
    parser.add_argument(
        "--params",
        default=str(PARAMS_FILE),
        help="params.yaml with the 'finetune' block (default: the project's params.yaml)",
    )
    parser.add_argument(
        "--limit",
        type=optional_int,
        default=None,
        help="use only the first N train and N val records with targets (and the target-free "
        "sentences of their documents); 'null': all, for DVC templating",
    )
    parser.add_argument("--train-file", default=None, help="default: <data_dir>/<task>/train.jsonl")
    parser.add_argument("--val-file", default=None, help="default: <data_dir>/<task>/val.jsonl")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a finetune parameter (repeatable)",
    )
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="MLflow experiment")
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else mlruns/mlflow.db")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A terminated training (kill, a DVC or CI timeout) unwinds, so its MLflow run is closed as KILLED.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        config = load_config(args.params, parse_overrides(args.overrides), model=args.model)
        summary = run(
            args.model,
            args.task,
            args.out,
            config,
            args.limit,
            args.train_file,
            args.val_file,
            params=args.params,
            experiment=args.experiment,
            tracking_uri=args.tracking_uri,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    logger.info(
        "best validation F1 %.4f at step %s; %.1f s, %.1f examples/s; checkpoint in %s",
        summary["best_val_f1"] or 0.0,
        summary["best_step"],
        summary["train_time_s"],
        summary["train_examples_per_s"] or 0.0,
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
