"""A corrupt or locked MLflow store is one line, never a traceback, and leaves no run RUNNING.

Before the run (a file that is not a database, a store locked by another process): exit 2 and
no request sent. Mid-run (the store locked while answers arrive): the run is marked FAILED once
the lock is released (a bounded wait), exit 1, and the same command then completes from the
cache without re-sending an answered request.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import mlflow
import pytest

from src.data.schema import write_records
from src.tracking.health import StoreUnusable, check_store, is_store_fault
from tests.helpers.openai_server import FakeOpenAIServer, last_user_message
from tests.helpers.paths import REPO_ROOT
from tests.helpers.resumable_run import (
    WORDS,
    answer as _answer,
    cached_prompts as _cached_prompts,
    command as _command,
    env as _env,
    records as _records,
)


def _workspace(root: Path) -> Path:
    for split in ("base", "train"):
        write_records(root / "prepared" / "timex" / f"{split}.jsonl", _records())
    return root


def _run(workspace: Path, server: FakeOpenAIServer, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_command(workspace, server), *extra],
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def _statuses(database: Path) -> list[str]:
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{database}")
    experiment = client.get_experiment_by_name("tempgen")
    if experiment is None:
        return []
    return [run.info.status for run in client.search_runs([experiment.experiment_id])]


def test_a_file_that_is_not_a_database_stops_before_any_request(tmp_path: Path):
    workspace = _workspace(tmp_path)
    (workspace / "mlflow.db").write_bytes(b"this is no database\n" * 10)
    with FakeOpenAIServer(answer=_answer) as server:
        done = _run(workspace, server)
        assert server.request_count == 0
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert f"tracking store sqlite:///{workspace / 'mlflow.db'}" in line
    assert "is not an SQLite database; move it aside" in line


def test_a_store_locked_by_another_process_stops_before_any_request(tmp_path: Path):
    workspace = _workspace(tmp_path)
    database = workspace / "mlflow.db"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with FakeOpenAIServer(answer=_answer) as server:
            started = time.monotonic()
            done = _run(workspace, server, "mlflow.lock_wait_s=1")
            assert server.request_count == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert "the database is locked by another process (waited 1 s)" in line and str(database) in line
    assert time.monotonic() - started < 120


def test_the_store_check_names_the_uri_without_its_credential(tmp_path: Path):
    with pytest.raises(StoreUnusable, match=r"mlflow.tracking_uri: 'ftp://host/x' is no tracking store"):
        check_store("ftp://alice:TOKEN@host/x", 1)
    with pytest.raises(StoreUnusable, match="names no host") as info:
        check_store("http://alice:TOKEN@/x", 1)
    assert "TOKEN" not in str(info.value)
    check_store(f"sqlite:///{tmp_path / 'new.db'}", 1)  # a store not yet created is fine
    empty = tmp_path / "empty.db"
    empty.touch()
    check_store(f"sqlite:///{empty}", 1)  # sqlite treats an empty file as an empty database
    assert is_store_fault(RuntimeError("(sqlite3.OperationalError) database is locked"))
    assert not is_store_fault(RuntimeError("connection refused"))


class LockingServer(FakeOpenAIServer):
    """Locks the store from another connection when its ``lock_at``-th request arrives, for ``hold_s``
    (longer than MLflow's own 20 s busy timeout, so the run's next store write fails)."""

    def __init__(self, database: Path, lock_at: int, hold_s: float) -> None:
        super().__init__(answer=self._answer_and_lock)
        self.database, self.lock_at, self.hold_s = database, lock_at, hold_s
        self.received = 0
        self.prompts: list[str] = []
        self._count_lock = threading.Lock()
        self.holder: threading.Thread | None = None

    def _answer_and_lock(self, body: dict) -> str:
        with self._count_lock:
            self.received += 1
            self.prompts.append(last_user_message(body).rstrip())
            if self.received == self.lock_at:
                locked = threading.Event()
                self.holder = threading.Thread(target=self._hold, args=(locked,), daemon=True)
                self.holder.start()
                locked.wait(10)
        return _answer(body)

    def _hold(self, locked: threading.Event) -> None:
        connection = sqlite3.connect(self.database, isolation_level=None, timeout=30)
        connection.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(self.hold_s)
        connection.execute("ROLLBACK")
        connection.close()


@pytest.mark.timeout(600)
def test_a_store_locked_mid_run_marks_the_run_failed_and_the_rerun_completes(tmp_path: Path):
    workspace = _workspace(tmp_path)
    database = workspace / "mlflow.db"
    with LockingServer(database, lock_at=3, hold_s=45) as server:
        done = _run(workspace, server, "mlflow.lock_wait_s=60")
        assert done.returncode == 1, done.stderr[-3000:]
        line = _one_error_line(done.stderr)
        assert f"tracking store sqlite:///{database} failed during the run (database is locked)" in line
        assert "the run is marked FAILED" in line
        assert len(done.stderr.splitlines()) < 40, done.stderr  # no 470-line tracebacks
        assert _statuses(database) == ["FAILED"]
        cached = _cached_prompts(workspace / "cache")
        assert len(cached) == len(WORDS)  # every answer arrived before the store was needed again

        server.lock_at = -1
        server.prompts.clear()
        done = _run(workspace, server)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.prompts == []
    assert sorted(_statuses(database)) == ["FAILED", "FINISHED"]
