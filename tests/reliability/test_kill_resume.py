"""A run killed with SIGKILL at any point resumes to exactly the uninterrupted result.

The model is a loopback OpenAI-compatible server; the run is ``python -m src.run`` in a
subprocess, killed from inside the server when it serves its k-th answer. Each resume must
end with the metrics of an uninterrupted run, send no request for an answer already in the
response cache, and leave no MLflow run RUNNING.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from src.data.schema import Record, Span, write_records
from tests.backends.fake_openai_server import FakeOpenAIServer, last_user_message

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["Friday", "today", "1998", "March", "noon", "yesterday", "2001", "Monday", "tonight"]


def _records() -> list[Record]:
    records = []
    for n, word in enumerate(WORDS):
        text = f"Sentence {n} happened {word} ."
        start = text.index(word)
        records.append(Record(f"d{n}#s0", f"d{n}", text, [Span(start, start + len(word), word, "TIMEX")], "test"))
    return records


def _answer(body: dict) -> str:
    """Half of the answers are right, the rest find the wrong word: metrics are not trivial."""
    message = last_user_message(body).rstrip()
    n = int(message.split("Sentence ")[-1].split()[0])
    return json.dumps([WORDS[n]] if n % 2 == 0 else ["happened"])


class KillingServer(FakeOpenAIServer):
    """Kills the registered client process when it serves its ``kill_at``-th answer."""

    def __init__(self) -> None:
        super().__init__(answer=self._answer_or_kill)
        self.kill_at: int | None = None
        self.victim: subprocess.Popen | None = None
        self.answered = 0
        self.prompts: list[str] = []
        self._count_lock = threading.Lock()

    def _answer_or_kill(self, body: dict) -> str:
        with self._count_lock:
            self.answered += 1
            self.prompts.append(last_user_message(body).rstrip())
            if self.kill_at is not None and self.answered == self.kill_at and self.victim is not None:
                os.kill(self.victim.pid, signal.SIGKILL)
        return _answer(body)


def _command(workspace: Path, server: FakeOpenAIServer) -> list[str]:
    return [
        sys.executable,
        "-m",
        "src.run",
        "model=qwen25_7b",
        "strategy=D",
        "dimension=base",
        "tasks=[timex]",
        f"model.options.base_url={server.base_url}",
        "+model.options.max_concurrency=2",
        "+model.options.max_retries=0",
        f"paths.prepared={workspace / 'prepared'}",
        f"paths.cache={workspace / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{workspace / 'mlflow.db'}",
        f"summary={workspace / 'summary.json'}",
        f"hydra.run.dir={workspace / 'outputs'}",
        "scoring.bootstrap_resamples=100",
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "OPENROUTER_API_KEY")}


def _cached_prompts(cache: Path) -> set[str]:
    prompts = set()
    for entry in cache.glob("??/*.json"):
        fields = json.loads(entry.read_text())["fields"]
        prompts.add(fields["messages"][-1][1].rstrip())
    return prompts


def _run(workspace: Path, server: KillingServer, kill_at: int | None) -> int:
    server.kill_at = kill_at
    process = subprocess.Popen(
        _command(workspace, server), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    server.victim = process
    _, stderr = process.communicate(timeout=300)
    if kill_at is None:
        assert process.returncode == 0, stderr[-3000:]
    return process.returncode


def _final_metrics(workspace: Path) -> dict[str, float]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert [r.info.status for r in runs].count("RUNNING") == 0, [r.info.status for r in runs]
    final = runs[-1]
    assert final.info.status == "FINISHED"
    return {k: v for k, v in final.data.metrics.items() if not k.startswith(("wall_time", "timex.base.usage"))}


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    for split in ("base", "train"):
        write_records(tmp_path / "prepared" / "timex" / f"{split}.jsonl", _records())
    return tmp_path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, float]:
    workspace = tmp_path_factory.mktemp("reference")
    for split in ("base", "train"):
        write_records(workspace / "prepared" / "timex" / f"{split}.jsonl", _records())
    with KillingServer() as server:
        _run(workspace, server, None)
    return _final_metrics(workspace)


@pytest.mark.parametrize("kill_at", [1, 2, 4, 7, 9])
def test_sigkill_then_resume_equals_the_uninterrupted_run(workspace: Path, reference: dict, kill_at: int):
    with KillingServer() as server:
        code = _run(workspace, server, kill_at)
        assert code == -signal.SIGKILL
        cached = _cached_prompts(workspace / "cache")
        assert len(cached) <= kill_at
        server.prompts.clear()
        _run(workspace, server, None)
        resent = cached & set(server.prompts)
        assert not resent, f"re-sent requests for cached answers: {sorted(resent)}"
        # distinct prompts: the killed client's in-flight request may still be logged by its
        # server thread after the clear (it was never answered, so it is rightly sent again)
        assert len(set(server.prompts)) == len(WORDS) - len(cached)
    assert _final_metrics(workspace) == pytest.approx(reference)
