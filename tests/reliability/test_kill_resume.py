"""A run killed with SIGKILL at any point resumes to exactly the uninterrupted result.

The model is a loopback OpenAI-compatible server; the run is ``python -m src.run`` in a
subprocess, killed from inside the server when it serves its k-th answer. Each resume must
end with the metrics of an uninterrupted run, send no request for an answer already in the
response cache, and leave no MLflow run RUNNING.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from src.data.schema import write_records
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import (
    WORDS,
    answer as _answer,
    cached_prompts as _cached_prompts,
    command as _command,
    env as _env,
    final_metrics as _final_metrics,
    records as _records,
)


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


def _run(workspace: Path, server: KillingServer, kill_at: int | None) -> int:
    server.kill_at = kill_at
    process = subprocess.Popen(
        _command(workspace, server),
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server.victim = process
    _, stderr = process.communicate(timeout=300)
    if kill_at is None:
        assert process.returncode == 0, stderr[-3000:]
    return process.returncode


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


@pytest.mark.parametrize("kill_at", [1, 4, 9])  # first, middle and last request
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
