"""Four processes of one configuration start against a fresh MLflow store at the same moment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

WORKERS = 4

RUN_SCRIPT = """
import sys, mlflow
from src.tracking import store as tracking
experiment_id = tracking.start_experiment("tempgen-concurrent")
with mlflow.start_run(run_name="same-config", tags=tracking.run_owner_tags()):
    mlflow.log_metric("timex.base.f1", 0.5)
print(experiment_id)
"""


@pytest.mark.timeout(300)
def test_four_processes_on_a_fresh_store_all_finish(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO_ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_SCRIPT],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    outputs = [process.communicate(timeout=240) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert len({stdout.strip() for stdout, _ in outputs}) == 1  # one experiment for all

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tempgen-concurrent")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * WORKERS
    assert (tmp_path / "mlflow.db.lock").exists()  # the lock lives beside the store
