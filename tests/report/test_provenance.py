"""The analysis reads exactly the runs the pipeline's summaries name, and refuses ambiguous provenance.

A real SQLite MLflow store: configuration runs logged as the project logs them
(``tests.helpers.mlflow_study.log_run``), summaries shaped like the pipeline's.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from src.analyze import main
from src.report.provenance import (
    check_data_versions,
    read_summaries,
    split_data_version,
)
from src.tracking.keys import KEY_TAG
from tests.helpers.mlflow_study import DATASETS, EXPERIMENT, log_run, write_summary

MISSING_RUN = "0" * 32


def analyse(uri: str, summaries: Path, out: Path, experiment: str = EXPERIMENT) -> int:
    return main(
        [
            "--experiment",
            experiment,
            "--tracking-uri",
            uri,
            "--summaries",
            str(summaries),
            "--out",
            str(out),
            "--resamples",
            "100",
            "--seed",
            "1",
            "--stats-json",
            str(out / "none.json"),
        ]
    )


def outputs(out: Path) -> dict[str, bytes]:
    """analysis.json, report.md and every table, by relative path."""
    files = [out / "analysis.json", out / "report.md", *sorted((out / "tables").iterdir())]
    return {path.relative_to(out).as_posix(): path.read_bytes() for path in files}


def test_hand_runs_never_change_a_pipeline_report(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.create_experiment("pipeline", artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment("pipeline")
    datasets = DATASETS[:2]
    ids = {
        "small-I": log_run("small", "I", datasets=datasets),
        "small-D": log_run("small", "D", datasets=datasets, git_commit="abc123-dirty"),
        "large-I": log_run("large", "I", datasets=datasets),
        "bert-finetuned": log_run("bert", "finetuned", quality=0.8, datasets=datasets, kind="finetuned"),
    }
    summaries = tmp_path / "summaries"
    usage = {  # what each prompted run's summary says it sent and spent
        "small-I": {
            "requests": 10,
            "sent": 7,
            "cached": 3,
            "attempts": 9,
            "retried": 2,
            "billed_attempts": 8,
            "cost": 0.25,
            "cost_reported": 0.1,
            "cost_price_table": 0.1,
            "cost_estimated": 0.05,
            "prompt_tokens": 100,
            "estimated_prompt_tokens": 30,
        },  # fmt: skip
        "large-I": {"requests": 10, "sent": 0, "cached": 10, "attempts": 0, "cost": 0, "cached_cost": 1.5},
        "small-D": "garbage",  # not a usage block: left out, not a crash
    }
    for config, run_id in ids.items():
        write_summary(summaries, config, run_id, usage=usage.get(config))
    assert analyse(uri, summaries, tmp_path / "first", "pipeline") == 0
    first = outputs(tmp_path / "first")
    summary = json.loads(first["analysis.json"])
    assert {c: p["key"] for c, p in summary["provenance"].items()} == ids
    assert summary["provenance"]["small-I"] == {
        "summary": "runs/small-I.json",
        "key": ids["small-I"],
        "code_version": None,
        "data_version": "raw:test/datasets:test",
    }
    assert "usage" not in summary and "dirty_commits" not in summary  # history: the provenance page's
    report = (tmp_path / "first" / "provenance.md").read_text()
    assert (
        "**Requests and cost** (the 2 prompted runs' totals, as each logged them in `usage.json`): 20 requests, "
        "of which 7 sent (9 attempts, 8 of them billed, 2 of them retries; 0 failed), 13 answered from the cache"
        in report
    )
    assert "100 prompt and 0 completion tokens sent (30 of them counted here where a reply reported none)" in report
    assert (
        "new cost $0.25 (provider-reported $0.1, price table $0.1, estimated $0.05), cached answers' cost $1.50"
        in report
    )
    assert "**Uncommitted changes**: the runs of small-D" in report
    assert f"| small-I | `{ids['small-I']}` | `{ids['small-I']}` | `abc123` | False |" in report

    # a newer FINISHED run under a pipeline configuration's name, with other metrics, and a new hand configuration
    stray = log_run("small", "I", quality=0.0, datasets=datasets)
    log_run("large", "D", datasets=datasets)
    mlflow.set_tracking_uri(uri)
    assert analyse(uri, summaries, tmp_path / "second", "pipeline") == 0
    second = outputs(tmp_path / "second")
    assert second == first  # byte-identical: analysis.json, report.md and every table
    assert stray not in second["report.md"].decode() and "large-D" not in second["report.md"].decode()


@pytest.fixture()
def bad_runs(store):
    """Runs a summary must not name, in the shared store: name -> run id."""
    client = MlflowClient(store.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    other = client.create_experiment(f"elsewhere-{len(client.search_experiments())}")

    def make(name, status="FINISHED", tags=None, params=None, metrics=None, experiment_id=experiment):
        run = client.create_run(experiment_id, run_name=name, tags={"kind": "prompted", **(tags or {})})
        client.set_tag(run.info.run_id, KEY_TAG, run.info.run_id)  # keys are run ids in these stores
        for key, value in (params or {}).items():
            client.log_param(run.info.run_id, key, value)
        for key, value in (metrics or {}).items():
            client.log_metric(run.info.run_id, key, value)
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status)
        return run.info.run_id

    return {
        "running": make("hand-I", status="RUNNING"),
        "failed": make("hand-I", status="FAILED"),
        "killed": make("hand-I", status="KILLED"),
        "foreign": make("hand-I", experiment_id=other),
        "untagged": make("hand-I", tags={"kind": ""}),
        "twin": make("large-I", params={"model": "large", "strategy": "I"}),
        "version_a": make(
            "va-I",
            params={"model": "va", "strategy": "I", "data_version": "raw:test/datasets:aaa"},
            metrics={"timex.base.f1": 0.5},
        ),
        "version_b": make(
            "vb-I",
            params={"model": "vb", "strategy": "I", "data_version": "raw:test/datasets:bbb"},
            metrics={"timex.base.f1": 0.5},
        ),
        "raw_b": make(
            "rb-I",
            params={"model": "rb", "strategy": "I", "data_version": "raw:other/datasets:ccc"},
            metrics={"eventx.base.f1": 0.5},
        ),
    }


@pytest.mark.parametrize(
    "case, named, message",
    [
        ("running", ["running"], "is RUNNING, not FINISHED"),
        ("failed", ["failed"], "is FAILED, not FINISHED"),
        ("killed", ["killed"], "is KILLED, not FINISHED"),
        ("missing", [MISSING_RUN], f"run {MISSING_RUN} not found in experiment '{EXPERIMENT}'"),
        ("foreign", ["foreign"], f"not found in experiment '{EXPERIMENT}'"),
        ("untagged", ["untagged"], "is not a configuration run"),
        ("twin", ["large-I", "twin"], "both name configuration large-I"),
        (
            "data version",
            ["version_a", "version_b"],
            "runs scored on the same datasets (timex/base) disagree on their data version",
        ),
        ("raw data version", ["version_a", "raw_b"], "runs disagree on the raw data version"),
    ],
)
def test_a_summary_naming_an_unusable_run_is_a_one_line_error_naming_the_file(
    store, bad_runs, tmp_path, capsys, case, named, message
):
    summaries = tmp_path / "summaries"
    write_summary(summaries, "bert-finetuned", store.ids["bert-finetuned"])
    paths = []
    for n, name in enumerate(named):
        run_id = store.ids.get(name) or bad_runs.get(name) or name
        path = summaries / "runs" / f"case{n}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": run_id, "complete": True}), encoding="utf-8")
        paths.append(path)
    assert analyse(store.uri, summaries, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err
    assert str(paths[-1]) in err or (case in ("data version", "raw data version") and "runs/case1.json" in err)
    assert not (tmp_path / "out" / "analysis.json").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ({"model": "large"}, "no 'key'"),
        ("not json", "not a JSON summary"),
        ({"key": "RUN", "model": "small"}, "the summary says model 'small', the run logged 'large'"),
        ({"key": "RUN", "complete": False}, "the summary says the configuration is incomplete"),
    ],
)
def test_malformed_or_contradicting_summaries_are_errors(store, tmp_path, capsys, content, message):
    summaries = tmp_path / "summaries"
    path = summaries / "runs" / "large-I.json"
    path.parent.mkdir(parents=True)
    text = content if isinstance(content, str) else json.dumps(content).replace("RUN", store.ids["large-I"])
    path.write_text(text, encoding="utf-8")
    assert analyse(store.uri, summaries, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err


def test_one_run_named_twice_and_empty_folders_are_errors(store, tmp_path):
    summaries = tmp_path / "summaries"
    first = write_summary(summaries, "large-I", store.ids["large-I"])
    copy = summaries / "old" / "large-I.json"
    copy.parent.mkdir()
    copy.write_bytes(first.read_bytes())
    with pytest.raises(ValueError, match=f"{first}: names run {store.ids['large-I']}, as {copy} does"):
        read_summaries(summaries)
    with pytest.raises(ValueError, match="does not exist"):
        read_summaries(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no summary file"):
        read_summaries(tmp_path / "empty")


def test_summaries_are_found_recursively_in_path_order(store):
    listed = read_summaries(store.summaries)
    assert [s.name for s in listed] == ["finetuned/bert-finetuned.json"] + sorted(
        f"runs/{c}.json" for c in store.ids if not c.endswith("finetuned")
    )
    assert {s.key for s in listed} == set(store.ids.values())


def test_data_versions_are_compared_where_the_param_can_tell():
    assert split_data_version("raw:abc/datasets:def") == ("raw:abc", "datasets:def")
    assert split_data_version("unknown") == (None, None)
    rows = [
        {"config": "a", "data_version": "raw:x/datasets:1", "summary": "a.json"},
        {"config": "b", "data_version": "raw:x/datasets:2", "summary": "b.json"},
        {"config": "c", "data_version": None, "summary": "c.json"},
    ]
    # different dataset sets: the digests cover different files, so they cannot be compared
    check_data_versions(rows, {"a": {"timex/base"}, "b": {"timex/base", "timex/t2c"}, "c": {"timex/base"}})
    with pytest.raises(ValueError, match=r"a \(a.json\) has raw:x/datasets:1, b \(b.json\) has raw:x/datasets:2"):
        check_data_versions(rows, {"a": {"timex/base"}, "b": {"timex/base"}})


def test_the_paid_rewriting_spend_is_summed_into_the_provenance_page(tmp_path):
    """Regression (issue 41): the adv_p rewriter's spend (history/derive/<task>/adv_p.json) reached
    no report: the sweep's provenance counted the runs only."""
    from src.report.prose import rewriting_lines
    from src.report.provenance import rewriting_usage

    folder = tmp_path / "history" / "derive"
    spends = {
        "timex": {"requests": 44, "sent": 40, "cached": 4, "attempts": 43, "retried": 3, "cost": 0.0125},
        "eventx": {"requests": 44, "sent": 44, "cached": 0, "attempts": 44, "retried": 0, "cost": 0.0100},
    }
    for task, usage in spends.items():
        (folder / task).mkdir(parents=True)
        record = {"stage": f"adv_p@{task}", "usage": {**usage, "prompt_tokens": 1000, "completion_tokens": 200}}
        (folder / task / "adv_p.json").write_text(json.dumps(record))
    total = rewriting_usage(folder)
    assert total["runs"] == 2 and total["requests"] == 88 and total["attempts"] == 87 and total["retried"] == 3
    assert total["cost"] == 0.0225 and total["prompt_tokens"] == 2000
    line = rewriting_lines(total)[0]
    assert "2 `adv_p` stages" in line and "88 requests, of which 84 sent (87 attempts, 3 of them retries)" in line
    assert "new cost $0.0225" in line
    assert rewriting_usage(tmp_path / "none") == {} and rewriting_lines({}) == []
    (folder / "timex" / "adv_p.json").write_text("{torn")
    with pytest.raises(ValueError, match="adv_p.json: not a JSON history file"):
        rewriting_usage(folder)
