"""Is the MLflow store usable, and what to do when it fails mid-run (issue 29, item 5).

MLflow reports a corrupt or locked SQLite store as a long SQLAlchemy traceback, and a run whose
store fails mid-run cannot even be marked FAILED. Here the store is probed before a backend
starts (:func:`check_store`: one line naming the URI, without its credential, and what to do),
a store error raised mid-run is recognised (:func:`is_store_fault`), and the runs this process
opened are closed FAILED once the store answers again, waiting at most a bounded time
(:func:`close_own_runs`).
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

from src.redact import redact_uris
from src.tracking.store import HOST_TAG, PID_TAG

log = logging.getLogger(__name__)

SQLITE_HEADER = b"SQLite format 3\x00"
#: Known store schemes; anything else is refused before a run (``mlflow.tracking_uri``).
STORE_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql", "databricks")
#: SQLAlchemy / sqlite messages that mean the store itself failed (not the run's own data).
STORE_FAULT_MARKERS = (
    "database is locked",
    "file is not a database",
    "database disk image is malformed",
    "unable to open database file",
    "attempt to write a readonly database",
    "disk i/o error",
)
#: MLflow loggers that print a full traceback for a store error we report in one line.
NOISY_LOGGERS = ("mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store")


class StoreUnusable(ValueError):
    """The store cannot be used; the message is one line naming the URI and what to do."""


def shown(uri: str) -> str:
    """The URI as every message shows it: without its user-info (credential)."""
    return redact_uris(uri)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def check_store(uri: str, lock_wait_s: float) -> None:
    """Raise :class:`StoreUnusable` when the store at ``uri`` cannot work: an unknown scheme, a
    SQLite file that is unreadable, not a database, or locked for longer than ``lock_wait_s``."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if scheme not in STORE_SCHEMES:
        raise StoreUnusable(
            f"mlflow.tracking_uri: {shown(uri)!r} is no tracking store; use sqlite:///PATH or http(s)://HOST:PORT"
        )
    if scheme in ("http", "https") and "://" in uri and not uri.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]:
        raise StoreUnusable(f"mlflow.tracking_uri: {shown(uri)!r} names no host; use http(s)://HOST:PORT")
    database = sqlite_path(uri)
    if database is None or not database.exists():
        return  # a server is checked by MLflow when the experiment starts; a new file is created then
    where = f"tracking store {shown(uri)}"
    if database.is_dir():
        raise StoreUnusable(
            f"{where}: {database} is a folder, not a database file; point mlflow.tracking_uri at a file"
        )
    if not os.access(database, os.R_OK | os.W_OK):
        raise StoreUnusable(f"{where}: {database} is not readable and writable by this user; fix its permissions")
    try:
        with database.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as error:
        raise StoreUnusable(
            f"{where}: cannot read {database} ({error.strerror}); fix it or use another store"
        ) from None
    if header and header != SQLITE_HEADER:
        raise StoreUnusable(
            f"{where}: {database} is not an SQLite database; move it aside (or set mlflow.tracking_uri to another "
            "store) and rerun"
        )
    _check_not_locked(database, where, lock_wait_s)


def _check_not_locked(database: Path, where: str, lock_wait_s: float) -> None:
    """Take and release the write lock once, waiting at most ``lock_wait_s`` for another writer."""
    try:
        connection = sqlite3.connect(str(database), timeout=lock_wait_s, isolation_level=None)
    except sqlite3.Error as error:
        raise StoreUnusable(f"{where}: cannot open {database} ({error}); fix it or use another store") from None
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        connection.execute("ROLLBACK")
    except sqlite3.DatabaseError as error:
        if "locked" in str(error) or "busy" in str(error):
            raise StoreUnusable(
                f"{where}: the database is locked by another process (waited {lock_wait_s:g} s); let it finish or "
                "stop it, then rerun (mlflow.lock_wait_s waits longer)"
            ) from None
        raise StoreUnusable(f"{where}: {error}; move the file aside (or use another store) and rerun") from None
    finally:
        connection.close()


def is_store_fault(error: BaseException) -> bool:
    """True when ``error`` (or what it wraps) is the store failing: locked, corrupt, unreadable."""
    seen = 0
    while error is not None and seen < 10:
        if any(marker in str(error).lower() for marker in STORE_FAULT_MARKERS):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def fault_summary(error: BaseException) -> str:
    """The first store-fault marker in ``error``'s chain (``database is locked``), for one line."""
    text = ""
    seen = 0
    while error is not None and seen < 10:
        text += " " + str(error).lower()
        error = error.__cause__ or error.__context__
        seen += 1
    return next((marker for marker in STORE_FAULT_MARKERS if marker in text), "store error")


def quiet_store_tracebacks() -> None:
    """Keep MLflow from printing a whole traceback for a store error that is reported in one line."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def close_own_runs(uri: str, experiment: str, run_name: str, since_ms: int, wait_s: float) -> list[str]:
    """Mark FAILED every RUNNING run named ``run_name`` that this process opened (its pid tag, or
    no owner tag yet and started at or after ``since_ms``), retrying for at most ``wait_s`` while
    the store is locked. Returns the ids closed; raises the last store error after the wait."""
    from mlflow.tracking import MlflowClient

    deadline = time.monotonic() + wait_s
    while True:
        try:
            client = MlflowClient(uri)
            found = client.get_experiment_by_name(experiment)
            if found is None:
                return []
            running = client.search_runs([found.experiment_id], filter_string="attributes.status = 'RUNNING'")
            closed = []
            for run in running:
                if run.info.run_name == run_name and _opened_here(run, since_ms, PID_TAG, HOST_TAG):
                    client.set_terminated(run.info.run_id, status="FAILED")
                    closed.append(run.info.run_id)
            return closed
        except Exception as error:  # noqa: BLE001 - any store error: wait for the lock, bounded
            if not is_store_fault(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _opened_here(run: Any, since_ms: int, pid_tag: str, host_tag: str) -> bool:
    tags = run.data.tags
    if pid_tag in tags:
        return tags[pid_tag] == str(os.getpid()) and tags.get(host_tag) == socket.gethostname()
    return (run.info.start_time or 0) >= since_ms
