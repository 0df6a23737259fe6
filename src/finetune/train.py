"""Fine-tune a token classifier on a task's prepared train/val splits with the HF Trainer.

Usage::

    python -m src.finetune.train --model minilm --task timex --out models/finetuned/minilm-timex \\
        [--params params.yaml] [--limit 64] [--set learning_rate=3e-5 --set seed=1]

The configuration comes from ``params.yaml`` (:mod:`src.finetune.train_config`: the
``finetune`` block, its ``models.<model>`` mapping, then ``--set key=value``).

With ``include_negatives`` the training and validation sets hold, beside the prepared
sentences with targets, the target-free sentences of the same documents
(:mod:`src.finetune.negatives`), so that the tagger learns to predict nothing on running text;
the best model is chosen on validation F1 over those whole sentences.

The output folder (a DVC output) holds the best model (by validation entity F1, seqeval), its
tokenizer, ``label_map.json`` and ``training_summary.json``; :meth:`TokenClassifier.load` reads
it. Its bytes depend only on code, data, params and seed, so a second training (another
machine's ``dvc repro`` of the same lock included) writes the same files: no timing, run id,
local path or the Trainer's ``training_args.bin`` (it pickles a dated, host-named logging
folder) is kept there. Every tracked run is one MLflow run named ``{model}-{task}-train`` (tag
``kind=training``) in the project's store (:func:`src.tracking.store.tracking_uri`): hyperparameters
and data version as params, loss and validation metrics per logging/evaluation step, training
time, checkpoint path and weights hash (tag ``weights_sha256``, by which the evaluation run
finds it: :func:`src.finetune.mlflow_logging.find_training_run`).

This module runs a training: it loads the model and the splits, hands them to the Trainer
(:mod:`src.finetune.hf_trainer`), calibrates the ``O`` weight (:mod:`src.finetune.calibration`),
writes the checkpoint and the summary, and logs the run (:mod:`src.finetune.mlflow_logging`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from src.cli import UNSET, setup_logging
from src.core.settings import PARAMS_FILE, load_sweep
from src.core.values import optional_int
from src.data.schema import Record, read_records
from src.finetune.bio import span_label_for_task, tag_set
from src.finetune.calibration import calibrate_outside_bias
from src.finetune.hf_trainer import (
    SentenceDataset,
    encode_records,
    in_order_trainer_class,
    make_compute_metrics,
    training_arguments,
)
from src.finetune.mlflow_logging import (
    DEFAULT_EXPERIMENT,
    RUN_FILE,
    SUMMARY_FILE,
    log_training,
    mlflow_metrics_callback,
    training_record,
    training_run,
    write_training_evidence,
)
from src.finetune.models import get_spec, load_model, load_tokenizer
from src.finetune.negatives import negative_sentences, params_mapping, with_negatives
from src.finetune.predict import model_window, save_label_map
from src.finetune.train_config import TrainConfig, load_config, parse_overrides, schedule
from src.launch import launch
from src.rounding import rounded
from src.study import TOKEN_CLASSIFIER_TASKS

logger = logging.getLogger(__name__)

TRAINING_ARGS_FILE = "training_args.bin"  # what Trainer.save_model writes beside the weights


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
    evidence: Path | str | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` and write the best checkpoint to ``out_dir`` (and the training's evidence
    folder to ``evidence``, for ``python -m src.evidence restore``); returns the summary
    (with the timings, which the file in ``out_dir`` leaves out: :func:`checkpoint_summary`).

    With ``report_to: mlflow`` the training is one MLflow run (``run_name``, tag
    ``kind=training``, the weights hash as tag ``weights_sha256``) in ``tracking_uri``
    (default: :func:`src.tracking.store.tracking_uri`), whose id the summary returns as
    ``mlflow_run_id``; ``data_files`` give the data version.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).unlink(missing_ok=True)  # an older version's link: not part of a checkpoint
    with training_run(config, run_name, experiment, tracking_uri) as active:
        splits = (train_records, val_records)
        summary = _train(
            model, tokenizer, splits, label, config, out, run_name, summary_extra, tracked=active is not None
        )
        record = training_record(summary, config, out, data_files or [], run_name)
        if active is not None:
            log_training(record, out)
            summary["mlflow_run_id"] = active.info.run_id
    if evidence is not None:
        write_training_evidence(Path(evidence), record, run_name, experiment, summary, out)
    return summary


#: Summary keys that measure time, not the model: MLflow metrics and log lines, never the checkpoint.
TIMING_KEYS = ("train_time_s", "eval_time_s", "train_examples_per_s", "train_examples_per_s_excluding_eval")
#: The Trainer's own timing fields in ``log_history`` (``train_runtime``, ``eval_samples_per_second``, ...).
TIMING_SUFFIXES = ("_runtime", "_per_second")


def checkpoint_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """What ``training_summary.json`` keeps of a summary: everything the code, data, params and
    seed determine, without timings (:data:`TIMING_KEYS`, the Trainer's ``*_runtime`` and
    ``*_per_second`` log fields) or the MLflow run id, so the same training writes the same bytes
    (written with its floats rounded: :mod:`src.rounding`)."""
    kept = {k: v for k, v in summary.items() if k not in TIMING_KEYS and k != "mlflow_run_id"}
    if "log_history" in kept:
        kept["log_history"] = [
            {k: v for k, v in entry.items() if not k.endswith(TIMING_SUFFIXES)} for entry in kept["log_history"]
        ]
    return kept


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

    trainer = in_order_trainer_class(config.length_group_batches)(
        model=model,
        args=arguments,
        train_dataset=SentenceDataset(train_set),
        eval_dataset=SentenceDataset(val_set),
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
    (out / TRAINING_ARGS_FILE).unlink(missing_ok=True)  # pickled arguments: a dated, host-named logging_dir
    identity = {k: v for k, v in (summary_extra or {}).items() if k in ("model", "family", "task")}
    calibration = (
        calibrate_outside_bias(model, tokenizer, val_records, label, max_length, list(config.outside_bias_grid))
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
    (out / SUMMARY_FILE).write_text(json.dumps(rounded(checkpoint_summary(summary)), indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(checkpoints, ignore_errors=True)
    return summary


def _eval_entry(log_history: list[dict[str, Any]], step: int | None) -> dict[str, Any]:
    """The validation metrics logged at ``step`` (the kept model's), without the ``eval_`` prefix
    and without the Trainer's timings (``eval_runtime``, ``eval_*_per_second``)."""
    for entry in log_history:
        if entry.get("step") == step and "eval_f1" in entry:
            return {
                k.removeprefix("eval_"): v
                for k, v in entry.items()
                if k.startswith("eval_") and not k.endswith(TIMING_SUFFIXES)
            }
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
    evidence: Path | str | None = None,
) -> dict[str, Any]:
    """Load the model and the task's splits (plus negatives), train, and write the checkpoint
    (and the training's evidence folder to ``evidence``).

    ``params`` (the parameter file) tells :func:`src.finetune.negatives.negative_sentences`
    how the prepared splits were built; negatives need the prepared files, not ``--train-file``.
    """
    from transformers import set_seed

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
            extra = negative_sentences(task, split, {**params_mapping(params), "paths": {"prepared": config.data_dir}})
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
        evidence=evidence,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fine-tune a BIO token classifier for one task.")
    parser.add_argument("--model", required=True, help="model choice (src.finetune.models.MODEL_SPECS)")
    parser.add_argument("--task", required=True, choices=TOKEN_CLASSIFIER_TASKS)
    parser.add_argument("--out", required=True, help="checkpoint folder to write")
    parser.add_argument(
        "--params",
        default=str(PARAMS_FILE),
        help="params.yaml with the 'finetune' block (default: the project's params.yaml)",
    )
    parser.add_argument(
        "--limit",
        type=optional_int,
        default=UNSET,
        help="use only the first N train and N val records with targets (and the target-free "
        "sentences of their documents); 'null': all; default: the --sweep profile's train_limit, else all",
    )
    parser.add_argument("--sweep", default=None, help="the sweep profile whose sweep.train_limit applies (dvc.yaml)")
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
    parser.add_argument(
        "--evidence", default=None, help="write the training run's evidence folder here (a DVC output; restorable)"
    )
    args = parser.parse_args(argv)
    if args.limit is UNSET:
        args.limit = load_sweep(args.sweep).train_limit if args.sweep else None
    setup_logging(timestamps=True)
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
            evidence=args.evidence,
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
    launch(main)
