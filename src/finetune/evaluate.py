"""Evaluate a fine-tuned model's checkpoints on every dataset of their tasks, logged like a prompted run.

``python -m src.finetune.evaluate --model minilm --tasks timex eventx`` loads
``models/finetuned/{model}-{task}/`` for each task, predicts every dataset of the task
(long documents windowed), scores with the study's metric and logs one MLflow run named
``{model}-finetuned`` with ``strategy: finetuned`` and the same metric names and
artifacts as ``src.run``, so the analysis treats both kinds alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from src.cli import optional_int
from src.data.schema import read_records
from src.data.splits import subset_by_id
from src.scoring.evaluate import InstanceOutput, evaluate_dataset, log_evaluation
from src.finetune.models import MODEL_SPECS
from src.finetune.predict import TokenClassifier
from src.params import lookup
from src.tracking import data_version, git_commit, log_json_artifact, start_experiment

log = logging.getLogger("src.finetune.evaluate")

DEFAULT_DATASETS = ("base", "t2c", "voc", "adv", "adv_p", "len")


def checkpoint_dir(root: Path, model: str, task: str) -> Path:
    """Where the finetune stage writes the checkpoint of ``model`` on ``task``."""
    return root / f"{model}-{task}"


def count_parameters(classifier: TokenClassifier) -> float:
    """Model size in billions of parameters (for the size analyses)."""
    return sum(p.numel() for p in classifier.model.parameters()) / 1e9


def evaluate_model(args: argparse.Namespace) -> dict[str, Any]:
    """Predict, score and log every (task, dataset); returns the DVC summary."""
    import mlflow

    spec = MODEL_SPECS[args.model]
    plan = [(task, name, args.prepared / task / f"{name}.jsonl") for task in args.tasks for name in args.datasets]
    missing = [str(path) for _, _, path in plan if not path.exists()]
    if missing:
        raise FileNotFoundError(f"dataset file(s) not found: {', '.join(missing)} (run `dvc repro` first)")
    start_experiment(args.experiment, args.tracking_uri)
    metrics: dict[str, float] = {}
    with mlflow.start_run(run_name=f"{args.model}-finetuned") as run:
        status = "FAILED"
        try:
            mlflow.set_tags({"model": args.model, "strategy": "finetuned", "kind": "finetuned"})
            params: dict[str, Any] = {
                "model": args.model,
                "model_id": spec.location or spec.gguf_file,
                "family": args.model,
                "model_type": spec.family,
                "architecture": "dense",
                "strategy": "finetuned",
                "inductive_plus": False,
                "seed": args.seed,
                "limit": args.limit,
                "git_commit": git_commit(),
                "data_version": data_version([path for _, _, path in plan]),
            }
            for task in args.tasks:
                classifier = TokenClassifier.load(checkpoint_dir(args.checkpoints, args.model, task))
                params["params_total_b"] = params["params_active_b"] = round(count_parameters(classifier), 4)
                summary_file = checkpoint_dir(args.checkpoints, args.model, task) / "training_summary.json"
                if summary_file.exists():
                    log_json_artifact(json.loads(summary_file.read_text()), f"training/{task}.json")
                for name in args.datasets:
                    path = args.prepared / task / f"{name}.jsonl"
                    records = subset_by_id(read_records(path), args.limit, args.seed)
                    started = time.perf_counter()
                    predicted = classifier.predict_spans(records, batch_size=args.batch_size, progress=True)
                    elapsed = time.perf_counter() - started
                    outputs = [InstanceOutput(predictions) for predictions in predicted]
                    evaluation = evaluate_dataset(task, name, records, outputs, args.resamples, args.seed)
                    log_evaluation(evaluation)
                    mlflow.log_metric(f"{task}.{name}.usage.latency_s", elapsed)
                    metrics.update(evaluation.metrics())
                    log.info("%s/%s: F1 %.3f (%d instances)", task, name, metrics[f"{task}.{name}.f1"], len(records))
            mlflow.log_params(params)
            status = "FINISHED"
        finally:
            mlflow.end_run(status=status)
    return {
        "run_id": run.info.run_id,
        "model": args.model,
        "strategy": "finetuned",
        "complete": True,
        "metrics": {k: round(v, 6) for k, v in sorted(metrics.items())},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=sorted(MODEL_SPECS))
    parser.add_argument("--tasks", nargs="+", default=["timex", "eventx"])
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS))
    parser.add_argument("--checkpoints", type=Path, default=Path("models/finetuned"))
    parser.add_argument("--prepared", type=Path, default=None, help="default: paths.prepared of params.yaml")
    parser.add_argument("--limit", type=optional_int, default=None, help="instances per dataset (seeded subset by id)")
    parser.add_argument("--seed", type=int, default=None, help="default: seed of params.yaml")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the F1 interval")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--experiment", default="tempgen")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--summary", type=Path, default=None, help="write the DVC-tracked metrics summary here")
    args = parser.parse_args(argv)
    args.prepared = args.prepared or Path(lookup("paths.prepared"))
    args.seed = int(lookup("seed")) if args.seed is None else args.seed
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    summary = evaluate_model(args)
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
