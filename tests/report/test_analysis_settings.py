"""The analysis's new settings on the command line, and its robustness metrics on the MLflow run."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from src.analyze import log_analysis, main
from src.tracking.run_tree import PROFILE_TAG


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--margin", "0", "--margin must be in (0, 1)"),
        ("--power", "0.3", "--power must be in [0.5, 1)"),
        ("--flip-threshold", "1.5", "--flip-threshold must be in [0, 1)"),
    ],
)
def test_a_setting_out_of_range_is_one_line_and_exit_2(flag, value, message, capsys, tmp_path):
    assert main([flag, value, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {message}"]


def test_the_analysis_run_carries_the_robustness_metrics(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "reports"
    out.mkdir()
    (out / "report.html").write_text("<html>report</html>")
    metrics = {"robustness.timex.adv.m-A_D_I.flip_rate": 0.25, "robustness.timex.adv.m-A_D_I.flip_rate_ci_low": 0.1}
    record = {
        "run_name": "analysis smoke",
        "params": {"resamples": 10},
        "tags": {"kind": "analysis", PROFILE_TAG: "smoke"},
        "metrics": metrics,
    }
    log_analysis("tree", uri, record, out)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("tree")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'analysis'")
    assert len(runs) == 1 and runs[0].data.metrics == metrics
