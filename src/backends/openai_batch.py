"""One backend call through the OpenAI-compatible Batch API: upload, create, poll, collect.

``mode: batch`` sends the requests a call was given (the cached backend gives it only the
uncached ones) as one JSONL file of request lines (``custom_id``, ``method``, ``url``, ``body``;
the body the synchronous path would send), creates a batch for it, polls it every
``batch_poll_s`` seconds, and reads its output and error files. Every output line is read
exactly as a synchronous reply (:mod:`src.backends.openai_reply`, then the backend's own
``answer_of``), so the answers, the response cache, scoring and resume are the same as the
synchronous path's; each is billed at the model's batch price.

Batch ids are kept beside the response cache (``<cache>/../batches/``), written before and
after each step under a file lock: a run killed while it polls resumes polling the same batch
and never submits a request twice (a kill between the upload and the batch's creation is
resolved by finding the batch created from that file, else creating it from the same file).
Two runs of one endpoint and model at once decide what to submit one after the other, so they
share batches the same way.

A request the batch did not answer (its line in the error file, a reply that is a fault, a
batch that expired, was cancelled or failed validation) goes to the next batch, at most
``batch_rounds`` more times, and then to the synchronous path; each move is logged with its
count and causes. Which providers accept this API: docs/cost.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
from tqdm.auto import tqdm

from src.backends.base import ChatRequest, GenerationResult, OrderedResults, ResultCallback
from src.backends.openai_reply import RetryableError, error_text, reply_of
from src.backends.retry import is_auth_status, is_retryable_status
from src.billing.bill import Bill
from src.billing.meter import Admission

OpenAIBackend = Any  # the backend that calls (it imports this module, so no import back)

logger = logging.getLogger(__name__)

STATE_FORMAT = 1
ACTIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
API_RETRIES = 6  # retries of one Batch API call (upload, create, poll, download) on a transient fault


class BatchAPIError(RuntimeError):
    """A Batch API call that failed for good (a rejected key, a 4xx, a fault past its retries):
    every request of the call not answered yet fails with this one line."""


class BatchCall:
    """The requests of one ``generate`` call, answered through batches (and the synchronous path last)."""

    def __init__(
        self,
        backend: OpenAIBackend,
        requests: list[ChatRequest],
        progress: str | None,
        on_result: ResultCallback | None,
    ) -> None:
        self.backend = backend
        self.requests = requests
        self.results = OrderedResults(len(requests), on_result)
        self.ids = custom_ids(backend, requests)
        self.index = {custom_id: n for n, custom_id in enumerate(self.ids)}
        self.bills = [Bill() for _ in requests]
        self.attempts = [0] * len(requests)
        self.causes: dict[int, str] = {}  # the last reason a request came back unanswered
        self.state = BatchState(state_file(backend))
        self.capped: set[int] = set()  # requests the cap left out of the latest round
        self.bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)

    async def run(self) -> list[GenerationResult]:
        pending = set(range(len(self.requests)))
        client = self.backend.client(2)
        try:
            async with client:
                for round_number in range(self.backend.batch_rounds + 1):
                    if not pending:
                        break
                    pending = await self._round(client, pending, round_number)
            capped = {n for n in pending if n in self.capped}
            for n in sorted(capped):
                self._fail(n, self.backend.meter.exhausted(self.requests[n], "batch"))
            if pending - capped:
                await self._synchronously(pending - capped)
        except BatchAPIError as error:
            self.backend.stop_reason = str(error)
            logger.error("%s", error)
            for n in range(len(self.requests)):
                if not self._done(n):
                    self._fail(n, str(error))
        finally:
            self.bar.close()
        return self.results.as_list()

    async def _round(self, client: openai.AsyncOpenAI, pending: set[int], round_number: int) -> set[int]:
        """Adopt the batches an earlier process left for these requests, submit the rest, poll all
        to the end and collect; returns the requests still unanswered."""
        admissions: dict[int, Admission] = {}
        with self.state.claim():  # adopt-or-submit is one step for every process of this endpoint
            batches = self.state.adoptable({self.ids[n] for n in pending})
            adopted = set()
            for entry in batches:
                mine = self._mine(entry)
                logger.info("batch %s: resuming (%d of this call's requests)", entry["batch_id"], len(mine))
                for n in mine:  # sent by the process that submitted them: counted whatever the cap says
                    self.attempts[n] += 1
                    admissions[n] = self.backend.meter.admit(self.requests[n], self.attempts[n] == 1, "batch", True)
                    adopted.add(n)
            admitted = self._admit([n for n in sorted(pending) if n not in adopted])
            admissions.update(admitted)
            for chunk in _chunks(sorted(admitted), self.backend.batch_max_requests):
                batches.append(await self._submit(client, chunk, round_number))
        unanswered = pending - set(admissions)
        for entry in batches:
            unanswered |= await self._finish(client, entry, admissions)
        if unanswered:
            causes = Counter(self.causes.get(n, "no result") for n in unanswered)
            listed = "; ".join(f"{count} x {cause}" for cause, count in causes.most_common(5))
            where = "the next batch" if round_number < self.backend.batch_rounds else "the synchronous path"
            logger.warning("batch round %d: %d requests unanswered (%s); they go to %s", round_number + 1,
                           len(unanswered), listed, where)  # fmt: skip
        return unanswered

    def _mine(self, entry: dict[str, Any]) -> list[int]:
        return [self.index[c] for c in entry["custom_ids"] if c in self.index and not self._done(self.index[c])]

    def _done(self, n: int) -> bool:
        return self.results._results[n] is not None

    def _admit(self, fresh: list[int]) -> dict[int, Admission]:
        """Admissions of the lines that fit the cap now (extending the reservation when nothing is in
        flight); the others wait for a later round, or fail with the budget line after the last."""
        meter, admitted = self.backend.meter, {}
        self.capped = set()
        for n in fresh:
            first = self.attempts[n] == 0
            admission = meter.admit(self.requests[n], first, "batch")
            if admission is None and meter.in_flight == 0 and meter.extend_for(self.requests[n], first, "batch"):
                admission = meter.admit(self.requests[n], first, "batch")
            if admission is None:
                self.capped.add(n)
                self.causes[n] = "the cap leaves no room for it in this batch"
            else:
                admitted[n] = admission
                self.attempts[n] += 1
        return admitted

    async def _submit(self, client: openai.AsyncOpenAI, chunk: list[int], round_number: int) -> dict:
        """Upload the lines and create their batch, recording each step before the next."""
        lines, endpoint = [], None
        for n in chunk:
            path, body = self.backend.body(self.requests[n])
            endpoint = endpoint or path
            lines.append(json.dumps({"custom_id": self.ids[n], "method": "POST", "url": "/v1" + path, "body": body}))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        name = f"tempgen-{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
        uploaded = await self._call(
            lambda: client.files.create(file=(name, data, "application/jsonl"), purpose="batch")
        )
        entry = {
            "input_file_id": uploaded.id,
            "batch_id": None,
            "endpoint": "/v1" + endpoint,
            "custom_ids": [self.ids[n] for n in chunk],
            "round": round_number,
            "collected": False,
        }
        self.state.add(entry)
        batch = await self._call(
            lambda: client.batches.create(
                input_file_id=uploaded.id,
                endpoint=entry["endpoint"],
                completion_window=self.backend.batch_completion_window,
                metadata={"tempgen": "1", "requests": str(len(chunk))},
            )
        )
        entry["batch_id"] = batch.id
        self.state.update(entry)
        logger.info(
            "batch %s: %d requests submitted (file %s); polling every %g s",
            batch.id,
            len(chunk),
            uploaded.id,
            self.backend.batch_poll_s,
        )
        return entry

    async def _finish(self, client: openai.AsyncOpenAI, entry: dict, admissions: dict[int, Admission]) -> set[int]:
        """Poll ``entry``'s batch to its end and collect its lines; returns the requests unanswered."""
        if entry["batch_id"] is None:
            entry["batch_id"] = await self._created_from(client, entry)
            self.state.update(entry)
        batch = await self._poll(client, entry["batch_id"])
        answered: dict[str, dict] = {}
        for file_id in (batch.error_file_id, batch.output_file_id):  # an output line wins over an error line
            if file_id:
                content = await self._call(lambda file_id=file_id: client.files.content(file_id))
                for line in content.content.decode("utf-8").splitlines():
                    if line.strip():
                        item = json.loads(line)
                        answered[str(item.get("custom_id"))] = item
        unanswered = set()
        for n in self._mine(entry):
            item = answered.get(self.ids[n])
            admission = admissions.get(n)
            if not self._collect(n, item, admission, batch):
                unanswered.add(n)
        entry["collected"] = True
        entry["status"] = batch.status
        self.state.update(entry)
        return unanswered

    def _collect(self, n: int, item: dict | None, admission: Admission | None, batch: Any) -> bool:
        """Deliver line ``item`` of request ``n`` as its answer; False (the cause noted) when it is none."""
        meter, request = self.backend.meter, self.requests[n]
        response = (item or {}).get("response") or {}
        if item is None or response.get("status_code") != 200:
            if admission is not None:
                self.bills[n].add(meter.settle(admission, None))
            self.causes[n] = _line_cause(item, batch)
            return False
        try:
            reply = self.backend.answer_of(reply_of(response.get("body"), request.completion), request)
        except RetryableError as fault:
            if admission is not None:
                self.bills[n].add(meter.settle(admission, fault.billed))
            self.causes[n] = f"reply fault: {fault.kind}"
            return False
        if admission is not None:
            self.bills[n].add(meter.settle(admission, reply.billed))
        result = GenerationResult(
            request,
            reply.text,
            usage=reply.usage,
            finish_reason=reply.finish_reason,
            served=reply.served,
            attempts=self.attempts[n],
            refusal=reply.refusal,
            bill=self.bills[n],
        )
        self.results.finish(n, result)
        self.bar.update(1)
        return True

    def _fail(self, n: int, error: str) -> None:
        self.results.finish(
            n, GenerationResult(self.requests[n], None, error=error, attempts=self.attempts[n], bill=self.bills[n])
        )
        self.bar.update(1)

    async def _synchronously(self, pending: set[int]) -> None:
        """The requests no batch answered, one by one (named in the log)."""
        logger.warning("batch: %d requests answered synchronously (at the synchronous price)", len(pending))
        async with self.backend.session() as loop_state:
            order = sorted(pending)
            outcomes = await asyncio.gather(*(self.backend.generate_one(self.requests[n], loop_state) for n in order))
        for n, result in zip(order, outcomes):
            self.bills[n].add(result.bill or Bill())
            result.bill = self.bills[n]
            result.attempts += self.attempts[n]
            if result.text is None and n in self.causes:
                result.error = f"{result.error} (after batches: {self.causes[n]})"
            self.results.finish(n, result)
            self.bar.update(1)

    async def _poll(self, client: openai.AsyncOpenAI, batch_id: str):
        while True:
            batch = await self._call(lambda: client.batches.retrieve(batch_id))
            counts = batch.request_counts
            done = f"{counts.completed}/{counts.total}" if counts is not None else "?"
            self.bar.set_postfix_str(f"batch {batch_id}: {batch.status} {done}", refresh=True)
            if batch.status in TERMINAL:
                logger.info("batch %s: %s (%s answered)", batch_id, batch.status, done)
                return batch
            await asyncio.sleep(self.backend.batch_poll_s)

    async def _created_from(self, client: openai.AsyncOpenAI, entry: dict) -> str:
        """The batch created from ``entry``'s uploaded file (a process died before recording it), or a
        new one from the same file."""
        page = await self._call(lambda: client.batches.list(limit=100))
        async for batch in page:
            if batch.input_file_id == entry["input_file_id"]:
                logger.info("batch %s: found, created from file %s before a restart", batch.id, batch.input_file_id)
                return batch.id
        batch = await self._call(
            lambda: client.batches.create(
                input_file_id=entry["input_file_id"],
                endpoint=entry["endpoint"],
                completion_window=self.backend.batch_completion_window,
                metadata={"tempgen": "1", "requests": str(len(entry["custom_ids"]))},
            )
        )
        return batch.id

    async def _call(self, make):
        """A Batch API call with retries on transient faults; a rejected key or another 4xx raises."""
        for attempt in range(API_RETRIES + 1):
            try:
                return await make()
            except openai.APIStatusError as exc:
                if is_auth_status(exc.status_code):
                    raise BatchAPIError(self.backend._auth_message(exc.status_code)) from None
                if not is_retryable_status(exc.status_code) or attempt == API_RETRIES:
                    hint = " (does this endpoint offer the Batch API? docs/cost.md)" if exc.status_code == 404 else ""
                    raise BatchAPIError(
                        self.backend._redact(f"Batch API: HTTP {exc.status_code}: {exc.message}{hint}")
                    ) from None
            except (openai.APIConnectionError, TimeoutError) as exc:
                if attempt == API_RETRIES:
                    raise BatchAPIError(self.backend._redact(f"Batch API: {type(exc).__name__}: {exc}")) from None
            await asyncio.sleep(self.backend.retry.delay(attempt, _JITTER))
        raise AssertionError("unreachable")


class _Jitter:
    """No jitter between Batch API retries: one call at a time, nothing to spread."""

    @staticmethod
    def uniform(low: float, high: float) -> float:
        return high


_JITTER = _Jitter()


def _line_cause(item: dict | None, batch: Any) -> str:
    """Why a request's line holds no answer: its error, its status, or the batch's end."""
    if item is None:
        errors = getattr(batch, "errors", None)
        detail = ""
        if errors is not None and getattr(errors, "data", None):
            detail = ": " + "; ".join(str(getattr(e, "message", e)) for e in errors.data[:3])
        return f"batch {batch.status}, no line for this request{detail}"
    if item.get("error"):
        error = item["error"]
        return str(error.get("code") or error_text(error)) if isinstance(error, dict) else str(error)
    response = item.get("response") or {}
    body = response.get("body")
    message = error_text(body.get("error")) if isinstance(body, dict) and body.get("error") else ""
    return f"HTTP {response.get('status_code')}" + (f": {message}" if message else "")


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


def custom_ids(backend: OpenAIBackend, requests: list[ChatRequest]) -> list[str]:
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


def state_file(backend: OpenAIBackend) -> Path:
    """Where the batches of this endpoint and model are recorded (one file per endpoint and model)."""
    folder = backend.batch_dir or Path(".cache/batches")
    key = hashlib.sha256(f"{backend.base_url}|{backend.model_id}".encode()).hexdigest()[:16]
    return folder / f"{key}.json"


class BatchState:
    """The file of submitted batches: read and written under an exclusive lock, atomically."""

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

    def add(self, entry: dict) -> None:
        with self._locked() as data:
            data["batches"].append(dict(entry))

    def update(self, entry: dict) -> None:
        with self._locked() as data:
            for stored in data["batches"]:
                if stored["input_file_id"] == entry["input_file_id"]:
                    stored.update(entry, updated=time.time())
