"""Where a batch run keeps what it submitted, so that a killed run resumes instead of resubmitting.

One file per endpoint and model beside the response cache (``<cache>/../batches/<key>.json``),
read and written under an exclusive lock and replaced atomically. Each entry is one batch: its
request lines' ``custom_ids``, the uploaded file (OpenAI's dialect), the batch id once created,
and whether its results were collected. Every step is recorded before the next is taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from src.backends.base import ChatRequest

STATE_FORMAT = 1


def custom_ids(backend: Any, requests: list[ChatRequest]) -> list[str]:
    """A stable id per request line: the digest of the body it sends (a repeat in one call gets
    ``-2``, ``-3``...), so a restarted run finds its own lines in a batch it submitted before."""
    seen: Counter[str] = Counter()
    ids = []
    for request in requests:
        path, body = backend.body(request)
        digest = hashlib.sha256(json.dumps([path, body], sort_keys=True).encode("utf-8")).hexdigest()[:40]
        seen[digest] += 1
        ids.append(digest if seen[digest] == 1 else f"{digest}-{seen[digest]}")
    return ids


def state_file(backend: Any) -> Path:
    """Where the batches of this endpoint and model are recorded."""
    folder = backend.batch_dir or Path(".cache/batches")
    key = hashlib.sha256(f"{backend.base_url}|{backend.model_id}".encode()).hexdigest()[:16]
    return folder / f"{key}.json"


class BatchState:
    """The file of submitted batches."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                try:
                    data = json.loads(self.path.read_text(encoding="utf-8"))
                except FileNotFoundError:
                    data = {"format": STATE_FORMAT, "batches": []}
                yield data
                temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                temp.write_text(json.dumps(data, indent=1), encoding="utf-8")
                os.replace(temp, self.path)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Held while a process decides which requests to submit and submits them, so two processes
        of one endpoint and model never submit the same request."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".claim"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

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
