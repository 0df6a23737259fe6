"""The 2x2 joblib sweep logs to a real ``mlflow server`` (SQLite backend, local artifact folder).

The test starts ``mlflow server --backend-store-uri sqlite:///<tmp>/db.sqlite
--artifacts-destination <tmp>/artifacts --host 127.0.0.1 --port <free>`` (loopback only),
runs the sweep with ``MLFLOW_TRACKING_URI=http://127.0.0.1:<port>``, and reads everything
back over HTTP with ``MlflowClient``: 4 FINISHED runs, the predictions artifact of each
(proxied through the server into the artifact folder), and the metrics of the same sweep
logged to a plain SQLite file. Then a configuration's evidence folder (src/tracking/evidence.py) is
restored into the server twice: one run with its artifacts in the server's folder, then nothing
more, the sweep's runs untouched. The server is stopped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import scale_harness as harness

pytestmark = pytest.mark.timeout(300)

pytest.importorskip(
    "hydra_plugins.hydra_joblib_launcher", reason="hydra-joblib-launcher not installed: pip install -e '.[scale]'"
)


@pytest.fixture()
def tracking_server(tmp_path):
    port = harness.free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    command = [
        str(mlflow_cli) if mlflow_cli.exists() else shutil.which("mlflow") or "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        "--artifacts-destination",
        str(tmp_path / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    log = open(tmp_path / "server.log", "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # No job runner (7 huey consumers, for GenAI jobs this project does not use): on two
    # cores it would slow start-up and shutdown by tens of seconds.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        harness.wait_http(f"{url}/health", timeout=120, process=server)
        yield url, tmp_path
    except Exception:
        log.flush()
        print((tmp_path / "server.log").read_text()[-3000:])
        raise
    finally:
        # the server runs its workers in its own process group: stop them all, then wait
        try:
            os.killpg(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


def test_joblib_sweep_logs_runs_and_artifacts_to_a_tracking_server(tracking_server, tmp_path):
    from mlflow import MlflowClient

    url, root = tracking_server
    harness.write_workspace(root)
    with harness.model_server() as model:
        done = harness.sweep(
            root, "server", model.base_url, url, launcher="local_joblib", env_extra={"TEMPGEN_N_JOBS": "2"}
        )
        assert done.returncode == 0, harness.describe(done)
        reference_uri = f"sqlite:///{root / 'reference.db'}"
        reference = harness.sweep(root, "reference", model.base_url, reference_uri)
        assert reference.returncode == 0, harness.describe(reference)

    runs = harness.finished_runs(url)
    assert sorted(runs) == harness.RUN_NAMES
    expected = harness.finished_runs(reference_uri)
    client = MlflowClient(tracking_uri=url)
    downloads = root / "downloads"
    for name, run in runs.items():
        assert run["status"] == "FINISHED", name
        assert run["metrics"] == expected[name]["metrics"], name
        listed = {item.path for item in client.list_artifacts(run["run_id"], "predictions/timex")}
        assert "predictions/timex/base.jsonl" in listed, (name, listed)
        local = client.download_artifacts(run["run_id"], "predictions/timex/base.jsonl", str(downloads / name))
        rows = [json.loads(line) for line in Path(local).read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 2 and all("id" in row for row in rows)
        info = client.get_run(run["run_id"]).info
        assert info.artifact_uri.startswith("mlflow-artifacts:"), info.artifact_uri  # proxied by the server
    # the artifacts really went through the server into its destination folder
    stored = list((root / "artifacts").rglob("base.jsonl"))
    assert len(stored) == 4

    # a pulled study's evidence restored into the team server: once, artifacts proxied, nothing else touched
    from src.scoring.system import DatasetPlan, ScoringOptions
    from src.tracking.evaluation import RunRecord, evaluate_configuration
    from src.tracking.evidence import restore_runs
    from src.tracking.keys import KEY_TAG
    from tests.helpers.echo_system import RECORDS, EchoSystem

    (root / "plan.jsonl").write_text("{}\n")
    MlflowClient(reference_uri).create_experiment("pulled", (root / "pulled-artifacts").as_uri())
    record = RunRecord("echo-I", "prompted", "echo", "I", {"seed": 1})
    plans = [DatasetPlan("timex", "base", root / "plan.jsonl", RECORDS)]
    outcome = evaluate_configuration(
        record,
        plans,
        EchoSystem(),
        ScoringOptions(20, 1, False, ()),
        "pulled",
        reference_uri,
        evidence=root / "evidence/runs/echo-I",
    )
    created, skipped = restore_runs(root / "evidence", uri=url)
    assert len(created) == 1 and skipped == []
    assert restore_runs(root / "evidence", uri=url) == ([], [record.key])
    restored = client.get_run(created[0])
    assert restored.data.tags[KEY_TAG] == record.key and restored.info.status == "FINISHED"
    assert restored.data.metrics["timex.base.f1"] == outcome.metrics()["timex.base.f1"]
    listed = {
        a.path for folder in ("predictions/timex", "bootstrap/timex") for a in client.list_artifacts(created[0], folder)
    }
    assert listed == {"predictions/timex/base.jsonl", "bootstrap/timex/base.json"}
    assert len(list((root / "artifacts").rglob("base.jsonl"))) == 5  # through the server into its folder
    after = harness.finished_runs(url)
    assert {name: run["run_id"] for name, run in after.items()} == {name: run["run_id"] for name, run in runs.items()}
