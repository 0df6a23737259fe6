"""``model.options.mode=batch``: the Batch API answers exactly what the synchronous path answers.

``python -m src.run model=gpt41 strategy=D`` on nine sentences, against the loopback Batch API
(tests/helpers/batch_server.py) that also answers synchronously. Checked: the same cache entries
and metrics as a synchronous run, one upload and one batch, the batch price; an expired batch,
a cancelled one and lines that keep failing go to the next batch and then the synchronous path,
each move named; a run killed while it polls resumes polling the same batch (0 duplicate
submissions); an endpoint without the Batch API is one line, not a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from src.data.schema import write_records
from src.tracking.history import read_history
from tests.helpers.batch_server import BatchServer
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import WORDS, answer, records

pytestmark = pytest.mark.timeout(300)
N = len(WORDS)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("batch")
    for split in ("base", "train"):
        write_records(root / "prepared" / "timex" / f"{split}.jsonl", records())
    return root


def overrides(workspace: Path, base_url: str, name: str, *extra: str) -> list[str]:
    return [
        "model=gpt41",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={base_url}",
        "model.options.batch_poll_s=0.05",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / name / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / name / 'mlflow.db'}",
        f"summary={workspace / name / 'summary.json'}",
        f"hydra.run.dir={workspace / name / 'outputs'}",
        "scoring.bootstrap_resamples=20",
        *extra,
    ]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}


def run(workspace: Path, base_url: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "src.run", *overrides(workspace, base_url, name, *extra)],
        cwd=REPO_ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=240,
    )


def cache(workspace: Path, name: str, keys: bool = False) -> dict[str, str]:
    """A run's cache: key (or, across endpoints, the request's messages) -> answer text."""
    entries = {}
    for path in (workspace / name / "cache").glob("??/*.json"):
        entry = json.loads(path.read_text())
        entries[path.stem if keys else json.dumps(entry["fields"]["messages"])] = entry["text"]
    return entries


def summary(workspace: Path, name: str) -> dict:
    return json.loads((workspace / name / "summary.json").read_text())


@pytest.fixture(scope="module")
def synchronous(workspace: Path) -> dict:
    with OpenAIServer(answer=answer, report_cost=False) as server:
        done = run(workspace, server.base_url, "sync")
    assert done.returncode == 0, done.stderr[-3000:]
    return {"cache": cache(workspace, "sync"), "summary": summary(workspace, "sync")}


@pytest.mark.parametrize("dialect", ["openai", "openrouter"])
def test_a_batch_run_equals_the_synchronous_run_at_the_batch_price(workspace: Path, synchronous: dict, dialect: str):
    with BatchServer(answer=answer, polls_to_complete=3, report_cost=False) as server:
        same_endpoint = run(workspace, server.base_url, f"{dialect}-sync")
        server.reset_counts()
        done = run(
            workspace, server.base_url, dialect, "model.options.mode=batch", f"model.options.batch_api={dialect}"
        )
        uploads, created, lines = list(server.uploads), list(server.created), dict(server.batch_lines)
        billed = dict(server.billed)
    assert same_endpoint.returncode == 0 and done.returncode == 0, done.stderr[-3000:]
    assert cache(workspace, dialect, keys=True) == cache(workspace, f"{dialect}-sync", keys=True)  # the same entries
    assert cache(workspace, dialect) == synchronous["cache"]
    assert summary(workspace, dialect)["metrics"] == synchronous["summary"]["metrics"]
    assert len(created) == 1 and set(lines.values()) == {1} and len(lines) == N
    assert [count for _, count in uploads] == [N] and (uploads[0][0] == "inline") == (dialect == "openrouter")
    usage = read_history(workspace / dialect / "summary.json")["usage"]
    sync_usage = read_history(workspace / "sync" / "summary.json")["usage"]
    assert usage["billed_attempts"] == billed["responses"] == N and usage["attempts"] == N
    assert usage["prompt_tokens"] == sync_usage["prompt_tokens"] == billed["prompt_tokens"]
    # no cost in batch output: priced at the model file's batch rates, half the list price
    assert usage["cost_reported"] == 0 and usage["cost_price_table"] == pytest.approx(sync_usage["cost"] / 2, abs=2e-6)
    assert f"batch {created[0]}: {N} requests submitted" in done.stdout + done.stderr


def test_expired_cancelled_and_failing_lines_go_on_to_the_next_batch_then_the_synchronous_path(
    workspace: Path, synchronous: dict
):
    with BatchServer(answer=answer, polls_to_complete=2) as server:
        server.expire_next(done=5)  # batch 1: 5 answered, 4 expire
        server.fail_in_batch("Sentence 8 ", status=500)  # never answered by a batch
        done = run(workspace, server.base_url, "rounds", "model.options.mode=batch", "model.options.batch_rounds=2")
        created, lines = list(server.created), dict(server.batch_lines)
        answered_synchronously = server.requests_matching("Sentence 8 ")  # its batch lines failed before the model
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert summary(workspace, "rounds")["metrics"] == synchronous["summary"]["metrics"]
    assert cache(workspace, "rounds") == synchronous["cache"]
    assert len(created) == 3  # the first batch, then two more rounds for what was left
    assert "batch round 1: 4 requests unanswered (4 x batch_expired); they go to the next batch" in output
    assert (
        "batch round 2: 1 requests unanswered (1 x HTTP 500: injected batch line failure); they go to the next"
        in output
    )
    assert (
        "batch round 3: 1 requests unanswered (1 x HTTP 500: injected batch line failure); they go to the synchronous"
        in output
    )
    assert "batch: 1 requests answered synchronously" in output
    assert sorted(lines.values()) == [1, 1, 1, 1, 1, 2, 2, 2, 3]  # each round submits only what is left
    assert answered_synchronously == 1


def test_a_cancelled_batch_is_named_and_its_requests_answered(workspace: Path, synchronous: dict):
    with BatchServer(answer=answer, polls_to_complete=2) as server:
        server.cancel_next(done=2)
        done = run(workspace, server.base_url, "cancelled", "model.options.mode=batch")
        created = list(server.created)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "7 x batch_cancelled" in output and len(created) == 2
    assert summary(workspace, "cancelled")["metrics"] == synchronous["summary"]["metrics"]


def _stats(base_url: str) -> dict:
    with urllib.request.urlopen(base_url + "/_stats", timeout=5) as response:
        return json.loads(response.read())


def test_a_run_killed_while_it_polls_resumes_polling_and_never_submits_twice(workspace: Path, synchronous: dict):
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.batch_server",
            "--hold",
            "--answer",
            "tests.helpers.resumable_run:answer",
        ],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = server.stdout.readline().strip()
        first = subprocess.Popen(
            [sys.executable, "-m", "src.run", *overrides(workspace, base_url, "killed", "model.options.mode=batch")],
            cwd=REPO_ROOT,
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not (_stats(base_url)["created"] and sum(_stats(base_url)["polls"].values()) >= 3):
            assert time.monotonic() < deadline and first.poll() is None, "the run never polled its batch"
            time.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        (state,) = (workspace / "killed" / "batches").glob("*.json")
        kept = json.loads(state.read_text())["batches"]
        assert [b["batch_id"] for b in kept] == _stats(base_url)["created"] and not kept[0]["collected"]
        urllib.request.urlopen(urllib.request.Request(base_url + "/_control", data=b'{"hold": false}'), timeout=5)
        again = run(workspace, base_url, "killed", "model.options.mode=batch")
        stats = _stats(base_url)
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-3000:]
    assert "resuming" in output and stats["uploads"] == 1 and len(stats["created"]) == 1
    assert set(stats["batch_lines"].values()) == {1} and len(stats["batch_lines"]) == N  # 0 duplicate submissions
    assert summary(workspace, "killed")["metrics"] == synchronous["summary"]["metrics"]
    assert cache(workspace, "killed") == synchronous["cache"]


def test_an_endpoint_without_the_batch_api_is_one_line_not_a_traceback(workspace: Path):
    with OpenAIServer(answer=answer) as server:
        done = run(workspace, server.base_url, "nobatch", "model.options.mode=batch")
        sent = server.request_count
    output = done.stdout + done.stderr
    assert done.returncode == 1 and sent == 0 and "Traceback" not in output
    assert "Batch API: HTTP 404" in output and "does this endpoint offer the Batch API? docs/cost.md" in output
