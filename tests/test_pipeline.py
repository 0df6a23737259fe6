"""The whole DVC pipeline on the ``smoke`` profile, in a copy of the project.

This is the issue-7 acceptance path in miniature: ``dvc repro`` from the raw data to the
report, every number in the report present in MLflow, and a second ``dvc repro`` that
re-runs nothing; and issue 31's: ``dvc push``, a fresh clone with an empty MLflow store,
``dvc pull``, an analysis change re-run from the pulled evidence, and the restore.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.smoke_project import dvc, pipeline_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (REPO_ROOT / "data/raw/timebank-1.2").is_dir(), reason="data/raw not pulled"),
]


@pytest.fixture(scope="module")
def project(smoke_project: Path) -> Path:
    return smoke_project


def _env() -> dict[str, str]:
    return pipeline_env()


def _dvc(project: Path, *args: str, timeout: int = 3000) -> subprocess.CompletedProcess:
    return dvc(project, *args, timeout=timeout)


def _mlflow_client(project: Path):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns/mlflow.db'}")


def test_smoke_profile_runs_end_to_end_and_twice_is_a_no_op(project: Path):
    for task in ("timex", "eventx"):
        for name in ("base", "t2c", "len"):
            assert (project / f"data/prepared/{task}/{name}.jsonl").exists(), f"{task}/{name} missing"
        for name in ("voc", "adv", "adv_p"):
            assert (project / f"data/derived/{task}/{name}.jsonl").exists(), f"derived {task}/{name} missing"
    report = (project / "reports/report.md").read_text()
    assert (project / "reports/report.html").exists()
    assert list((project / "reports/figures").glob("*.png"))

    client = _mlflow_client(project)
    experiment = client.get_experiment_by_name("tempgen")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert {"smollm2_135m-I", "smollm2_135m-A+D", "minilm-finetuned"} <= set(runs)
    # a local model is sent nowhere: no provider, though the profile names one for API models
    assert runs["smollm2_135m-I"].data.params["provider"] == "None"
    assert runs["smollm2_135m-I"].data.tags["profile"] == "smoke"
    for name in ("smollm2_135m-I", "smollm2_135m-A+D"):
        summary = json.loads((project / f"summaries/runs/{name}.json").read_text())
        assert summary["complete"] and summary["run_id"] == runs[name].info.run_id
        for task, datasets in summary["metrics"].items():
            for dataset, values in datasets.items():
                for metric, value in values.items():
                    logged = runs[name].data.metrics[f"{task}.{dataset}.{metric}"]
                    assert logged == pytest.approx(value, abs=1e-6)
        f1 = runs[name].data.metrics["timex.base.f1"]
        assert f"{f1:.3f}" in report, f"{name}: timex/base F1 {f1:.3f} not in the report"

    second = _dvc(project, "repro")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Running stage" not in second.stdout, second.stdout[-3000:]
    status = _dvc(project, "status")
    assert "changed" not in status.stdout, status.stdout


def test_a_stray_run_never_changes_the_pipeline_report(project: Path):
    """Provenance: the analysis reads exactly the runs the summaries name, not the newest ones."""
    before = (project / "reports/analysis.json").read_bytes()
    stray = subprocess.run(
        [
            sys.executable,
            "-m",
            "src.run",
            "model=smollm2_135m",
            "strategy=I",
            "limit=1",
            "tasks=[timex]",
            "datasets=[base]",
            f"hydra.run.dir={project / 'outputs/stray'}",
        ],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert stray.returncode == 0, stray.stderr[-3000:]
    forced = _dvc(project, "repro", "--force", "--single-item", "analyze")  # the analysis alone
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert (project / "reports/analysis.json").read_bytes() == before


def test_one_parameter_as_a_dvc_experiment_and_the_plots(project: Path):
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "smoke"], cwd=project, check=True
    )
    done = _dvc(project, "exp", "run", "-S", "sweep.yaml:sweep.resamples=150", "--name", "fewer-resamples")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Running stage 'analyze'" in done.stdout and "Running stage 'run@" not in done.stdout
    shown = _dvc(project, "exp", "show", "--csv")
    assert shown.returncode == 0, shown.stderr
    assert "fewer-resamples" in shown.stdout and "timex.base.f1" in shown.stdout
    plots = _dvc(project, "plots", "show", "--json")
    assert plots.returncode == 0, plots.stderr[-2000:]
    rendered = json.loads(plots.stdout)["data"]
    for name in ("f1_by_dataset.csv", "rq1_transfer.csv", "error_types.csv"):
        [key] = [key for key in rendered if key.endswith(name)]
        values = rendered[key][0]["content"]["data"]["values"]
        assert values, f"{name}: the plot has no data"


def test_push_then_a_fresh_clone_pulls_every_stage_output(project: Path, tmp_path: Path):
    remote = tmp_path / "remote"
    assert _dvc(project, "remote", "add", "team", str(remote)).returncode == 0
    pushed = _dvc(project, "push", "-r", "team")
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    clone = tmp_path / "clone"
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "pushed"],
        cwd=project,
        check=True,
        capture_output=True,
    )
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True)
    pulled = subprocess.run(
        [sys.executable, "-m", "dvc", "pull", "-r", "team"], cwd=clone, env=_env(), capture_output=True, text=True
    )
    assert pulled.returncode == 0, pulled.stderr[-3000:]
    for path in ("data/derived/timex/adv.jsonl", "models/finetuned/minilm-timex", "summaries/runs/smollm2_135m-I.json"):
        assert (clone / path).exists(), f"{path} not pulled"
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status"], cwd=clone, env=_env(), capture_output=True, text=True
    )
    assert "changed" not in status.stdout and "modified" not in status.stdout, status.stdout
    dry = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "--dry"], cwd=clone, env=_env(), capture_output=True, text=True
    )
    assert "Running stage" not in dry.stdout, dry.stdout[-3000:]
    _pulled_study_is_analysed_restored_and_guarded(project, clone)


def _run_in(clone: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=clone, env=_env(), capture_output=True, text=True, timeout=900)


def _pulled_study_is_analysed_restored_and_guarded(project: Path, clone: Path) -> None:
    """Issue 31 in the clone, whose MLflow store is empty: a foreign evidence folder is refused, an
    analysis change re-runs only the analysis (no model, no store), the restore rebuilds the runs once."""
    import shutil

    import yaml

    from src.tracking.evidence import MACHINE_METRIC

    assert not (clone / "mlruns/mlflow.db").exists()
    for folder in ("evidence/runs/smollm2_135m-I", "evidence/finetuned/minilm"):
        assert (clone / folder / "run.json").is_file(), f"{folder} not pulled"
    # a run folder of another configuration dropped over a pulled one: refused, one line naming it
    target = clone / "evidence/runs/smollm2_135m-A+D"
    shutil.rmtree(target)
    shutil.copytree(clone / "evidence/runs/smollm2_135m-I", target)
    refused = _run_in(
        clone, "-m", "src.analyze", "--summaries", "summaries", "--evidence", "evidence", "--sweep", "sweep.yaml",
        "--out", str(clone / "scratch-report"),
    )  # fmt: skip
    lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-2000:]
    assert "evidence/runs/smollm2_135m-A+D holds run" in lines[0] and "smollm2_135m-A+D.json names run" in lines[0]
    assert _dvc(clone, "checkout", "--force").returncode == 0
    assert "changed" not in _dvc(clone, "status").stdout

    # (b) an analysis setting changes: only the analysis re-runs, from the pulled evidence
    sweep_file = clone / "sweep.yaml"
    sweep = yaml.safe_load(sweep_file.read_text())
    before = sweep["sweep"]["resamples"]
    sweep["sweep"]["resamples"] = before + 50
    sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
    redone = _dvc(clone, "repro")
    assert redone.returncode == 0, (redone.stdout + redone.stderr)[-3000:]
    ran = [line for line in redone.stdout.splitlines() if line.startswith("Running stage")]
    assert ran == ["Running stage 'analyze':"], ran
    store = clone / "mlruns/mlflow.db"
    if store.exists():  # the analysis logs itself (under the profile's parent run), never a configuration run
        client = _mlflow_client(clone)
        kinds = {
            r.data.tags.get("kind") for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
        }
        assert kinds <= {"analysis", "profile"}, kinds
    # (d) the same numbers as the original study, except what depends on the resamples
    original, redone_json = (json.loads((p / "reports/analysis.json").read_text()) for p in (project, clone))
    assert redone_json["resamples"] == before + 50 and original["resamples"] == before
    for key in ("configurations", "datasets", "errors", "provenance"):
        assert redone_json[key] == original[key], key
    tables = sorted(path.name for path in (project / "reports/tables").glob("dataset_*.csv"))
    assert tables and tables == sorted(path.name for path in (clone / "reports/tables").glob("dataset_*.csv"))
    for name in tables:  # F1, P, R and each run's own interval per configuration: equal to the digit
        assert (clone / "reports/tables" / name).read_text() == (project / "reports/tables" / name).read_text(), name

    # (c) the restore rebuilds the runs in the clone's empty store, once
    first = _run_in(clone, "-m", "src.tracking.evidence", "restore")
    assert first.returncode == 0, first.stderr[-3000:]
    summaries = sorted((clone / "summaries").glob("**/*.json"))
    assert f"restored {len(summaries)} run(s), 0 already" in first.stdout, first.stdout
    second = _run_in(clone, "-m", "src.tracking.evidence", "restore")
    assert f"restored 0 run(s), {len(summaries)} already" in second.stdout, second.stdout + second.stderr
    source, restored = _mlflow_client(project), _mlflow_client(clone)
    runs = restored.search_runs(
        [e.experiment_id for e in restored.search_experiments()], filter_string="tags.kind != 'analysis'"
    )
    runs = [run for run in runs if "tempgen.source_run_id" in run.data.tags]
    assert len(runs) == len(summaries)
    # nested again under the profile's parent run, as on the machine that ran the study
    assert all(run.data.tags.get("mlflow.parentRunId") for run in runs)
    by_source = {run.data.tags["tempgen.source_run_id"]: run for run in runs}
    for path in summaries:
        run_id = json.loads(path.read_text())["run_id"]
        original_run, copy = source.get_run(run_id), by_source[run_id]
        assert copy.info.run_name == original_run.info.run_name and copy.info.status == "FINISHED"
        assert copy.data.params == original_run.data.params
        kept = {k: v for k, v in original_run.data.metrics.items() if not MACHINE_METRIC.search(k)}
        assert copy.data.metrics == kept, path.name
        listed = {item.path for item in restored.list_artifacts(copy.info.run_id, "bootstrap/timex")}
        assert "bootstrap/timex/base.json" in listed

    # issue 31 item 5: the stages re-run from scratch in this other folder write the pushed bytes
    # (the outputs that name MLflow runs, summaries and evidence, are bound to their runs by design)
    _stages_rerun_here_reproduce_the_pushed_lock(clone)


DETERMINISTIC_STAGES = ("prepare", "voc@timex", "adv@timex", "adv_p@timex", "finetune@minilm-timex")


def _out_hashes(project: Path, stage: str) -> dict[str, str]:
    import yaml

    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"][stage]
    return {out["path"]: out["md5"] for out in lock.get("outs", [])}


def _stages_rerun_here_reproduce_the_pushed_lock(clone: Path) -> None:
    before = {stage: _out_hashes(clone, stage) for stage in DETERMINISTIC_STAGES}
    forced = _dvc(clone, "repro", "--force", "--single-item", *DETERMINISTIC_STAGES)
    assert forced.returncode == 0, (forced.stdout + forced.stderr)[-3000:]
    for stage in DETERMINISTIC_STAGES:
        assert _out_hashes(clone, stage) == before[stage], f"{stage}: other bytes when re-run in another folder"
