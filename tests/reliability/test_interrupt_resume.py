"""Ctrl-C (SIGINT) or SIGTERM during a run: one line, exit 128 + signal, the run FAILED, and the
same command resumes to exactly the uninterrupted result without re-sending a cached request.
SIGTERM is stopped exactly as Ctrl-C (the same line, the same FAILED run); only its exit code is
143, not 130, so a scheduler that terminated the run is told apart from a person's Ctrl-C.

The signal is sent from inside the loopback server when it receives its k-th request, so the
run is stopped with that request in flight: at the first answer, halfway, and at the last.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import mlflow
import pytest

from src.billing.ledger import read_ledger
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
from tests.helpers.signals import ctrl_c_as_in_a_terminal

LINE = re.compile(r"^interrupted: (\d+) of (\d+) answers cached; the same command resumes$")


class SignallingServer(FakeOpenAIServer):
    """Sends ``signum`` to the registered client process when its ``signal_at``-th request arrives."""

    def __init__(self) -> None:
        super().__init__(answer=self._answer_or_signal)
        self.signal_at: int | None = None
        self.signum = signal.SIGINT
        self.victim: subprocess.Popen | None = None
        self.received = 0
        self.prompts: list[str] = []
        self._count_lock = threading.Lock()

    def _answer_or_signal(self, body: dict) -> str:
        with self._count_lock:
            self.received += 1
            self.prompts.append(last_user_message(body).rstrip())
            if self.signal_at is not None and self.received == self.signal_at and self.victim is not None:
                os.kill(self.victim.pid, self.signum)
        return _answer(body)


def _run(workspace: Path, server: SignallingServer, signal_at: int | None, command: list[str] | None = None):
    """The run as a foreground command (``command``: the run's arguments, default :func:`_command`),
    Ctrl-C'd by the server at its ``signal_at``-th request."""
    server.signal_at = signal_at
    server.received = 0
    ledger = [f"budget.ledger_file={workspace / 'spend.json'}", "budget.ledger=interrupts"]
    process = subprocess.Popen(
        [*(command or _command(workspace, server)), *ledger],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    server.victim = process
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _statuses(workspace: Path) -> list[str]:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    return [run.info.status for run in runs]


def _workspace(root: Path) -> Path:
    for split in ("base", "train"):
        write_records(root / "prepared" / "timex" / f"{split}.jsonl", _records())
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, float]:
    workspace = _workspace(tmp_path_factory.mktemp("reference"))
    with SignallingServer() as server:
        done = _run(workspace, server, None)
        assert done.returncode == 0, done.stderr[-3000:]
    return _final_metrics(workspace)


# each signal at the first request, and each once more: mid-run and at the last request
# (all six combinations cost a minute more of CI for nothing these four do not show)
@pytest.mark.parametrize(
    "signal_at, signum",
    [(1, signal.SIGINT), (1, signal.SIGTERM), (5, signal.SIGTERM), (len(WORDS), signal.SIGINT)],
    ids=["1-SIGINT", "1-SIGTERM", "5-SIGTERM", "last-SIGINT"],
)
def test_a_signal_stops_the_run_in_one_line_and_the_same_command_resumes(
    tmp_path: Path, reference: dict, signum: int, signal_at: int
):
    workspace = _workspace(tmp_path)
    with SignallingServer() as server:
        server.signum = signum
        done = _run(workspace, server, signal_at)
        assert done.returncode == 128 + signum, done.stderr[-3000:]
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        match = LINE.match(last)
        assert match, last
        cached = _cached_prompts(workspace / "cache")
        assert (int(match[1]), int(match[2])) == (len(cached), len(WORDS))
        assert len(cached) <= signal_at
        assert _statuses(workspace) == ["FAILED"]
        # the interrupted run's spend is in the sweep ledger: every answer that landed, at most what was sent
        sent_before = server.received + server.cut_short  # a request cut off mid-send was sent too
        (first,) = read_ledger(workspace / "spend.json")["ledgers"]["interrupts"]
        assert len(cached) <= first["requests"] <= sent_before

        server.prompts.clear()
        done = _run(workspace, server, None)
        assert done.returncode == 0, done.stderr[-3000:]
        resent = cached & set(server.prompts)
        assert not resent, f"re-sent requests for cached answers: {sorted(resent)}"
        assert len(set(server.prompts)) == len(WORDS) - len(cached)
        second = read_ledger(workspace / "spend.json")["ledgers"]["interrupts"][1]
        assert second["requests"] == len(WORDS) - len(cached)
    assert _final_metrics(workspace) == pytest.approx(reference)
    assert _statuses(workspace) == ["FAILED", "FINISHED"]


class BillingInterruptServer(FakeOpenAIServer):
    """Bills by its own rule (whitespace words at its own price, cost reported), draws billed blank
    answers the client retries, and sends SIGINT when its ``signal_at``-th request arrives; that
    request stays in flight until the client process is gone and is then dropped unanswered (never
    billed), so every bill the server keeps is one the client saw land."""

    def __init__(self) -> None:
        super().__init__(
            answer=self._answer_or_signal,
            fault_rate=0.3,
            kinds=("empty_stop",),
            seed=3,
            price_in_per_token=3e-6,
            price_out_per_token=7e-6,
        )
        self.signal_at: int | None = None
        self.victim: subprocess.Popen | None = None
        self.received = 0
        self._count_lock = threading.Lock()

    def _answer_or_signal(self, body: dict) -> str:
        with self._count_lock:
            self.received += 1
            stop = self.signal_at is not None and self.received == self.signal_at and self.victim is not None
        if stop:
            os.kill(self.victim.pid, signal.SIGINT)
            for _ in range(2400):  # the run ends (FAILED, settled) before this request is dropped
                if self.victim.poll() is not None:
                    break
                threading.Event().wait(0.05)
            raise ConnectionResetError("dropped: the client is gone")
        return _answer(body)


def _billed_run(workspace: Path, server: BillingInterruptServer, signal_at: int | None) -> subprocess.CompletedProcess:
    command = [
        "model.options.max_retries=4" if part == "model.options.max_retries=0" else part
        for part in _command(workspace, server)
    ]
    command = ["model.options.max_concurrency=1" if "max_concurrency" in part else part for part in command]
    return _run(workspace, server, signal_at, command)


def _final_usage(workspace: Path) -> dict[str, float]:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempgen")
    final = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]
    return {k.removeprefix("usage."): v for k, v in final.data.metrics.items() if k.startswith("usage.")}


def test_a_resumed_runs_usage_counts_what_the_interrupted_process_was_billed(tmp_path: Path):
    """After Ctrl-C the same command's run reports the whole run's spend: the answers the first
    process bought (billed retries included) at what the server billed, not as cached answers
    at the list price; a rerun of the finished run then reports them as cached."""
    workspace = _workspace(tmp_path)
    with BillingInterruptServer() as server:
        done = _billed_run(workspace, server, 6)
        assert done.returncode == 130, done.stderr[-3000:]
        first_bill, first_responses = server.billed_cost, server.billed["responses"]
        cached = _cached_prompts(workspace / "cache")
        assert 0 < len(cached) < len(WORDS)
        assert list((workspace / "spend-journals" / "carried").rglob("*.jsonl"))  # kept for the resume
        done = _billed_run(workspace, server, None)
        assert done.returncode == 0, done.stderr[-3000:]
        bill, responses = server.billed_cost, server.billed["responses"]
        usage = _final_usage(workspace)
        # the finished run again (the cache keys name the server): every answer from the cache
        again_done = _billed_run(workspace, server, None)
        assert again_done.returncode == 0, again_done.stderr[-3000:]
        assert server.billed["responses"] == responses
    assert first_bill > 0 and responses > len(WORDS)  # some billed blank answers were retried
    assert usage["cost"] == pytest.approx(bill, rel=1e-9)
    assert usage["cost_reported"] == pytest.approx(bill, rel=1e-9)
    assert usage["billed_attempts"] == responses
    assert (usage["sent"], usage["cached"]) == (len(WORDS), 0)
    assert usage["retried"] == usage["attempts"] - len(WORDS) >= responses - len(WORDS)
    # the ledger holds each process's own spend once: together, the server's bill
    entries = read_ledger(workspace / "spend.json")["ledgers"]["interrupts"]
    assert [entry["cost_usd"] for entry in entries[:2]] == pytest.approx([first_bill, bill - first_bill], rel=1e-9)
    assert first_responses < responses
    assert not list((workspace / "spend-journals" / "carried").rglob("*.jsonl"))  # counted: dropped
    again = _final_usage(workspace)
    assert (again["cost"], again["sent"], again["cached"]) == (0.0, 0, len(WORDS))


def test_a_connection_the_client_resets_counts_as_maybe_sent():
    """The bound ``sent_before`` above: a client stopped right after writing a request may reset its
    connection before the server reads it (the reset drops what was queued), so the server counts
    such a connection among the requests that may have been sent (CI once saw 6 billed, 5 counted)."""
    with SignallingServer() as server:
        host, port = server.base_url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port))) as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        deadline = time.monotonic() + 5
        while server.cut_short == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.cut_short == 1
