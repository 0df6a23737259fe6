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
import hashlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from src.finetune.train_config import TrainConfig
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


def log_training(summary: dict[str, Any], config: TrainConfig, out: Path, data_files: list[Path]) -> None:
    """Params, final metrics (timings included), tags and the summary of a finished training into
    the active run; the tag ``weights_sha256`` is what :func:`find_training_run` looks up."""
    import mlflow

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
            WEIGHTS_TAG: digest,
            "data_version": version,
        }
    )
    mlflow.log_text(json.dumps(summary, indent=1), "training/" + SUMMARY_FILE)  # with the timings


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
