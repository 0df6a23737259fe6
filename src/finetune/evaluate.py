"""Evaluate a fine-tuned model's checkpoints on every dataset of their tasks, logged like a prompted run.

``python -m src.finetune.evaluate --model minilm`` loads ``models/finetuned/{model}-{task}/``
for each task, predicts every dataset of the task (long documents windowed) and hands the
predictions to the one evaluation runner (:mod:`src.tracking.evaluation`), which logs the MLflow
run ``{model}-finetuned`` (strategy ``finetuned``) with the same metrics and artifacts as
``src.run``, tagged with the training run of each checkpoint.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from src import study
from src.cli import MAX_RESAMPLES, UNSET, OneLineArgumentParser, bounded_int, seed_type, setup_logging
from src.core.locate import project_relative
from src.core.settings import config_default, load_params, load_sweep
from src.core.values import optional_int
from src.data.schema import read_records
from src.data.splits import subset_by_id
from src.finetune.mlflow_logging import find_training_run, weights_digest
from src.finetune.models import MODEL_SPECS
from src.finetune.predict import TokenClassifier
from src.launch import launch
from src.scoring.evaluate import InstanceOutput
from src.scoring.system import DatasetPlan, ScoringOptions, SystemOutput
from src.tracking.evaluation import RunRecord, evaluate_configuration, write_summary
from src.tracking.keys import KEY_TAG
from src.tracking.store import (
    data_version,
    default_experiment,
    git_commit,
    log_file_artifact,
    tracking_uri as resolve_uri,
)

log = logging.getLogger("src.finetune.evaluate")

DEFAULT_DATASETS = tuple(
    name for name in study.DATASET_ORDER if set(study.TOKEN_CLASSIFIER_TASKS) <= set(study.DATASETS[name].tasks)
)


def checkpoint_dir(root: Path, model: str, task: str) -> Path:
    """Where the finetune stage writes the checkpoint of ``model`` on ``task``."""
    return root / f"{model}-{task}"


def count_parameters(classifier: TokenClassifier) -> float:
    """Model size in billions of parameters (for the size analyses)."""
    return sum(p.numel() for p in classifier.model.parameters()) / 1e9


class FinetunedSystem:
    """One token classifier per task; each dataset is predicted by its task's classifier."""

    def __init__(self, checkpoints: dict[str, Path], batch_size: int) -> None:
        self.checkpoints = checkpoints
        self.batch_size = batch_size
        self.classifiers = {task: TokenClassifier.load(path) for task, path in checkpoints.items()}

    def produce(self, plan: DatasetPlan) -> SystemOutput:
        started = time.perf_counter()
        predicted = self.classifiers[plan.task].predict_spans(plan.records, batch_size=self.batch_size, progress=True)
        outputs = [InstanceOutput(predictions) for predictions in predicted]
        return SystemOutput(outputs, {}, {"latency_s": time.perf_counter() - started})


def training_runs(checkpoints: dict[str, Path], experiment: str, tracking_uri: str | None) -> dict[str, str]:
    """``training_run.{task}`` tags (the run id, this store's history) and ``training_key.{task}``
    tags (its key, kept in the evidence): the finished MLflow run that trained each checkpoint,
    found by the checkpoint's weights hash (none when the store does not hold it, e.g. after a
    ``dvc pull``)."""
    from mlflow.tracking import MlflowClient

    tags = {}
    for task, path in checkpoints.items():
        run_id = find_training_run(path, experiment, tracking_uri)
        if run_id is not None:
            tags[f"training_run.{task}"] = run_id
            key = MlflowClient(resolve_uri(tracking_uri)).get_run(run_id).data.tags.get(KEY_TAG)
            if key:
                tags[f"training_key.{task}"] = key
    return tags


def evaluate_model(args: argparse.Namespace) -> tuple[RunRecord, Any]:
    """Predict, score and log every (task, dataset); returns the run record and outcome."""
    spec = MODEL_SPECS[args.model]
    files = [
        (task, name, Path(study.dataset_path(str(args.prepared), str(args.derived), task, name)))
        for task in args.tasks
        for name in args.datasets
    ]
    missing = [str(path) for _, _, path in files if not path.exists()]
    if missing:
        raise FileNotFoundError(f"dataset file(s) not found: {', '.join(missing)} (run `dvc repro` first)")
    checkpoints = {task: checkpoint_dir(args.checkpoints, args.model, task) for task in args.tasks}
    system = FinetunedSystem(checkpoints, args.batch_size)
    size = round(count_parameters(next(iter(system.classifiers.values()))), 4)
    record = RunRecord(
        f"{args.model}-finetuned",
        "finetuned",
        args.model,
        study.FINETUNED,
        params={
            "model_id": spec.location or spec.gguf_file,
            "family": spec.family,
            "architecture": "dense",
            "params_total_b": size,
            "params_active_b": size,
            "inductive_plus": False,
            "seed": args.seed,
            "limit": args.limit,
            # what else changes a number, so in the key (src/tracking/keys.py): the weights and the scoring
            "weights_sha256": ",".join(f"{t}:{weights_digest(p)[:16]}" for t, p in sorted(checkpoints.items())),
            "resamples": args.resamples,
            "scoring_variants": ",".join(args.variants) or "paper",
            "git_commit": git_commit(),
            "data_version": data_version([path for _, _, path in files]),
        },
        tags=training_runs(checkpoints, args.experiment, args.tracking_uri),
        profile=args.profile,
    )
    plans = [
        DatasetPlan(task, name, path, subset_by_id(read_records(path), args.limit, args.seed))
        for task, name, path in files
    ]

    summaries = {task: path / "training_summary.json" for task, path in checkpoints.items()}
    summaries = {task: path for task, path in summaries.items() if path.exists()}

    def log_training_summaries() -> None:
        for task, path in summaries.items():
            log_file_artifact(path, f"training/{task}.json")

    # the restore logs them again from the pulled checkpoints (only paths inside the project travel)
    restorable = [(project_relative(path), f"training/{task}.json") for task, path in summaries.items()]

    scoring = ScoringOptions(args.resamples, args.seed, False, tuple(args.variants))
    outcome = evaluate_configuration(
        record,
        plans,
        system,
        scoring,
        args.experiment,
        args.tracking_uri,
        artifacts=log_training_summaries,
        evidence=args.evidence,
        evidence_artifacts=[pair for pair in restorable if pair[0] is not None],
    )
    return record, outcome


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m src.finetune.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=sorted(MODEL_SPECS))
    parser.add_argument(
        "--tasks", nargs="+", default=list(study.TOKEN_CLASSIFIER_TASKS), choices=study.TOKEN_CLASSIFIER_TASKS
    )
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=DEFAULT_DATASETS)
    parser.add_argument("--checkpoints", type=Path, default=Path("models/finetuned"))
    parser.add_argument("--prepared", type=Path, default=None, help="default: paths.prepared of params.yaml")
    parser.add_argument("--derived", type=Path, default=None, help="default: paths.derived of params.yaml")
    parser.add_argument(
        "--limit",
        type=optional_int,
        default=UNSET,
        help="instances per dataset (seeded subset by id); default: the --sweep profile's eval_limit, else all",
    )
    parser.add_argument("--seed", type=seed_type, default=None, help="default: seed of params.yaml")
    parser.add_argument(
        "--resamples",
        type=bounded_int(1, MAX_RESAMPLES),
        default=None,
        help="bootstrap resamples for the F1 interval (default: conf/config.yaml scoring.bootstrap_resamples)",
    )
    parser.add_argument("--variants", nargs="*", default=[], help="extra scorer variants (src/scoring/variants.py)")
    parser.add_argument("--batch-size", type=bounded_int(1, 4096), default=32)
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: conf/config.yaml's)")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument(
        "--sweep", default=None, help="the sweep profile (sweep.eval_limit, and sweep.profile: the MLflow parent run)"
    )
    parser.add_argument("--summary", type=Path, default=None, help="write the DVC-tracked metrics summary here")
    parser.add_argument(
        "--evidence", type=Path, default=None, help="write the run's evidence folder here (src/tracking/evidence.py)"
    )
    args = parser.parse_args(argv)
    params = load_params()
    profile = load_sweep(args.sweep) if args.sweep else None
    if args.limit is UNSET:
        args.limit = profile.eval_limit if profile else None
    args.profile = profile.profile if profile else None
    args.prepared = args.prepared or Path(params.paths.prepared)
    args.derived = args.derived or Path(params.paths.derived)
    args.seed = params.seed if args.seed is None else args.seed
    if args.resamples is None:
        args.resamples = int(config_default("scoring.bootstrap_resamples"))
    args.experiment = default_experiment() if args.experiment is None else args.experiment
    setup_logging()
    try:
        record, outcome = evaluate_model(args)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.summary:
        write_summary(args.summary, record, outcome, args.experiment, args.tracking_uri)
    return 0 if outcome.complete else 1


if __name__ == "__main__":
    launch(main)
