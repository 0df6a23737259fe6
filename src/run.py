"""Run one configuration (model x reasoning strategy) over its tasks and datasets.

``python -m src.run model=qwen3_moe strategy=I`` composes ``conf/`` with Hydra, generates
(through the response cache), parses, scores, bootstraps, and logs one MLflow run named
``{model}-{strategy}``. Requests that still fail after their retries are listed at the
end and the process exits non-zero; everything else is kept, and a re-run completes the
missing ones from the cache.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from src.cli import optional_int
from src.data.schema import Record, read_records
from src.data.splits import subset_by_id
from src.scoring.evaluate import DatasetEvaluation, InstanceOutput, evaluate_dataset, log_evaluation
from src.params import register_resolver
from src.prompts import Strategy, build_messages, select_exemplars, strategy_from_config
from src.tracking import data_version, environment_secrets, git_commit, log_json_artifact, redact, start_experiment

log = logging.getLogger("src.run")
register_resolver()

TRAIN_SPLIT = "train"
DOCUMENT_DATASETS = frozenset({"len"})  # whole documents: larger generation budget


@dataclass
class DatasetOutcome:
    """What happened on one (task, dataset): its evaluation, or the ids whose requests failed."""

    task: str
    dataset: str
    evaluation: DatasetEvaluation | None
    failed_ids: list[str] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)


def planned_datasets(cfg: DictConfig) -> list[tuple[str, str, Path]]:
    """(task, dataset, file) for every task of ``cfg.tasks`` and dataset of the dimension."""
    prepared = Path(cfg.paths.prepared)
    wanted = None if cfg.datasets is None else set(cfg.datasets)
    plan = []
    for task in cfg.tasks:
        if task not in cfg.dimension.datasets:
            raise ValueError(f"unknown task {task!r}; the dimension defines {list(cfg.dimension.datasets)}")
        for dataset in cfg.dimension.datasets[task]:
            if wanted is None or dataset in wanted:
                plan.append((task, dataset, prepared / task / f"{dataset}.jsonl"))
    missing = [str(path) for _, _, path in plan if not path.exists()]
    if missing:
        raise FileNotFoundError(
            "dataset file(s) not found: " + ", ".join(missing) + " (run `dvc pull` / `dvc repro` first, "
            "or restrict the run with tasks=[...] datasets=[...])"
        )
    if not plan:
        raise ValueError("nothing to run: the tasks and datasets overrides select no dataset")
    return plan


def build_backend(cfg: DictConfig):
    """The model's backend wrapped in the shared response cache."""
    from src.backends import create_backend
    from src.backends.cache import CachedBackend, ResponseCache

    options = OmegaConf.to_container(cfg.model.get("options") or {}, resolve=True)
    backend = create_backend(cfg.model.backend, model_id=cfg.model.model_id, **options)
    return CachedBackend(backend, ResponseCache(cfg.paths.cache))


def select_exemplars_for(cfg: DictConfig, strategy: Strategy, task: str) -> list[Record]:
    """The inductive exemplars of a task, drawn from its train split with the run's seed."""
    if not strategy.inductive:
        return []
    train = read_records(Path(cfg.paths.prepared) / task / f"{TRAIN_SPLIT}.jsonl")
    return select_exemplars(train, strategy.k, int(cfg.seed), task)


def generation_budget(cfg: DictConfig, strategy: Strategy, dataset: str) -> int:
    """Max new tokens: the explicit override, else the strategy's budget (larger for documents)."""
    override = optional_int(cfg.generation.max_tokens)
    if override is not None:
        return override
    return strategy.max_tokens_document if dataset in DOCUMENT_DATASETS else strategy.max_tokens


def run_dataset(
    cfg: DictConfig, backend, strategy: Strategy, task: str, dataset: str, path: Path, exemplars: list[Record]
) -> DatasetOutcome:
    """Generate, parse and score one dataset."""
    from src.backends.base import ChatRequest
    from src.prompts.parsing import parse_answer

    records = subset_by_id(read_records(path), optional_int(cfg.limit), int(cfg.seed))
    max_tokens = generation_budget(cfg, strategy, dataset)
    requests = [
        ChatRequest(
            messages=build_messages(strategy, task, record.text, exemplars),
            max_tokens=int(max_tokens),
            temperature=float(cfg.generation.temperature),
            seed=int(cfg.generation.seed),
            request_id=record.id,
        )
        for record in records
    ]
    results = backend.generate(requests, progress=f"{task}/{dataset}")
    usage = {
        "requests": float(len(results)),
        "cached": float(sum(r.cached for r in results)),
        "prompt_tokens": float(sum(r.usage.get("prompt_tokens") or 0 for r in results)),
        "completion_tokens": float(sum(r.usage.get("completion_tokens") or 0 for r in results)),
        "cost": float(sum(r.usage.get("cost") or 0 for r in results)),
        "latency_s": float(sum(r.latency_s for r in results)),
    }
    failed = [r.request.request_id for r in results if r.text is None]
    if failed:
        return DatasetOutcome(task, dataset, None, failed, usage)
    outputs = []
    for result in results:
        parsed = parse_answer(result.text, task, strategy.abductive)
        outputs.append(
            InstanceOutput(parsed.predictions, result.text, parsed.ok, parsed.error, parsed.reasoning_steps)
        )
    evaluation = evaluate_dataset(
        task, dataset, records, outputs, int(cfg.scoring.bootstrap_resamples), int(cfg.scoring.bootstrap_seed),
        bool(cfg.scoring.lowercase),
    )
    return DatasetOutcome(task, dataset, evaluation, [], usage)


def run_params(cfg: DictConfig, strategy: Strategy, files: list[Path]) -> dict[str, Any]:
    """The MLflow params that make a run traceable to its configuration and data."""
    model = cfg.model
    return {
        "model": model.name,
        "model_id": model.model_id,
        "backend": model.backend,
        "family": model.family,
        "architecture": model.architecture,
        "params_total_b": model.params_total_b,
        "params_active_b": model.params_active_b,
        "strategy": strategy.name,
        "k": strategy.k if strategy.inductive else 0,
        "inductive_plus": strategy.inductive_plus,
        "size_series": model.get("size_series"),
        "dimension": cfg.dimension.name,
        "limit": optional_int(cfg.limit),
        "seed": cfg.seed,
        "git_commit": git_commit(),
        "data_version": data_version(files),
    }


def write_summary(path: Path, run_id: str, cfg: DictConfig, outcomes: list[DatasetOutcome]) -> None:
    """The small metrics file DVC tracks for this configuration (MLflow holds the full record)."""
    metrics = {}
    for outcome in outcomes:
        if outcome.evaluation is not None:
            metrics.update({k: round(v, 6) for k, v in outcome.evaluation.metrics().items()})
    summary = {
        "run_id": run_id,
        "model": cfg.model.name,
        "strategy": cfg.strategy.name,
        "complete": all(o.evaluation is not None for o in outcomes),
        "metrics": dict(sorted(metrics.items())),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def run(cfg: DictConfig) -> int:
    """Run the configuration; returns the process exit code (1 when requests failed)."""
    import mlflow

    plan = planned_datasets(cfg)
    strategy = strategy_from_config(cfg.strategy)
    secrets = environment_secrets()
    backend = build_backend(cfg)  # fails here, before any run is opened, e.g. on a missing API key
    start_experiment(cfg.mlflow.experiment, cfg.mlflow.tracking_uri)
    outcomes: list[DatasetOutcome] = []
    started = time.perf_counter()
    with mlflow.start_run(run_name=cfg.mlflow.run_name) as active:
        status = "FAILED"
        try:
            mlflow.set_tags({"model": cfg.model.name, "strategy": cfg.strategy.name, "kind": "prompted"})
            mlflow.log_params(run_params(cfg, strategy, [path for _, _, path in plan]))
            resolved = redact(OmegaConf.to_container(cfg, resolve=True), secrets)
            log_json_artifact(resolved, "config/resolved.json", secrets)
            exemplar_cache: dict[str, list[Record]] = {}
            for task, dataset, path in plan:
                if task not in exemplar_cache:
                    exemplar_cache[task] = select_exemplars_for(cfg, strategy, task)
                outcome = run_dataset(cfg, backend, strategy, task, dataset, path, exemplar_cache[task])
                outcomes.append(outcome)
                prefix = f"{task}.{dataset}.usage"
                mlflow.log_metrics({f"{prefix}.{k}": v for k, v in outcome.usage.items()})
                if outcome.evaluation is not None:
                    log_evaluation(outcome.evaluation, secrets)
                    log.info("%s/%s: F1 %.3f", task, dataset, outcome.evaluation.metrics()[f"{task}.{dataset}.f1"])
                else:
                    mlflow.log_metric(f"{task}.{dataset}.failed_requests", len(outcome.failed_ids))
            usage = {f"{o.task}/{o.dataset}": o.usage for o in outcomes}
            log_json_artifact(usage, "usage.json", secrets)
            mlflow.log_metric("wall_time_s", time.perf_counter() - started)
            failed = [o for o in outcomes if o.failed_ids]
            status = "FAILED" if failed else "FINISHED"
        finally:
            mlflow.end_run(status=status)
    if cfg.get("summary"):
        write_summary(Path(cfg.summary), active.info.run_id, cfg, outcomes)
    for outcome in outcomes:
        if outcome.failed_ids:
            log.error(
                "%s/%s: %d request(s) failed after retries (not scored; re-run to complete from the cache): %s",
                outcome.task, outcome.dataset, len(outcome.failed_ids), ", ".join(outcome.failed_ids),
            )
    return 1 if any(o.failed_ids for o in outcomes) else 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    code = run(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
