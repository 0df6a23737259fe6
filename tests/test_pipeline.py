"""The whole DVC pipeline on the ``smoke`` profile, in a copy of the project.

This is the issue-7 acceptance path in miniature: ``dvc repro`` from the raw data to the
report, every number in the report present in MLflow, and a second ``dvc repro`` that
re-runs nothing; and issue 31's: ``dvc push``, a fresh clone with an empty MLflow store,
``dvc pull``, an analysis change re-run from the pulled evidence, and the restore; and issue
43's: the answers travel with the push, so the pulled clone's forced re-run sends no request.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from src.tracking.keys import KEY_TAG
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
        assert summary["complete"] and summary["key"] == runs[name].data.tags[KEY_TAG]
        assert "run_id" not in summary and "usage" not in summary  # history, not output (docs/mlflow.md)
        history = json.loads((project / f"history/runs/{name}.json").read_text())
        assert history["run_id"] == runs[name].info.run_id
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
    for name in tables:  # F1, P, R and the error counts per configuration: equal to the digit
        assert _without_resampled(clone / "reports/tables" / name) == _without_resampled(
            project / "reports/tables" / name
        ), name

    # (c) the restore rebuilds every run in the clone's store, once: configurations, trainings, the analysis
    folders = sorted(path.parent for path in (clone / "evidence").glob("**/run.json"))
    assert len(folders) == len(list((clone / "summaries").glob("**/*.json"))) + 2 + 1  # 2 trainings, 1 analysis
    before = _keyed_runs(_mlflow_client(clone))  # the analysis the clone just ran is there already
    first = _run_in(clone, "-m", "src.evidence", "restore")
    assert first.returncode == 0, first.stderr[-3000:]
    restored_count = len(folders) - len(before)
    assert f"restored {restored_count} run(s), {len(before)} already" in first.stdout, first.stdout + first.stderr
    second = _run_in(clone, "-m", "src.evidence", "restore")
    assert f"restored 0 run(s), {len(folders)} already" in second.stdout, second.stdout + second.stderr
    _restored_runs_equal_the_originals(_mlflow_client(project), _mlflow_client(clone), folders, set(before))

    # issue 43: every answer the chain used came with the pull (each file named by the sha256 of its
    # bytes), and this clone has no response cache of its own
    assert not (clone / ".cache/generations").exists()
    for folder in ANSWER_FOLDERS:
        files = sorted((clone / folder).glob("*.json"))
        assert files, f"{folder}: no answers pulled"
        assert all(hashlib.sha256(f.read_bytes()).hexdigest() + ".json" == f.name for f in files), folder

    # issues 38 and 43: the whole chain re-run with --force in this other folder, with another store,
    # sends no request to the model (the engine logs each batch it decodes, "llamacpp: N requests")
    # and writes the pushed lock, byte for byte
    subprocess.run(["git", "checkout", "--", "sweep.yaml", "dvc.lock"], cwd=clone, check=True)  # undo (b)
    pushed = _out_hashes(project)
    forced = _dvc(clone, "repro", "--force")
    log = forced.stdout + forced.stderr
    assert forced.returncode == 0, log[-3000:]
    looked_up = [int(n) for n in re.findall(r" cached, (\d+) to generate", log)]
    assert len(looked_up) >= 4 and not any(looked_up), looked_up  # both run@ and both adv_p@ stages looked
    assert "llamacpp: " not in log, [line for line in log.splitlines() if "llamacpp: " in line][:3]
    for name in ("smollm2_135m-I", "smollm2_135m-A+D"):
        usage = json.loads((clone / f"history/runs/{name}.json").read_text())["usage"]
        assert usage["sent"] == 0 and usage["cached"] + usage.get("duplicates", 0) == usage["requests"] > 0, usage
    rerun = _out_hashes(clone)
    assert rerun.keys() == pushed.keys()
    differ = sorted(path for path in pushed if rerun[path] != pushed[path])
    assert not differ, f"other bytes when re-run in another folder: {differ}"
    assert (clone / "dvc.lock").read_text() == (project / "dvc.lock").read_text()
    # the same answers again: a push from the clone has nothing new to move
    again = _dvc(clone, "push", "-r", "team")
    assert again.returncode == 0 and "Everything is up to date" in again.stdout + again.stderr, again.stdout
    _two_colleagues_answers_merge_without_a_conflict(clone)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, capture_output=True, text=True
    )


def _two_colleagues_answers_merge_without_a_conflict(clone: Path) -> None:
    """Each stage's answers are its own entry of dvc.lock: colleague A's new answers for one
    configuration and B's for another merge in git without a conflict, both kept."""
    import yaml

    lock_file = clone / "dvc.lock"
    stages = yaml.safe_load(lock_file.read_text())["stages"]

    def answers_hash(stage: str) -> str:
        [out] = [o for o in stages[stage]["outs"] if o["path"].startswith("answers/")]
        return out["md5"]

    assert _git(clone, "commit", "-q", "--allow-empty", "-am", "re-run").returncode == 0
    start = _git(clone, "rev-parse", "HEAD").stdout.strip()
    mine = {"a": ("run@smollm2_135m-I", "a" * 32 + ".dir"), "b": ("run@smollm2_135m-A+D", "b" * 32 + ".dir")}
    for branch, (stage, new_hash) in mine.items():
        assert _git(clone, "checkout", "-q", "-b", branch, start).returncode == 0
        text = lock_file.read_text()
        assert text.count(answers_hash(stage)) == 1, stage
        lock_file.write_text(text.replace(answers_hash(stage), new_hash))
        assert _git(clone, "commit", "-qam", f"{branch}'s answers").returncode == 0
    merged = _git(clone, "merge", "-q", "--no-edit", "a")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    text = lock_file.read_text()
    assert all(new_hash in text for _, new_hash in mine.values())


#: The dataset tables' intervals, which the analysis computes with its own resamples (the rest is the runs').
RESAMPLED_COLUMNS = ("f1_ci_low", "f1_ci_high", "f1_ci_low_instance", "f1_ci_high_instance")


def _without_resampled(table: Path) -> list[dict[str, str]]:
    """A dataset table's rows without the columns that change with ``sweep.resamples``."""
    import csv

    with open(table, newline="", encoding="utf-8") as handle:
        return [{k: v for k, v in row.items() if k not in RESAMPLED_COLUMNS} for row in csv.DictReader(handle)]


#: The smoke chain's answers folders (dvc.yaml: the run@ and adv_p@ stages' persistent outputs).
ANSWER_FOLDERS = (
    "answers/run/smollm2_135m-I",
    "answers/run/smollm2_135m-A+D",
    "answers/adv_p/timex",
    "answers/adv_p/eventx",
)


def _keyed_runs(client) -> dict[str, object]:
    """The store's runs by their key (the newest finished one of a key)."""
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], order_by=["attributes.start_time ASC"]
    )
    return {run.data.tags[KEY_TAG]: run for run in runs if KEY_TAG in run.data.tags and run.info.status == "FINISHED"}


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def _restored_runs_equal_the_originals(source, restored, folders: list[Path], skipped: set[str]) -> None:
    """Name, nesting, params, metrics (a training's step by step) and artifacts as on the machine
    that ran the study; the clone's own fresh analysis (``skipped``) aside."""
    from src.tracking.evidence import MACHINE_METRIC, UNRESTORED_ARTIFACTS
    from src.tracking.keys import without_history

    def restorable(client, run) -> set[str]:
        return {path for path in _artifacts(client, run.info.run_id) if not path.startswith(UNRESTORED_ARTIFACTS)}

    originals, copies = _keyed_runs(source), _keyed_runs(restored)
    kinds = []
    for folder in folders:
        key = json.loads((folder / "run.json").read_text())["key"]
        if key in skipped:
            continue
        original, copy = originals[key], copies[key]
        kinds.append(copy.data.tags.get("kind"))
        assert copy.info.run_name == original.info.run_name, folder
        parent = "mlflow.parentRunId"
        assert (parent in copy.data.tags) == (parent in original.data.tags), f"{folder}: nesting"
        assert copy.data.params == without_history(original.data.params), folder
        kept = {k: v for k, v in original.data.metrics.items() if not MACHINE_METRIC.search(k)}
        assert copy.data.metrics == kept, folder
        for metric in kept:
            steps = [(m.step, m.value) for m in source.get_metric_history(original.info.run_id, metric)]
            assert sorted((m.step, m.value) for m in restored.get_metric_history(copy.info.run_id, metric)) == sorted(
                steps
            ), f"{folder}: {metric}"
        assert _artifacts(restored, copy.info.run_id) == restorable(source, original), folder
    assert sorted(kinds, key=str).count("training") == 2 and "finetuned" in kinds and "prompted" in kinds, kinds


def _out_hashes(project: Path) -> dict[str, str]:
    """Every output of dvc.lock: its path and hash."""
    import yaml

    stages = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    return {out["path"]: out["md5"] for stage in stages.values() for out in stage.get("outs", [])}
