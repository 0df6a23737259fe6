"""Fine-tune a token classifier on a task's prepared train/val splits with the HF Trainer.

Usage::

    python -m src.finetune.train --model minilm --task timex --out models/finetuned/minilm-timex \\
        [--params params.yaml] [--limit 64] [--set learning_rate=3e-5 --set seed=1]

Hyperparameters live in :class:`TrainConfig` (defaults = the study's values), read from
the ``finetune`` block of ``params.yaml`` and overridable with ``--set key=value``.
The output folder holds the best model (by validation entity F1, seqeval), its tokenizer,
``label_map.json`` and ``training_summary.json``; :meth:`TokenClassifier.load` reads it.

Two schedule values adapt to small runs (both recorded in the summary):
warmup is ``min(warmup_steps, warmup_max_fraction * total steps)``, so a run shorter than
500 steps still leaves warmup (set ``warmup_max_fraction: 1.0`` for exactly 500 steps);
evaluation/checkpoint interval is ``min(eval_steps, steps per epoch)``, so every epoch is
evaluated at least once, and the last step is always evaluated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from src.cli import optional_int
from src.data.schema import Record, read_records
from src.finetune.align import EncodedSentence, encode_tagged
from src.finetune.bio import record_to_bio, span_label_for_task, tag_set
from src.finetune.predict import model_window, save_label_map

logger = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
REPORT_CHOICES = ("auto", "mlflow", "none")


@dataclass
class TrainConfig:
    """Fine-tuning hyperparameters; the defaults are the study's values.

    Attributes beyond the usual Trainer ones: ``warmup_max_fraction`` caps warmup for
    short runs (module docstring); ``max_steps`` > 0 overrides the epochs (smoke runs);
    ``max_length`` caps the pieces per sentence (also the inference window);
    ``full_determinism`` asks torch for deterministic kernels on top of the seeds;
    ``num_threads`` sets torch's CPU threads (null: torch's default; on a CPU shared with
    other busy processes 1 thread can be much faster than 2); ``report_to`` is ``auto``
    (MLflow when ``MLFLOW_TRACKING_URI`` is set), ``mlflow`` or ``none``; ``data_dir``
    holds ``{task}/train.jsonl`` and ``{task}/val.jsonl``.
    """

    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 500
    warmup_max_fraction: float = 0.1
    num_train_epochs: float = 3.0
    max_steps: int = -1
    train_batch_size: int = 16
    eval_batch_size: int = 32
    eval_steps: int = 250
    early_stopping_patience: int = 3
    seed: int = 42
    max_length: int = 512
    logging_steps: int = 50
    full_determinism: bool = True
    num_threads: int | None = None
    report_to: str = "auto"
    data_dir: str = "data/prepared"

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "finetune") -> "TrainConfig":
        """Build from a mapping; unknown keys and wrongly typed values are errors naming ``where``."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        converted = {}
        for key, value in values.items():
            converted[key] = _coerce(known[key], value, where)
        config = cls(**converted)
        config.validate(where)
        return config

    @classmethod
    def from_params(
        cls, path: str | Path, overrides: dict[str, Any] | None = None, model: str | None = None
    ) -> "TrainConfig":
        """The ``finetune`` block of a params file (absent block = defaults) plus overrides.

        Precedence, lowest first: the file's top-level ``seed`` and ``paths.prepared``
        (so neither is written twice), the block's keys, the block's ``models.<model>``
        mapping (values one model needs, e.g. a higher learning rate for the small
        MiniLM), then ``overrides``.
        """
        params = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        block = dict(params.get("finetune") or {})
        if not isinstance(params.get("finetune") or {}, dict):
            raise ValueError(f"{path}: 'finetune' must be a mapping")
        per_model = block.pop("models", None) or {}
        if not isinstance(per_model, dict) or not all(isinstance(v, dict) for v in per_model.values()):
            raise ValueError(f"{path}: finetune.models must map model names to mappings")
        shared: dict[str, Any] = {}
        if "seed" in params:
            shared["seed"] = params["seed"]
        if isinstance(params.get("paths"), dict) and "prepared" in params["paths"]:
            shared["data_dir"] = params["paths"]["prepared"]
        model_values = per_model.get(model, {}) if model else {}
        return cls.from_dict({**shared, **block, **model_values, **(overrides or {})}, where=f"{path}: finetune")

    def validate(self, where: str = "finetune") -> None:
        if self.report_to not in REPORT_CHOICES:
            raise ValueError(f"{where}: report_to must be one of {REPORT_CHOICES}, got {self.report_to!r}")
        for name in ("train_batch_size", "eval_batch_size", "eval_steps", "logging_steps", "max_length", "num_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{where}: {name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_max_fraction <= 1.0:
            raise ValueError(f"{where}: warmup_max_fraction must be in [0, 1], got {self.warmup_max_fraction}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reports_to_mlflow(self) -> bool:
        """MLflow gets the per-step metrics when asked, or in ``auto`` when a tracking URI is set."""
        return self.report_to == "mlflow" or (self.report_to == "auto" and bool(os.environ.get("MLFLOW_TRACKING_URI")))


def _coerce(spec: dataclasses.Field, value: Any, where: str) -> Any:
    type_name = str(spec.type)
    if type_name.endswith(" | None"):
        if value is None:
            return None
        type_name = type_name.removesuffix(" | None")
    kind = {"float": float, "int": int, "bool": bool, "str": str}.get(type_name)
    if kind is None:
        return value
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{where}: {spec.name} must be true or false, got {value!r}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{where}: {spec.name} must be an integer, got {value!r}")
    if kind is float and isinstance(value, str):
        # PyYAML reads "2e-5" (no dot) as a string: accept any spelling float() accepts.
        try:
            return float(value)
        except ValueError:
            pass
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{where}: {spec.name} must be a number, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{where}: {spec.name} must be a string, got {value!r}")
    return kind(value)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["lr=1e-4", "seed=3"]`` -> values parsed as YAML scalars."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not key=value")
        out[key.strip()] = yaml.safe_load(raw)
    return out


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
        report_to=["mlflow"] if config.reports_to_mlflow() else "none",
        run_name=run_name,
        seed=config.seed,
        data_seed=config.seed,
        full_determinism=config.full_determinism,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )


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
) -> dict[str, Any]:
    """Fine-tune ``model`` and write the best checkpoint to ``out_dir``; returns the summary."""
    from transformers import DataCollatorForTokenClassification, EarlyStoppingCallback, Trainer, TrainerCallback

    if config.num_threads is not None:
        import torch

        torch.set_num_threads(config.num_threads)
    if not train_records or not val_records:
        raise ValueError(f"need training and validation records (got {len(train_records)} and {len(val_records)})")
    labels = tag_set(label)
    if [model.config.id2label[i] for i in range(model.config.num_labels)] != labels:
        raise ValueError(f"the model's labels {model.config.id2label} are not {labels}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
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

    arguments = training_arguments(config, plan, checkpoints, run_name)
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=_SentenceDataset(train_set),
        eval_dataset=_SentenceDataset(val_set),
        data_collator=DataCollatorForTokenClassification(tokenizer, label_pad_token_id=-100),
        processing_class=tokenizer,
        compute_metrics=make_compute_metrics(val_set, labels),
        callbacks=[EarlyStoppingCallback(early_stopping_patience=config.early_stopping_patience), EvaluateAtEnd()],
    )
    logger.info("training on %d sentences, validating on %d: %s", len(train_set), len(val_set), plan)
    started = time.perf_counter()
    result = trainer.train()
    train_seconds = time.perf_counter() - started
    trainer.save_model(str(out))
    identity = {k: v for k, v in (summary_extra or {}).items() if k in ("model", "family", "task")}
    save_label_map(out, labels, label, max_length, **identity)
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


def run(model_name: str, task: str, out_dir: str | Path, config: TrainConfig, limit: int | None = None,
        train_file: str | Path | None = None, val_file: str | Path | None = None) -> dict[str, Any]:
    """Load the model and the task's splits, train, and write the checkpoint."""
    from transformers import set_seed

    from src.finetune.models import get_spec, load_model, load_tokenizer

    spec = get_spec(model_name)
    label = span_label_for_task(task)
    train_path = Path(train_file) if train_file else Path(config.data_dir) / task / "train.jsonl"
    val_path = Path(val_file) if val_file else Path(config.data_dir) / task / "val.jsonl"
    for path in (train_path, val_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (run the prepare stage first)")
    train_records, val_records = read_records(train_path), read_records(val_path)
    if limit is not None:
        train_records, val_records = train_records[:limit], val_records[:limit]
    set_seed(config.seed)  # the new classification head is initialised from this seed
    tokenizer = load_tokenizer(spec)
    model = load_model(spec, tag_set(label), tokenizer)
    extra = {"model": model_name, "family": spec.family, "task": task,
             "train_file": str(train_path), "val_file": str(val_path), "limit": limit}
    return train_classifier(model, tokenizer, train_records, val_records, label, config, out_dir,
                            run_name=f"finetune-{model_name}-{task}", summary_extra=extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fine-tune a BIO token classifier for one task.")
    parser.add_argument("--model", required=True, help="model choice (src.finetune.models.MODEL_SPECS)")
    parser.add_argument("--task", required=True, choices=["timex", "eventx"])
    parser.add_argument("--out", required=True, help="checkpoint folder to write")
    parser.add_argument("--params", default=None, help="params.yaml with a 'finetune' block (default: built-in values)")
    parser.add_argument("--limit", type=optional_int, default=None,
                        help="use only the first N train and N val records ('null': all, for DVC templating)")
    parser.add_argument("--train-file", default=None, help="default: <data_dir>/<task>/train.jsonl")
    parser.add_argument("--val-file", default=None, help="default: <data_dir>/<task>/val.jsonl")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a finetune parameter (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = parse_overrides(args.overrides)
    if args.params:
        config = TrainConfig.from_params(args.params, overrides, model=args.model)
    else:
        config = TrainConfig.from_dict(overrides, "--set")
    summary = run(args.model, args.task, args.out, config, args.limit, args.train_file, args.val_file)
    logger.info("best validation F1 %.4f at step %s; %.1f s, %.1f examples/s; checkpoint in %s",
                summary["best_val_f1"] or 0.0, summary["best_step"], summary["train_time_s"],
                summary["train_examples_per_s"] or 0.0, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
