"""A whole run through provider faults (issue 29's scenario): nothing from a fault is scored or
cached, the served model is recorded, and one rerun heals to the fault-free metrics.

``python -m src.run model=qwen25_7b strategy=D tasks=[timex] datasets=[base] limit=40`` against
the loopback server, 30% of replies faulty. Billed requests are bounded per instance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from src.data.schema import Record, Span, write_records
from tests.helpers.openai_server import OTHER_MODEL, OpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["Friday", "today", "1998", "March", "noon", "yesterday", "2001", "Monday", "tonight", "May"]
N = 40
MAX_RETRIES = 4
NEW_FAULTS = ("empty_stop", "empty_error", "parts", "mismatch_same", "mismatch_other", "length", "bad_gzip")


def _records() -> list[Record]:
    records = []
    for n in range(N):
        word = WORDS[n % len(WORDS)]
        text = f"Sentence {n} happened {word} ."
        start = text.index(word)
        records.append(Record(f"d{n}#s0", f"d{n}", text, [Span(start, start + len(word), word, "TIMEX")], "test"))
    return records


def _answer(body: dict) -> str:
    """A third of the answers find the wrong word, so the metrics are not trivial."""
    n = int(last_user_message(body).rstrip().split("Sentence ")[-1].split()[0])
    return json.dumps([WORDS[n % len(WORDS)]] if n % 3 else ["happened"])


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", _records())
    return tmp_path


def _overrides(workspace: Path, server: OpenAIServer, name: str, *extra: str) -> list[str]:
    return [
        "model=qwen25_7b",
        "strategy=D",
        "tasks=[timex]",
        "datasets=[base]",
        f"limit={N}",
        f"model.options.base_url={server.base_url}",
        f"model.options.max_retries={MAX_RETRIES}",
        "model.options.backoff_base_s=0.01",
        "model.options.backoff_max_s=0.02",
        "model.options.timeout_s=5",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / name / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / name / 'mlflow.db'}",
        f"summary={workspace / name / 'summary.json'}",
        f"hydra.run.dir={workspace / name / 'outputs'}",
        "scoring.bootstrap_resamples=50",
        *extra,
    ]


def _run(overrides: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "src.run", *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _last_run(workspace: Path, name: str):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / name / 'mlflow.db'}")
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    runs = client.search_runs([experiments[0].experiment_id], order_by=["attributes.start_time DESC"])
    return client, runs[0]


def _f1(workspace: Path, name: str) -> float:
    return json.loads((workspace / name / "summary.json").read_text())["metrics"]["timex"]["base"]["f1"]


def test_a_run_through_30_percent_faults_heals_to_the_fault_free_metrics_within_one_rerun(workspace: Path):
    with OpenAIServer(answer=_answer) as clean:
        done = _run(_overrides(workspace, clean, "clean"))
        assert done.returncode == 0, done.stderr[-3000:]
    fault_free = _f1(workspace, "clean")
    assert 0 < fault_free < 1

    strict = "model.options.on_model_mismatch=fail"
    with OpenAIServer(answer=_answer, fault_rate=0.3, seed=29, kinds=NEW_FAULTS) as faulty:
        overrides = _overrides(workspace, faulty, "faulty", strict)
        faulty.doom("Sentence 7 ", "empty_error")  # one instance fails whatever the draws
        first = _run(overrides)
        faulty.spare("Sentence 7 ")
        first_requests = dict(faulty.requests)
        assert sum(faulty.served_faults.values()) >= 0.2 * N, faulty.served_faults
        assert set(faulty.served_faults) >= {"empty_stop", "empty_error", "mismatch_other", "bad_gzip"}
        output = first.stdout + first.stderr
        assert first.returncode == 1, output[-3000:]  # named, listed and exit 1; never scored on a subset
        assert "request(s) failed, dataset not scored" in output and "Traceback" not in output
        client, failed_run = _last_run(workspace, "faulty")
        assert failed_run.info.status == "FAILED" and "timex.base.f1" not in failed_run.data.metrics
        folder = client.download_artifacts(failed_run.info.run_id, "failures", str(workspace / "failures"))
        failed_ids = json.loads((Path(folder) / "timex" / "base.json").read_text())
        assert (
            failed_ids["d7#s0"] == f"gave up after {MAX_RETRIES + 1} attempts: blank answer with finish_reason 'error'"
        )
        assert all(cause.startswith("gave up after") and instance in output for instance, cause in failed_ids.items())
        again = _run(overrides)  # the rerun: only the failed requests go out
        resent = {p for p in faulty.requests if faulty.requests[p] > first_requests.get(p, 0)}
        billed = sum(faulty.requests.values())
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(resent) == len(failed_ids)
    assert _f1(workspace, "faulty") == fault_free  # 0 instances scored from a fault
    assert max(first_requests.values()) <= MAX_RETRIES + 1 and billed / N <= 1.8, billed

    client, run = _last_run(workspace, "faulty")
    metrics = run.data.metrics
    assert metrics["timex.base.empty_answer_rate"] == 0.0
    assert metrics["timex.base.served_model_mismatch_rate"] == 0.0
    assert run.data.tags["served_models"] == "qwen/qwen-2.5-7b-instruct"
    entries = [json.loads(p.read_text()) for p in (workspace / "faulty" / "cache").glob("??/*.json")]
    assert len(entries) == N and all(e["text"].strip() and e["finish_reason"] == "stop" for e in entries)
    assert all(e["served"]["model"] == "qwen/qwen-2.5-7b-instruct" for e in entries)

    # The cache command finds exactly this configuration's entries, and none of another one.
    listing = subprocess.run(
        [sys.executable, "-m", "src.cache", "list", "--dir", str(workspace / "faulty" / "cache"), "--run",
         " ".join(overrides)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert listing.stdout.startswith(f"{N} of {N} entries selected"), listing.stdout[:300]
    other = " ".join(o if o != "strategy=D" else "strategy=A" for o in overrides)
    listing = subprocess.run(
        [sys.executable, "-m", "src.cache", "list", "--dir", str(workspace / "faulty" / "cache"), "--run", other],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listing.stdout.startswith(f"0 of {N} entries selected"), listing.stdout[:300] + listing.stderr[-1000:]


def test_with_warn_a_fallback_model_is_recorded_counted_and_warned_once(workspace: Path):
    with OpenAIServer(answer=_answer, fault_rate=0.3, seed=29, kinds=("mismatch_other",)) as faulty:
        done = _run(_overrides(workspace, faulty, "warn", "model.options.on_model_mismatch=warn"))  # pinned: fail
        served = faulty.served_faults["mismatch_other"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert served > 0
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if "served by another model" in line]
    assert len(warnings) == 1 and f"{served} of {N} answers" in warnings[0] and OTHER_MODEL in warnings[0]
    client, run = _last_run(workspace, "warn")
    assert run.data.metrics["timex.base.served_model_mismatch_rate"] == pytest.approx(served / N)
    assert run.data.tags["served_models"] == f"{OTHER_MODEL},qwen/qwen-2.5-7b-instruct"
    artifacts = Path(client.download_artifacts(run.info.run_id, "served", str(workspace / "downloaded")))
    record = json.loads((artifacts / "timex" / "base.json").read_text())
    assert sum(item["served"].get("model") == OTHER_MODEL for item in record.values()) == served
