"""Where a batch run keeps what it submitted, so that a killed run resumes instead of resubmitting.

One file per endpoint and model beside the response cache (``<cache>/../batches/<key>.json``),
read and written under an exclusive lock and replaced atomically. Each entry is one batch: its
request lines' ``custom_ids``, the uploaded file (OpenAI's dialect), the batch id once created,
and whether its results were collected. Every step is recorded before the next is taken.

One process collects a batch: it holds the batch's *collect lock* (a lock file beside the
state, released by the kernel if the process dies) while it polls, downloads and settles, and
keeps the downloaded lines in a results file beside the state before it settles them. Another
process that shares the batch waits for the lock and reads the answers from that file without
billing them again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from filelock import AsyncFileLock, FileLock

from src.core.digest import digest
from src.core.requests import ChatRequest
from src.durable import replace_durably

STATE_FORMAT = 1


def custom_ids(backend: Any, requests: list[ChatRequest]) -> list[str]:
    """A stable id per request line: the digest of the body it sends (a repeat in one call gets
    ``-2``, ``-3``...), so a restarted run finds its own lines in a batch it submitted before."""
    seen: Counter[str] = Counter()
    ids = []
    for request in requests:
        path, body = backend.body(request)
        line = digest(json.dumps([path, body], sort_keys=True), 40)
        seen[line] += 1
        ids.append(line if seen[line] == 1 else f"{line}-{seen[line]}")
    return ids


def state_file(backend: Any) -> Path:
    """Where the batches of this endpoint and model are recorded."""
    folder = backend.batch_dir or Path(".cache/batches")
    key = digest(f"{backend.base_url}|{backend.model_id}", 16)
    return folder / f"{key}.json"


def open_batches(backend: Any, requests: list[ChatRequest]) -> list[str]:
    """The keys of the batches in flight (submitted, not collected) of ``backend``'s endpoint and
    model that hold any of ``requests``: a run's own batches, not another run's of the same model
    (another strategy's batch still bills that run's lines); [] when it sends no batches (its own,
    or the one a cache wraps)."""
    inner = backend.sender
    if inner.mode != "batch" or not requests:
        return []
    path = state_file(inner)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    wanted = set(custom_ids(inner, requests))
    return [b["key"] for b in data.get("batches", []) if not b.get("collected") and wanted & set(b["custom_ids"])]


class BatchState:
    """The file of submitted batches."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(self.path.with_name(self.path.name + ".lock"), preserve_lock_file=True):
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                data = {"format": STATE_FORMAT, "batches": []}
            yield data
            replace_durably(self.path, json.dumps(data, indent=1))

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Held while a process decides which requests to submit and submits them, so two processes
        of one endpoint and model never submit the same request."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(self.path.with_name(self.path.name + ".claim"), preserve_lock_file=True):
            yield

    def _beside(self, key: str, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.stem}.{digest(key, 16)}{suffix}")

    @contextlib.asynccontextmanager
    async def collecting(self, key: str, poll_s: float = 0.2) -> AsyncIterator[None]:
        """Hold batch ``key``'s collect lock (waiting, without blocking the event loop, while
        another process holds it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = AsyncFileLock(
            self._beside(key, ".collect"), poll_interval=poll_s, run_in_executor=False, preserve_lock_file=True
        )
        async with lock:
            yield

    def entry(self, key: str) -> dict | None:
        """The recorded entry ``key`` as it stands now."""
        with self._locked() as data:
            return next((dict(b) for b in data["batches"] if b["key"] == key), None)

    def keep_results(self, key: str, items: dict[str, dict]) -> None:
        """The downloaded lines of batch ``key``, written before they are settled."""
        replace_durably(self._beside(key, ".results.json"), json.dumps(items))

    def results(self, key: str) -> dict[str, dict]:
        """The lines another process collected for batch ``key`` ({} when none were kept)."""
        try:
            return json.loads(self._beside(key, ".results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def adoptable(self, wanted: set[str]) -> list[dict]:
        """Uncollected batches holding any of ``wanted`` (submitted by an earlier or parallel process)."""
        with self._locked() as data:
            return [dict(b) for b in data["batches"] if not b.get("collected") and wanted & set(b["custom_ids"])]

    def record(self, entry: dict) -> None:
        """Add or update ``entry`` (matched by its ``key``)."""
        with self._locked() as data:
            for stored in data["batches"]:
                if stored["key"] == entry["key"]:
                    stored.update(entry, updated=time.time())
                    return
            data["batches"].append({**entry, "updated": time.time()})
