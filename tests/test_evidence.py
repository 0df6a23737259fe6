"""A run's evidence folder (src/tracking/evidence.py): written by the one runner, read by the analysis without
a store, restored into a fresh MLflow store (twice: the second adds nothing), and hand-run reports.

Real MLflow SQLite stores in tmp folders, the project's own runner and scorer; a two-line system.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from src.analyze import main as analyze_main
from src.report.loading import load_hand_runs, load_results
from src.scoring.system import DatasetPlan, ScoringOptions
from src.tracking.evaluation import RunRecord, evaluate_configuration, summary, write_summary
from src.tracking.evidence import RESTORED_TAG, read_evidence, restore_runs
from src.tracking.keys import KEY_TAG
from tests.helpers.echo_system import RECORDS, EchoSystem

EXPERIMENT = "evidence-test"


def _run(store: Path, evidence: Path, model: str = "m", strategy: str = "I", seed: int = 13):
    uri = f"sqlite:///{store / 'mlflow.db'}"
    params = {"seed": seed, "data_version": "raw:x/d:y", "git_commit": "abc-dirty"}
    record = RunRecord(f"{model}-{strategy}", "prompted", model, strategy, params)
    plans = [DatasetPlan("timex", name, store / f"{name}.jsonl", RECORDS) for name in ("base", "voc")]
    for plan in plans:
        plan.path.write_text("{}\n")
    outcome = evaluate_configuration(
        record, plans, EchoSystem(), ScoringOptions(50, 7, False, ()), EXPERIMENT, uri, evidence=evidence
    )
    return uri, record, outcome


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One configuration run into a store (artifacts under tmp), its summary and evidence folder."""
    root = tmp_path_factory.mktemp("evidence")
    store = root / "store"
    store.mkdir()
    MlflowClient(f"sqlite:///{store / 'mlflow.db'}").create_experiment(EXPERIMENT, (root / "artifacts").as_uri())
    uri, record, outcome = _run(store, root / "evidence/runs/m-I")
    write_summary(root / "summaries/runs/m-I.json", record, outcome, EXPERIMENT, uri)
    return root, uri, record, outcome


def test_the_runner_writes_compact_deterministic_evidence(study, tmp_path: Path):
    root, uri, record, outcome = study
    folder = root / "evidence/runs/m-I"
    run = json.loads((folder / "run.json").read_text())
    assert run["key"] == record.key and run["run_name"] == "m-I" and run["experiment"] == EXPERIMENT
    assert "run_id" not in run and "git_commit" not in run["params"]  # history: the history file's
    assert run["params"]["seed"] == "13" and run["tags"]["kind"] == "prompted" and run["tags"][KEY_TAG] == record.key
    assert run["metrics"]["timex.base.f1"] == pytest.approx(0.8)  # P 1, R 2/3: 2 of 3 gold words found
    assert run["metrics"]["timex.base.empty_answer_rate"] == 0.25
    assert not any(k.startswith(("tempgen.pid", "tempgen.host", "mlflow.")) for k in run["tags"])
    assert not any("wall_time" in k or "usage" in k for k in run["metrics"])
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.gz")) == [
        "bootstrap/timex/base.json.gz",
        "bootstrap/timex/voc.json.gz",
        "predictions/timex/base.jsonl.gz",
        "predictions/timex/voc.jsonl.gz",
    ]
    rows = [
        json.loads(line)
        for line in gzip.decompress((folder / "predictions/timex/base.jsonl.gz").read_bytes()).splitlines()
    ]
    assert [r["id"] for r in rows] == ["d1#s0", "d1#s1", "d2#s0"] and rows[0]["served"] == {"model": "m-served"}
    # the summary carries the answer-record metric; usage.json has a total over datasets
    assert summary(record, outcome)["metrics"]["timex"]["base"]["empty_answer_rate"] == 0.25
    usage = json.loads(
        Path(MlflowClient(uri).download_artifacts(outcome.run_id, "usage.json", str(tmp_path))).read_text()
    )
    assert usage["total"] == {"requests": 6.0, "cached": 2.0, "cost": 1.0, "latency_s": 4.0}
    # the same configuration again: another run id, the very same bytes in every file of the folder
    _, _, again = _run(root / "store", root / "evidence2")  # the same store: no second migration
    assert again.run_id != outcome.run_id
    for path in folder.rglob("*"):
        if path.is_file():
            assert (root / "evidence2" / path.relative_to(folder)).read_bytes() == path.read_bytes(), path
    history = json.loads((root / "history/runs/m-I.json").read_text())  # beside the summaries, not in them
    assert history["run_id"] == outcome.run_id and history["git_commit"] == "abc-dirty"
    assert history["usage"]["requests"] == 6.0 and "latency_s" not in history["usage"]


def test_the_analysis_reads_evidence_with_an_empty_store_and_refuses_a_foreign_folder(study, capsys):
    root, uri, _, outcome = study
    from_store = load_results(EXPERIMENT, uri, root / "summaries")
    empty = f"sqlite:///{root / 'empty.db'}"
    pulled = load_results(EXPERIMENT, empty, root / "summaries", evidence=root / "evidence")
    assert pulled.checked and list(pulled.runs.index) == ["m-I"]
    assert pulled.runs.loc["m-I", "run_id"] == outcome.run_id
    columns = ["config", "task", "dataset", "f1", "precision", "recall", "f1_ci_low", "n", "empty_answer_rate"]
    assert pulled.scores[columns].equals(from_store.scores[columns])
    assert (pulled.datasets["timex/base"].stats["m-I"] == from_store.datasets["timex/base"].stats["m-I"]).all()
    assert pulled.instances[("m-I", "timex", "voc")] == from_store.instances[("m-I", "timex", "voc")]
    assert [r["id"] for r in pulled.instances[("m-I", "timex", "base")]] == ["d1#s0", "d1#s1", "d2#s0"]
    # a folder of another run in place of the pipeline's: refused, naming it, one line
    _run(root / "store", root / "foreign/runs/m-I", seed=14)  # another configuration: another key
    capsys.readouterr()
    with pytest.raises(ValueError, match=r"evidence folder .*m-I holds run \w+ \(m-I\), but .*m-I.json names run"):
        load_results(EXPERIMENT, empty, root / "summaries", evidence=root / "foreign")
    code = analyze_main(
        [
            "--tracking-uri",
            empty,
            "--summaries",
            str(root / "summaries"),
            "--evidence",
            str(root / "foreign"),
            "--experiment",
            EXPERIMENT,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: evidence folder") and "\n" not in err


def test_restore_rebuilds_the_runs_once_and_touches_nothing_else(study, tmp_path: Path):
    root, uri, record, outcome = study
    fresh = f"sqlite:///{root / 'fresh.db'}"
    client = MlflowClient(fresh)
    mine = client.create_run(client.create_experiment(EXPERIMENT), run_name="m-I").info.run_id  # not the restore's
    created, skipped = restore_runs(root / "evidence", uri=fresh)
    assert len(created) == 1 and skipped == []
    assert restore_runs(root / "evidence", uri=fresh) == ([], [record.key])  # idempotent
    assert restore_runs(root / "evidence", uri=uri)[0] == []  # the original store holds the run already
    original, restored = MlflowClient(uri).get_run(outcome.run_id), client.get_run(created[0])
    assert restored.info.run_name == "m-I" and restored.info.status == "FINISHED"
    assert restored.data.tags[KEY_TAG] == record.key and restored.data.tags[RESTORED_TAG].endswith("evidence/runs/m-I")
    assert restored.data.params == {k: v for k, v in original.data.params.items() if k != "git_commit"}
    kept = {k: v for k, v in original.data.metrics.items() if "usage" not in k and k != "wall_time_s"}
    assert restored.data.metrics == kept
    paths = {
        a.path for folder in ("predictions/timex", "bootstrap/timex") for a in client.list_artifacts(created[0], folder)
    }
    assert paths == {
        "predictions/timex/base.jsonl",
        "predictions/timex/voc.jsonl",
        "bootstrap/timex/base.json",
        "bootstrap/timex/voc.json",
    }
    assert client.get_run(mine).info.status == "RUNNING" and KEY_TAG not in client.get_run(mine).data.tags
    # the restored store serves the analysis as the original did
    mlflow.set_tracking_uri(fresh)
    again = load_hand_runs(fresh, run_ids=[created[0]])
    assert again.scores["f1"].tolist() == load_results(EXPERIMENT, uri, root / "summaries").scores["f1"].tolist()


def test_hand_runs_are_labelled_and_one_run_per_configuration(study, tmp_path: Path):
    root, uri, _, outcome = study
    _, _, newer = _run(root / "store", root / "evidence-second")
    results = load_hand_runs(uri, EXPERIMENT)
    assert not results.checked and list(results.runs.index) == ["m-I"]
    assert results.runs.loc["m-I", "run_id"] == newer.run_id  # the newest run of the configuration
    older = len(MlflowClient(uri).search_runs([results.experiment_id])) - 1
    assert results.notes[0].startswith("Hand runs:") and f"the newest kept: m-I ({older})" in results.notes[1]
    assert ("m-I", "timex", "base") in results.instances
    by_id = load_hand_runs(uri, run_ids=[outcome.run_id])
    assert by_id.runs.loc["m-I", "run_id"] == outcome.run_id and "--runs " + outcome.run_id in by_id.notes[0]
    with pytest.raises(ValueError, match="two runs of configuration"):
        load_hand_runs(uri, run_ids=[outcome.run_id, newer.run_id])
    with pytest.raises(ValueError, match="not found"):
        load_hand_runs(uri, run_ids=["0" * 32])


def test_a_corrupt_evidence_file_is_one_clear_error(tmp_path: Path):
    folder = tmp_path / "e"
    (folder / "bootstrap/timex").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"key": "abc", "params": {}, "metrics": {}, "tags": {}}))
    (folder / "bootstrap/timex/base.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="base.json.gz: not a readable gzip file"):
        read_evidence(folder)
    (folder / "run.json").write_text("{}")
    with pytest.raises(ValueError, match="run.json: no 'key'"):
        read_evidence(folder)


def test_a_report_from_hand_runs_says_so(study, capsys):
    root, uri, _, outcome = study
    out = root / "hand-report"
    assert analyze_main(["--runs", outcome.run_id, "--tracking-uri", uri, "--out", str(out), "--resamples", "20"]) == 0
    report = (out / "report.md").read_text()
    assert "Hand runs: the configurations were chosen by hand (--runs " + outcome.run_id in report
    f1 = json.loads((root / "evidence/runs/m-I/run.json").read_text())["metrics"]["timex.base.f1"]
    assert f"{f1:.3f}" in report
    # the usage the runs logged (their usage.* metrics; a hand report has no summaries): 2 datasets x EchoSystem's,
    # on the provenance page (spend is history: it depends on what the cache held)
    history = (out / "provenance.md").read_text()
    assert (
        "**Requests and cost** (the 1 prompted runs' totals" in history and ": 6 requests, of which 0 sent" in history
    )
    assert "new cost $1.00 ($1.00 from runs that logged no split)" in history and "Requests and cost" not in report
    assert analyze_main(["--runs", ",", "--tracking-uri", uri, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: --runs names no run id"


def test_restore_command_with_nothing_pulled_is_one_line(tmp_path: Path, capsys):
    from src.evidence import main

    assert main(["restore", "--evidence", str(tmp_path / "none"), "--tracking-uri", f"sqlite:///{tmp_path}/s.db"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: no evidence folder (*/run.json) under {tmp_path / 'none'} (`dvc pull` first)"
    )
