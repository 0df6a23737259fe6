"""Where a run sits in the MLflow UI: the study's tags and one parent run per sweep profile.

DVC runs each configuration in its own process, so there is no single pipeline process to hold
a parent run open. Instead every run of a profile (prompted, fine-tuned evaluation, analysis)
names the same parent, a run called ``profile <name>`` created on first use, through MLflow's
``mlflow.parentRunId`` tag: the UI then shows the profile's runs nested under it. Training runs
(``kind=training``) stay outside the tree; the ``kind`` tag filters them in or out.

The tags (model, family, architecture, strategy, components, profile) are what the UI's
group-by and chart views use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src import study
from src.tracking import store as tracking

PARENT_TAG = "mlflow.parentRunId"
PROFILE_TAG = "profile"
PARENT_KIND = "profile"


def study_tags(model: str, strategy: str, params: dict[str, Any], profile: str | None) -> dict[str, str]:
    """Tags for grouping: the model's family and architecture, the strategy's reasoning components
    (``abductive+deductive``; ``finetuned`` for a token classifier) and the profile."""
    tags = {"model": model, "strategy": strategy}
    for key in ("family", "architecture"):
        if params.get(key) is not None:
            tags[key] = str(params[key])
    if strategy == study.FINETUNED:
        tags["components"] = study.FINETUNED
    else:
        try:
            parts = study.strategy_parts(strategy)
        except ValueError:
            parts = {}
        tags["components"] = "+".join(name for name, used in parts.items() if used) or strategy
    if profile:
        tags[PROFILE_TAG] = profile
    return tags


def profile_parent(client, experiment_id: str, profile: str) -> str:
    """The id of the profile's parent run in the experiment, created (FINISHED, empty) on first use."""
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.kind = '{PARENT_KIND}' and tags.{PROFILE_TAG} = '{profile}'",
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    if found:
        return found[0].info.run_id
    parent = client.create_run(
        experiment_id, run_name=f"profile {profile}", tags={"kind": PARENT_KIND, PROFILE_TAG: profile}
    )
    client.set_terminated(parent.info.run_id, "FINISHED")
    return parent.info.run_id


def parent_tags(client, experiment_id: str, profile: str | None) -> dict[str, str]:
    """``{mlflow.parentRunId: ...}`` nesting a run under its profile's parent; none for a hand run."""
    if not profile:
        return {}
    return {PARENT_TAG: profile_parent(client, experiment_id, profile)}


#: What an analysis run logs: (file or folder of the report, artifact folder; "" the root).
ANALYSIS_ARTIFACTS = (
    ("report.html", ""),
    ("report.md", ""),
    ("analysis.json", ""),
    ("tables", "tables"),
    ("figures", "figures"),
)


def log_analysis_run(experiment: str, uri: str, record: dict[str, Any], out) -> str:
    """Log the analysis of a profile (``record``: its name, params and tags, the profile among them)
    as a run nested under its parent: the report, the tables and figures as artifacts, so the
    MLflow UI carries the study's results."""

    import mlflow

    out = Path(out)
    experiment_id = tracking.start_experiment(experiment, uri)
    client = mlflow.MlflowClient()
    tags = {**record["tags"], **parent_tags(client, experiment_id, record["tags"].get(PROFILE_TAG))}
    with mlflow.start_run(experiment_id=experiment_id, run_name=record["run_name"], tags=tags) as active:
        mlflow.log_params(record["params"])
        for name, folder in ANALYSIS_ARTIFACTS:
            path = out / name
            if path.is_file():
                mlflow.log_artifact(str(path), folder or None)
            elif path.is_dir():
                mlflow.log_artifacts(str(path), folder or None)
    return active.info.run_id
