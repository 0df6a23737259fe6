"""The whole DVC pipeline on the ``smoke`` profile, in a copy of the project.

This is the issue-7 acceptance path in miniature: ``dvc repro`` from the raw data to the
report, every number in the report present in MLflow, and a second ``dvc repro`` that
re-runs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (ROOT / "data/raw/timebank-1.2").is_dir(), reason="data/raw not pulled"),
]


def _project_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [path for path in listed if (ROOT / path).is_file()]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("pipeline") / "project"
    for relative in _project_files():
        target = copy / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    shutil.copytree(ROOT / "data/raw", copy / "data/raw")
    for path in (copy / "dvc.lock",):
        path.unlink(missing_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    return copy


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _dvc(project: Path, *args: str, timeout: int = 3000) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=project, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def test_smoke_profile_runs_end_to_end_and_twice_is_a_no_op(project: Path):
    switched = subprocess.run(
        [sys.executable, "-m", "src.profile", "use", "smoke"], cwd=project, env=_env(), capture_output=True, text=True
    )
    assert switched.returncode == 0, switched.stderr
    first = _dvc(project, "repro")
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]

    for task in ("timex", "eventx"):
        for name in ("base", "voc", "adv", "adv_p", "t2c", "len"):
            assert (project / f"data/prepared/{task}/{name}.jsonl").exists(), f"{task}/{name} missing"
    report = (project / "reports/report.md").read_text()
    assert (project / "reports/report.html").exists()
    assert list((project / "reports/figures").glob("*.png"))

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns/mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {"smollm2_135m-I", "smollm2_135m-A+D", "minilm-finetuned"} <= set(runs)
    for name in ("smollm2_135m-I", "smollm2_135m-A+D"):
        summary = json.loads((project / f"summaries/runs/{name}.json").read_text())
        assert summary["complete"] and summary["run_id"] == runs[name].info.run_id
        for key, value in summary["metrics"].items():
            assert runs[name].data.metrics[key] == pytest.approx(value, abs=1e-6)
        f1 = runs[name].data.metrics["timex.base.f1"]
        assert f"{f1:.3f}" in report, f"{name}: timex/base F1 {f1:.3f} not in the report"

    second = _dvc(project, "repro")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Running stage" not in second.stdout, second.stdout[-3000:]
    status = _dvc(project, "status")
    assert "changed" not in status.stdout, status.stdout
