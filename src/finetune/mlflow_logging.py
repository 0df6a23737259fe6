"""MLflow logging of a training: one run per training, the Trainer's logs as metrics, and the
finished model's parameters, metrics, tags and weights digest.

Every tracked run is one MLflow run named ``{model}-{task}-train`` (tag ``kind=training``) in the
project's store (:func:`src.tracking.store.tracking_uri`), tagged with the checkpoint's weights hash
(``weights_sha256``). The evaluation run finds its training run by that hash
(:func:`find_training_run`): nothing in the checkpoint folder, a DVC output, names a run, a
store or a machine path, so the folder's bytes do not change from one training to the next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from src.core.digest import files_digest
from src.core.locate import project_relative
from src.finetune.train_config import TrainConfig
from src.numerics import settings as numerics_settings
from src.rounding import rounded
from src.tracking.evidence import MACHINE_METRIC, clean_metrics, clean_tags, write_evidence
from src.tracking.keys import KEY_TAG, code_version, run_key, settings_digest, without_history
from src.tracking.store import (
    data_version,
    default_experiment,
    git_commit,
    start_experiment,
    tracking_uri as resolve_uri,
)

SUMMARY_FILE = "training_summary.json"
RUN_FILE = "training_run.json"  # the run link older versions wrote into the checkpoint: no longer written
DEFAULT_EXPERIMENT = default_experiment()  # conf/config.yaml mlflow.experiment, its one definition
WEIGHT_PATTERNS = ("model*.safetensors", "pytorch_model*.bin")
WEIGHTS_TAG = "weights_sha256"  # the training run's tag that names its checkpoint by content
#: Summary fields a training run logs as params beside its config.
TRAINING_PARAMS = (
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


def mlflow_metrics_callback() -> Any:
    """A TrainerCallback that logs every Trainer log (loss, learning rate, eval_*) into the active MLflow run."""
    from transformers import TrainerCallback

    class MlflowMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            import mlflow

            numeric = step_metrics(logs)
            if numeric and mlflow.active_run() is not None:
                mlflow.log_metrics(numeric, step=state.global_step)

    return MlflowMetrics()


def step_metrics(logs: dict[str, Any] | None) -> dict[str, float]:
    """The numeric, finite values of one Trainer log, rounded (:mod:`src.rounding`): what the run
    logs at that step and its evidence keeps, the same on every machine."""
    return {
        k: rounded(float(v))
        for k, v in (logs or {}).items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def metric_history(log_history: list[dict[str, Any]]) -> dict[str, list[list[float]]]:
    """``metric -> [[step, value], ...]`` of a Trainer's ``log_history``, as the callback logged it."""
    history: dict[str, list[list[float]]] = {}
    for entry in log_history:
        step = int(entry.get("step", 0))
        for name, value in step_metrics(entry).items():
            history.setdefault(name, []).append([step, value])
    return history


def weights_digest(directory: str | Path) -> str:
    """SHA-256 over the saved weight files of a checkpoint folder (names and bytes, sorted)."""
    directory = Path(directory)
    files = sorted({p for pattern in WEIGHT_PATTERNS for p in directory.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"{directory}: no weight files ({', '.join(WEIGHT_PATTERNS)})")
    return files_digest((path.name, path) for path in files)


@contextlib.contextmanager
def training_run(config: TrainConfig, run_name: str, experiment: str, tracking_uri: str | None) -> Iterator[Any]:
    """The MLflow run of one training (None when ``report_to`` is ``none``), closed in a finally."""
    if not config.reports_to_mlflow():
        yield None
        return
    import mlflow

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


def training_record(
    summary: dict[str, Any], config: TrainConfig, out: Path, data_files: list[Path], run_name: str
) -> dict[str, Any]:
    """The params, final metrics (timings included) and tags of a finished training, rounded as
    logged; the tag ``weights_sha256`` is what :func:`find_training_run` looks up, the key
    (:mod:`src.tracking.keys`) what the evidence and a restore name it by."""
    digest = weights_digest(out)
    version = data_version([Path(p) for p in data_files]) if data_files else "unknown"
    extra = {k: v for k, v in summary.items() if k in TRAINING_PARAMS}
    params = {
        **config.to_dict(),
        **{f"schedule.{k}": v for k, v in summary["schedule"].items()},
        **{("window" if k == "max_length" else k): v for k, v in extra.items()},
        "data_version": version,
        "code_version": code_version(),
        "git_commit": git_commit(),
        # every setting in one digest, and the numerics the weights' last bits depend on (src/numerics.py)
        "settings_digest": settings_digest(config.to_dict()),
        **{f"numerics.{k}": v for k, v in dataclasses.asdict(numerics_settings()).items()},
    }
    final = {
        "train_time_s": summary["train_time_s"],
        "eval_time_s": summary["eval_time_s"],
        "best_val_f1": summary["best_val_f1"],
        "best_step": summary["best_step"],
        "train_examples_per_s": summary["train_examples_per_s"],
        **{f"best_val_{k}": v for k, v in summary["val_metrics"].items()},
    }
    metrics = {
        k: rounded(float(v)) for k, v in final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    tags = {
        "kind": "training",
        "model": summary.get("model", ""),
        "task": summary.get("task", ""),
        "checkpoint": str(out.resolve()),
        WEIGHTS_TAG: digest,
        "data_version": version,
        KEY_TAG: run_key("training", run_name, params),
    }
    return {"params": params, "metrics": metrics, "tags": tags}


def log_training(record: dict[str, Any], out: Path) -> None:
    """A :func:`training_record` and the checkpoint's ``training_summary.json`` into the active run."""
    import mlflow

    mlflow.log_params(record["params"])
    mlflow.log_metrics(record["metrics"])
    mlflow.set_tags(record["tags"])
    if (out / SUMMARY_FILE).is_file():
        mlflow.log_artifact(str(out / SUMMARY_FILE), "training")


def write_training_evidence(
    folder: Path, record: dict[str, Any], run_name: str, experiment: str, summary: dict[str, Any], out: Path
) -> Path:
    """The training's evidence folder (:mod:`src.tracking.evidence`): its params, final metrics and
    metric history as logged (history left out: commit, timings, the checkpoint's machine path), and
    the checkpoint's summary as its artifact, so ``python -m src.evidence restore`` rebuilds the run."""
    history = {
        k: v for k, v in metric_history(summary.get("log_history") or []).items() if not MACHINE_METRIC.search(k)
    }
    source = project_relative(out)
    run = {
        "key": record["tags"][KEY_TAG],
        "run_name": run_name,
        "experiment": experiment,
        "kind": "training",
        "complete": True,
        "params": without_history(record["params"]),
        "metrics": clean_metrics(record["metrics"]),
        "history": history,
        "tags": clean_tags(record["tags"]),
        "artifacts": [[f"{source}/{SUMMARY_FILE}", "training"]] if source else [],
    }
    return write_evidence(folder, run, {}, {})


def find_training_run(
    checkpoint: str | Path, experiment: str = DEFAULT_EXPERIMENT, tracking_uri: str | None = None
) -> str | None:
    """The id of the finished training run (tag ``kind=training``) whose weights hash equals the
    checkpoint's, the latest when several trainings made the same weights; None when the store
    holds none (a pulled checkpoint whose runs were not restored, an untracked training)."""
    from mlflow.tracking import MlflowClient

    digest = weights_digest(checkpoint)
    client = MlflowClient(tracking_uri=resolve_uri(tracking_uri))
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs(
        [found.experiment_id],
        filter_string=f"tags.kind = 'training' and tags.{WEIGHTS_TAG} = '{digest}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None
