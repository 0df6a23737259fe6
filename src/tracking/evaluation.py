"""The one evaluation runner: every kind of system is scored and logged here.

A *system* (a prompted model under a strategy, a fine-tuned tagger) only turns records
into :class:`~src.scoring.evaluate.InstanceOutput` rows. Everything else is the same for
every configuration and lives here once: the MLflow run (named, tagged, its params under
one typed :class:`RunRecord`), the dataset inputs, the metrics and artifacts of each
dataset, the final status (set in a ``finally``), stale runs of the same configuration
closed first, and the small summary file that DVC tracks and the analysis reads.

The summary and the evidence folder (DVC outputs) name the run by its key
(:mod:`src.tracking.keys`), and hold nothing of its history; the run id, commit, store, usage
and wall time go to MLflow and to the stage's history file (:mod:`src.tracking.history`),
which DVC does not version.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt

from src.core.digest import file_digest
from src.scoring.evaluate import DatasetEvaluation, evaluate_dataset
from src.scoring.system import DatasetPlan, ScoringOptions, System
from src.study import RUN_KINDS
from src.tracking import store as tracking
from src.tracking.evidence import clean_metrics, clean_tags, write_evidence
from src.tracking.history import write_history
from src.tracking.keys import KEY_TAG, code_version, run_key, without_history
from src.tracking.run_tree import parent_tags, study_tags
from src.tracking.store import redact

log = logging.getLogger(__name__)

#: Metrics copied into the DVC summary (the full set is in MLflow).
SUMMARY_METRICS = (
    "f1",
    "precision",
    "recall",
    "f1_ci_low",
    "f1_ci_high",
    "parse_failure_rate",
    "truncated_rate",
    "empty_answer_rate",
    "refusal_rate",
    "n",
)


@dataclass
class RunRecord:
    """The identity of a configuration's MLflow run: what the analysis reads back.

    Attributes:
        run_name: ``{model}-{strategy}`` (prompted) or ``{model}-finetuned``.
        kind: ``prompted`` or ``finetuned``.
        model: the model's config name.
        strategy: the strategy name, or ``finetuned``.
        params: every other param (family, sizes, k, seed, git commit, data version...).
        tags: extra tags (e.g. the training run a checkpoint came from).
        profile: the sweep profile the run belongs to (its MLflow parent run); None for a hand run.
    """

    run_name: str
    kind: str
    model: str
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in RUN_KINDS:
            raise ValueError(f"run kind must be one of {RUN_KINDS}, got {self.kind!r}")

    def all_params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "strategy": self.strategy,
            "kind": self.kind,
            **self.params,
            "code_version": code_version(),
        }

    @property
    def key(self) -> str:
        """The run's deterministic name (:func:`src.tracking.keys.run_key`)."""
        return run_key(self.kind, self.run_name, self.all_params())

    def all_tags(self) -> dict[str, str]:
        return {
            **study_tags(self.model, self.strategy, self.params, self.profile),
            "kind": self.kind,
            KEY_TAG: self.key,
            **self.tags,
        }


@dataclass
class DatasetOutcome:
    """One dataset's evaluation, or the failures that kept it from being scored."""

    plan: DatasetPlan
    evaluation: DatasetEvaluation | None
    failures: dict[str, str]
    usage: dict[str, float]

    @property
    def key(self) -> str:
        return f"{self.plan.task}/{self.plan.dataset}"


@dataclass
class RunOutcome:
    """The finished run: its id, per-dataset outcomes and whether everything was scored."""

    run_id: str
    outcomes: list[DatasetOutcome]
    logged: dict[str, float] = field(default_factory=dict)  # every metric the run logged (read back)
    params: dict[str, str] = field(default_factory=dict)  # every param the run logged (read back)
    wall_time_s: float = 0.0

    @property
    def complete(self) -> bool:
        return all(o.evaluation is not None for o in self.outcomes)

    def metrics(self) -> dict[str, float]:
        """The run's logged metrics (those a system logged itself too), scored metrics on top."""
        merged: dict[str, float] = dict(self.logged)
        for outcome in self.outcomes:
            if outcome.evaluation is not None:
                merged.update(outcome.evaluation.metrics())
        return merged


def file_md5(path: Path) -> str:
    """The md5 of a file's bytes: DVC's hash of a file output, so a run names its data version."""
    return file_digest(path, "md5")


def log_dataset_input(plan: DatasetPlan) -> None:
    """Show the dataset in MLflow's Dataset column: name ``task/dataset``, digest = DVC hash."""
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource
    from mlflow.exceptions import MlflowException

    source = LocalArtifactDatasetSource(str(plan.path))
    dataset = MetaDataset(source=source, name=f"{plan.task}/{plan.dataset}", digest=file_md5(plan.path))

    def lost_the_race(exc: BaseException) -> bool:
        # two runs of a sweep logging the same dataset at the same moment: the loser's insert
        # hits the store's unique key; the second attempt finds the row the winner wrote
        return isinstance(exc, MlflowException) and "UNIQUE constraint" in str(exc)

    for attempt in Retrying(stop=stop_after_attempt(2), retry=retry_if_exception(lost_the_race), reraise=True):
        with attempt:
            mlflow.log_input(dataset, context="evaluation", tags={"task": plan.task, "dataset": plan.dataset})


def evaluate_configuration(
    record: RunRecord,
    plans: Sequence[DatasetPlan],
    system: System,
    scoring: ScoringOptions,
    experiment: str,
    tracking_uri: str | None = None,
    secrets: tuple[str, ...] = (),
    artifacts: Callable[[], None] | None = None,
    evidence: Path | str | None = None,
    evidence_artifacts: Sequence[tuple[str, str]] = (),
) -> RunOutcome:
    """Open the configuration's MLflow run, evaluate every dataset, log, close with a status.

    The run ends FINISHED only when every dataset was scored; a dataset whose requests
    failed is logged with its failed ids and causes and the run ends FAILED. Any exception
    (a crash, Ctrl-C) also ends the run FAILED before it propagates; a run killed outright
    (SIGKILL) stays RUNNING in the store and is closed the next time this configuration runs.
    ``evidence`` (a folder) receives the run's evidence afterwards (:func:`write_run_evidence`),
    naming ``evidence_artifacts`` (project-relative file, artifact path) for a restore to log.
    """
    import mlflow

    experiment_id = tracking.start_experiment(experiment, tracking_uri)
    closed = tracking.close_stale_runs(experiment_id, record.run_name, mlflow.MlflowClient())
    if closed:
        log.warning("%s: closed %d stale RUNNING run(s) as FAILED: %s", record.run_name, len(closed), ", ".join(closed))
    owner_tags = {**tracking.run_owner_tags(), **parent_tags(mlflow.MlflowClient(), experiment_id, record.profile)}
    outcomes: list[DatasetOutcome] = []
    started = time.perf_counter()
    with mlflow.start_run(run_name=record.run_name) as active:
        status = "FAILED"
        try:
            mlflow.set_tags({**record.all_tags(), **owner_tags})
            mlflow.log_params(record.all_params())
            if artifacts is not None:
                artifacts()
            prepare = getattr(system, "prepare", None)
            if prepare is not None:
                prepare(plans)
            for plan in plans:
                outcome = _evaluate_one(plan, system, scoring, secrets)
                outcomes.append(outcome)
            report = usage_report(outcomes)
            tracking.log_json_artifact(report, "usage.json", secrets)
            totals = {f"usage.{name}": value for name, value in report["total"].items() if name != "latency_s"}
            if totals:  # the run's total (latency aside: it is the machine's, kept in usage.json)
                mlflow.log_metrics(totals)
            wall_time = time.perf_counter() - started
            mlflow.log_metric("wall_time_s", wall_time)
            status = "FINISHED" if all(o.evaluation is not None for o in outcomes) else "FAILED"
        finally:
            mlflow.end_run(status=status)
    finished = mlflow.MlflowClient().get_run(active.info.run_id)
    outcome = RunOutcome(
        active.info.run_id,
        outcomes,
        dict(finished.data.metrics),
        dict(finished.data.params),
        float(finished.data.metrics.get("wall_time_s", 0.0)),
    )
    if evidence is not None:
        write_run_evidence(Path(evidence), record, outcome, finished, experiment, secrets, evidence_artifacts)
    return outcome


def usage_report(outcomes: Sequence[DatasetOutcome]) -> dict[str, dict[str, float]]:
    """``usage.json``: each dataset's usage (a prompted system's: :mod:`src.runs.usage`) and a
    ``total`` summing every numeric field over them (the cost split by source included)."""
    report: dict[str, dict[str, float]] = {o.key: dict(o.usage) for o in outcomes}
    total: dict[str, float] = {}
    for usage in report.values():
        for name, value in usage.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[name] = total.get(name, 0.0) + float(value)
    report["total"] = total
    return report


def write_run_evidence(
    folder: Path,
    record: RunRecord,
    outcome: RunOutcome,
    run: Any,
    experiment: str,
    secrets: tuple[str, ...] = (),
    artifacts: Sequence[tuple[str, str]] = (),
) -> Path:
    """The configuration's evidence folder (:mod:`src.tracking.evidence`): what it logged, as read back from
    the store (params, metrics, tags), and each scored dataset's predictions and bootstrap artifact."""

    data = {
        "key": record.key,
        "run_name": record.run_name,
        "experiment": experiment,
        "kind": record.kind,
        "model": record.model,
        "strategy": record.strategy,
        "complete": outcome.complete,
        "params": without_history(run.data.params),
        "metrics": clean_metrics(run.data.metrics),
        "tags": clean_tags(run.data.tags),
        "artifacts": [list(pair) for pair in artifacts],
    }
    scored = [o.evaluation for o in outcome.outcomes if o.evaluation is not None]
    predictions = {(e.task, e.dataset): e.rows for e in scored}
    bootstrap = {(e.task, e.dataset): e.bootstrap_artifact() for e in scored}
    return write_evidence(folder, redact(data, secrets), redact(predictions, secrets), redact(bootstrap, secrets))


def _evaluate_one(
    plan: DatasetPlan, system: System, scoring: ScoringOptions, secrets: tuple[str, ...]
) -> DatasetOutcome:
    import mlflow

    log_dataset_input(plan)
    produced = system.produce(plan)
    prefix = f"{plan.task}.{plan.dataset}"
    if produced.usage:
        mlflow.log_metrics({f"{prefix}.usage.{k}": float(v) for k, v in produced.usage.items()})
    if produced.failures or produced.outputs is None:
        mlflow.log_metric(f"{prefix}.failed_requests", len(produced.failures))
        tracking.log_json_artifact(produced.failures, f"failures/{plan.task}/{plan.dataset}.json", secrets)
        return DatasetOutcome(plan, None, produced.failures, produced.usage)
    evaluation = evaluate_dataset(
        plan.task,
        plan.dataset,
        plan.records,
        produced.outputs,
        scoring.resamples,
        scoring.seed,
        scoring.lowercase,
        variants=scoring.variants,
    )
    log_evaluation(evaluation, secrets)
    log.info(
        "%s/%s: F1 %.3f (%d instances)",
        plan.task,
        plan.dataset,
        evaluation.metrics()[f"{prefix}.f1"],
        len(plan.records),
    )
    return DatasetOutcome(plan, evaluation, {}, produced.usage)


def summary(record: RunRecord, outcome: RunOutcome) -> dict[str, Any]:
    """The small JSON DVC tracks per configuration: the run's key and headline metrics (nothing of
    its history: the run id and usage are in its history file)."""
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    everything = outcome.metrics()
    for o in outcome.outcomes:
        block = metrics.setdefault(o.plan.task, {}).setdefault(o.plan.dataset, {})
        for name in SUMMARY_METRICS:
            value = everything.get(f"{o.plan.task}.{o.plan.dataset}.{name}")
            if value is not None:
                block[name] = round(float(value), 6)
    return {
        "key": record.key,
        "run_name": record.run_name,
        "kind": record.kind,
        "model": record.model,
        "strategy": record.strategy,
        "complete": outcome.complete,
        "metrics": metrics,
    }


def run_usage(outcome: RunOutcome) -> dict[str, float]:
    """The run's requests, tokens and cost summed over its datasets (``usage.json``'s total without
    the latency), for the report's sweep total; empty for a system that reports no usage."""
    if not any(o.usage for o in outcome.outcomes):
        return {}
    total = usage_report(outcome.outcomes)["total"]
    return {name: round(value, 6) for name, value in sorted(total.items()) if name != "latency_s"}


def write_summary(
    path: Path, record: RunRecord, outcome: RunOutcome, experiment: str, tracking_uri: str | None = None
) -> None:
    """Write :func:`summary` (one small file DVC tracks) and, beside the summaries, the run's
    history file (:func:`src.tracking.history.write_history`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary(record, outcome), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    write_history(
        path,
        {
            "key": record.key,
            "run_id": outcome.run_id,
            "run_name": record.run_name,
            "experiment": experiment,
            "tracking_uri": tracking.tracking_uri(tracking_uri),
            "git_commit": outcome.params.get("git_commit"),
            "wall_time_s": round(outcome.wall_time_s, 3),
            "usage": run_usage(outcome),
        },
    )


def report_failures(outcome: RunOutcome) -> list[str]:
    """One line per dataset that was not scored, naming each real cause once with its ids."""
    lines = []
    for o in outcome.outcomes:
        if o.evaluation is None:
            by_cause: dict[str, list[str]] = {}
            for instance, cause in sorted(o.failures.items()):
                by_cause.setdefault(cause, []).append(instance)
            causes = "; ".join(f"{cause}: {', '.join(ids)}" for cause, ids in by_cause.items())
            lines.append(f"{o.key}: {len(o.failures)} request(s) failed, dataset not scored ({causes})")
    return lines


def log_evaluation(evaluation: DatasetEvaluation, secrets: tuple[str, ...] = ()) -> None:
    """Log metrics and the ``predictions/`` and ``bootstrap/`` artifacts to the active MLflow run."""
    import mlflow

    mlflow.log_metrics(evaluation.metrics())
    where = f"{evaluation.task}/{evaluation.dataset}"
    tracking.log_jsonl_artifact(evaluation.rows, f"predictions/{where}.jsonl", secrets)
    tracking.log_json_artifact(evaluation.bootstrap_artifact(), f"bootstrap/{where}.json", secrets)
