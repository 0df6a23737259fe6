"""The two Batch API dialects a batch run speaks: OpenAI's (files) and OpenRouter's (inline).

* **OpenAI** (``batch_api: openai``; also Azure OpenAI, Groq, Together, and any server speaking
  it): upload the request lines as a JSONL file (``POST /files``, purpose ``batch``), create
  the batch from it (``POST /batches``), poll ``GET /batches/{id}``, download the output and
  error files (``GET /files/{id}/content``).
* **OpenRouter** (``batch_api: openrouter``, the default on openrouter.ai): the requests go
  inline in one ``POST /batches`` body (``endpoint`` and ``model`` first, then ``requests``:
  ``custom_id`` and ``body``), the batch-level ``model`` is the model's ``:batch`` variant,
  the poll is ``GET /batches/{id}`` and the results are read from the cursor-paginated
  ``GET /batches/{id}/results``. Sources: docs/cost.md.

Both give each request line back as ``{"custom_id", "response": {"status_code", "body"} | null,
"error": {...} | null}``. A call that fails past its retries raises :class:`BatchAPIError`.

Creating a batch is idempotent: each batch carries ``metadata.tempgen_key`` (the digest of its
lines), and before a create is tried again after a fault (a 502 on a create the provider
accepted) the batch is looked up by its input file or that tag, so a retry never makes a second
billed batch. A ``custom_id`` that comes back twice keeps its first answer (an answer over an
error line) and is named; a line without one is named, never keyed "None".
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from src.backends.json_lines import read_json_lines
from src.backends.retry import is_auth_status, is_retryable_status, parse_retry_after
from src.core.digest import digest

API_RETRIES = 6  # retries of one Batch API call (upload, create, download) on a transient fault
#: Retries of one poll: a poll is safe to repeat and a burst of 429s while the batch runs at the
#: provider must not fail the run (each waits the server's ``Retry-After`` where it sends one).
POLL_RETRIES = 60
DIALECTS = ("auto", "openai", "openrouter")
#: What one batch may hold per dialect (requests, bytes of request lines): OpenAI's Batch API
#: reference (50,000 requests, 200 MB input file) and OpenRouter's Batch API guide (5,000, 200 MB).
LIMITS = {"openai": (50_000, 200_000_000), "openrouter": (5_000, 200_000_000)}
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
#: When OpenRouter's results paging is taken to never end: this many pages in a row without a line,
#: or more than twice the batch's requests in lines plus this many (repeated and unnamed lines).
EMPTY_PAGES = 5
EXTRA_LINES = 100


class BatchAPIError(RuntimeError):
    """A Batch API call that failed for good (a rejected key, a 4xx, a fault past its retries):
    every request of the call not answered yet fails with this one line."""


class BatchNotFound(BatchAPIError):
    """HTTP 404 on a call about one batch: the provider does not know it (deleted, another
    account's, never created), so it bills nothing more (a poll reads it as a lost batch)."""


@dataclass(frozen=True)
class BatchView:
    """What a poll says of a batch."""

    id: str
    status: str
    completed: int | None = None
    total: int | None = None
    errors: str = ""  # why a batch failed validation
    raw: Any = None

    @property
    def done(self) -> str:
        return "?" if self.total is None else f"{self.completed}/{self.total}"


def dialect_of(setting: str, base_url: str) -> str:
    """``auto``: OpenRouter's dialect on openrouter.ai, OpenAI's anywhere else."""
    if setting != "auto":
        return setting
    return "openrouter" if "openrouter.ai" in base_url else "openai"


class BatchAPI:
    """Shared by the dialects: the backend's client, retries, and the messages that name a failure."""

    dialect = "openai"

    def __init__(self, backend: Any, client: openai.AsyncOpenAI) -> None:
        self.backend = backend
        self.client = client
        self.rng = random.Random(backend.seed)  # the retry jitter, seeded as the backend's
        self.duplicates: list[str] = []  # custom_ids that came back more than once
        self.unnamed = 0  # result lines without a custom_id
        self.unreadable = 0  # result lines that are not UTF-8 or not JSON (src/backends/json_lines.py)

    @property
    def limits(self) -> tuple[int, int]:
        """(requests, bytes) one batch may hold: the dialect's, lowered by ``batch_max_requests``."""
        requests, size = LIMITS[self.dialect]
        return min(requests, max(1, int(self.backend.batch_max_requests))), size

    async def call(
        self,
        make: Callable[[], Awaitable[Any]],
        existing: Callable[[], Awaitable[Any]] | None = None,
        retries: int = API_RETRIES,
    ) -> Any:
        """One call with retries on transient faults, each after the server's ``Retry-After`` where it
        sent one (else the backoff); a rejected key or another 4xx raises at once. ``existing``: asked
        before each retry; what it finds (the batch a failed create made) is the result."""
        policy = self.backend.retry
        retrying = AsyncRetrying(
            stop=stop_after_attempt(retries + 1),
            wait=policy.wait(self.rng, _retry_after),
            retry=retry_if_exception(_transient),
            sleep=asyncio.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1 and existing is not None:
                        if (found := await existing()) is not None:
                            return found
                    return await make()
        except openai.APIStatusError as exc:
            if is_auth_status(exc.status_code):
                raise BatchAPIError(self.backend._auth_message(exc.status_code)) from None
            hint = " (does this endpoint offer the Batch API? docs/cost.md)" if exc.status_code == 404 else ""
            kind = BatchNotFound if exc.status_code == 404 else BatchAPIError
            raise kind(self.backend._redact(f"Batch API: HTTP {exc.status_code}: {exc.message}{hint}")) from None
        except (openai.APIConnectionError, TimeoutError) as exc:
            raise BatchAPIError(self.backend._redact(f"Batch API: {type(exc).__name__}: {exc}")) from None
        raise AssertionError("unreachable")

    async def get_json(self, path: str, retries: int = API_RETRIES, **query: Any) -> Any:
        response = await self.call(
            lambda: self.client.get(path, options={"params": query}, cast_to=httpx.Response), retries=retries
        )
        return response.json()

    async def post_json(self, path: str, body: dict, existing: Callable[[], Awaitable[Any]] | None = None) -> Any:
        response = await self.call(lambda: self.client.post(path, body=body, cast_to=httpx.Response), existing)
        return {"id": response} if isinstance(response, str) else response.json()

    async def tagged(self, tag: str) -> str | None:
        """The id of a batch this project created with ``metadata.tempgen_key == tag`` (None: none,
        or the endpoint lists no batches)."""
        try:
            listing = await self.client.get("/batches", options={"params": {"limit": 100}}, cast_to=httpx.Response)
            batches = listing.json().get("data") or []
        except (openai.OpenAIError, ValueError, AttributeError):
            return None
        for batch in batches:
            if isinstance(batch, dict) and (batch.get("metadata") or {}).get("tempgen_key") == tag:
                return str(batch["id"])
        return None

    def keep(self, items: dict[str, dict], item: Any) -> None:
        """Add one result line: the first answer of a ``custom_id`` wins (an answer over an error
        line); a repeat and a line without a ``custom_id`` are counted to be named."""
        if not isinstance(item, dict) or not item.get("custom_id"):
            self.unnamed += 1
            return
        custom_id = str(item["custom_id"])
        kept = items.get(custom_id)
        if kept is None:
            items[custom_id] = item
            return
        if _answered(kept) or not _answered(item):
            if _answered(kept) and _answered(item):
                self.duplicates.append(custom_id)
            return
        items[custom_id] = item


def _answered(item: dict) -> bool:
    return ((item.get("response") or {}).get("status_code")) == 200


def _transient(exc: BaseException) -> bool:
    """A fault worth another try: a transport failure, a timeout or a retryable status."""
    if isinstance(exc, openai.APIStatusError):
        return is_retryable_status(exc.status_code)
    return isinstance(exc, openai.APIConnectionError | TimeoutError)


def _retry_after(retry_state: RetryCallState) -> float | None:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    return (
        parse_retry_after(exc.response.headers.get("retry-after")) if isinstance(exc, openai.APIStatusError) else None
    )


def lines_tag(lines: list[dict]) -> str:
    """The digest of a batch's request lines: its ``metadata.tempgen_key``."""
    return digest(json.dumps(lines, sort_keys=True), 32)


class FileBatches(BatchAPI):
    """OpenAI's dialect: a JSONL file per batch, output and error files to download."""

    async def submit(self, lines: list[dict], endpoint: str, entry: dict, record: Callable[[dict], None]) -> str:
        data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode("utf-8")
        name = f"tempgen-{digest(data, 16)}.jsonl"
        files = self.client.files
        uploaded = await self.call(lambda: files.create(file=(name, data, "application/jsonl"), purpose="batch"))
        entry["input_file_id"] = uploaded.id
        entry["tag"] = lines_tag(lines)
        record(entry)  # a process killed from here on finds the batch by its file
        return await self._create(uploaded.id, endpoint, len(lines), entry["tag"])

    async def _create(self, file_id: str, endpoint: str, count: int, tag: str) -> str:
        batch = await self.call(
            lambda: self.client.batches.create(
                input_file_id=file_id,
                endpoint=endpoint,
                completion_window=self.backend.batch_completion_window,
                metadata={"tempgen": "1", "requests": str(count), "tempgen_key": tag},
            ),
            lambda: self._created_from(file_id),
        )
        return batch if isinstance(batch, str) else batch.id

    async def _created_from(self, file_id: str) -> str | None:
        """The batch already created from ``file_id`` (a create the provider accepted and then failed to answer)."""
        page = await self.call(lambda: self.client.batches.list(limit=100))
        async for batch in page:
            if batch.input_file_id == file_id:
                return batch.id
        return None

    async def find(self, entry: dict) -> str | None:
        """The batch created from the entry's file (a process died before recording it), else a new one."""
        if not entry.get("input_file_id"):
            return None
        found = await self._created_from(entry["input_file_id"])
        if found is not None:
            return found
        tag = entry.get("tag") or entry["input_file_id"]
        return await self._create(entry["input_file_id"], entry["endpoint"], len(entry["custom_ids"]), tag)

    async def retrieve(self, batch_id: str) -> BatchView:
        batch = await self.call(lambda: self.client.batches.retrieve(batch_id), retries=POLL_RETRIES)
        counts = batch.request_counts
        errors = ""
        if batch.errors is not None and batch.errors.data:
            errors = self.backend._redact("; ".join(str(e.message) for e in batch.errors.data[:3]))
        return BatchView(
            batch.id,
            batch.status,
            None if counts is None else counts.completed,
            None if counts is None else counts.total,
            errors,
            batch,
        )

    async def results(self, view: BatchView) -> dict[str, dict]:
        items: dict[str, dict] = {}
        for file_id in (view.raw.error_file_id, view.raw.output_file_id):  # an output line wins over an error line
            if file_id:
                content = await self.call(lambda file_id=file_id: self.client.files.content(file_id))
                read = read_json_lines(content.content)
                self.unreadable += read.unreadable
                for item in read.records:
                    self.keep(items, item)
        return items


class InlineBatches(BatchAPI):
    """OpenRouter's dialect: the requests inline, the results read page by page."""

    dialect = "openrouter"

    def batch_model(self) -> str:
        model = self.backend.model_id
        return model if ":" in model else f"{model}:batch"

    async def submit(self, lines: list[dict], endpoint: str, entry: dict, record: Callable[[dict], None]) -> str:
        model = self.batch_model()
        requests = [{"custom_id": line["custom_id"], "body": {**line["body"], "model": model}} for line in lines]
        # endpoint and model before requests: OpenRouter reads the body as a stream
        tag = lines_tag(lines)
        body = {
            "endpoint": endpoint,
            "model": model,
            "completion_window": "24h",
            "metadata": {"tempgen_key": tag},
            "requests": requests,
        }
        entry.update(submitted=True, tag=tag)
        record(entry)
        batch = await self.post_json("/batches", body, lambda: self.tagged(tag))
        return batch if isinstance(batch, str) else str(batch["id"])

    async def find(self, entry: dict) -> str | None:
        """A submission whose id was never recorded, found by its ``metadata.tempgen_key`` where the
        endpoint lists batches; else None: it is lost (it may run and be billed) and its requests go
        again, named in the log."""
        return await self.tagged(entry["tag"]) if entry.get("tag") else None

    async def retrieve(self, batch_id: str) -> BatchView:
        batch = await self.get_json(f"/batches/{batch_id}", retries=POLL_RETRIES)
        counts = batch.get("request_counts") or {}
        error = batch.get("error") or {}
        return BatchView(
            str(batch["id"]),
            str(batch["status"]),
            counts.get("completed"),
            counts.get("total"),
            self.backend._redact(str(error.get("message") or "") if isinstance(error, dict) else str(error)),
            batch,
        )

    async def results(self, view: BatchView) -> dict[str, dict]:
        items: dict[str, dict] = {}
        cursor, seen, lines, idle = None, set(), 0, 0
        pages = 0
        while True:
            pages += 1
            query = {"cursor": cursor} if cursor else {}
            page = await self.get_json(f"/batches/{view.id}/results", **query)
            data = page.get("data") or []
            for item in data:
                self.keep(items, item)
            lines += len(data)
            cursor = page.get("next_cursor")
            if not page.get("has_more") or not cursor:
                return items
            if cursor in seen:
                raise BatchAPIError(
                    f"Batch API: the results of batch {view.id} repeat their cursor after {pages} pages"
                )
            seen.add(cursor)
            # a page that says more and brings nothing, again and again, or far more lines than the
            # batch has requests (repeated and unnamed lines included), never ends by itself
            idle = 0 if data else idle + 1
            if idle >= EMPTY_PAGES or lines > 2 * (view.total or LIMITS[self.dialect][0]) + EXTRA_LINES:
                raise BatchAPIError(
                    f"Batch API: the results of batch {view.id} still say has_more after {pages} pages "
                    f"and {lines} lines"
                )


def batch_api(backend: Any, client: openai.AsyncOpenAI) -> FileBatches | InlineBatches:
    dialect = dialect_of(backend.batch_api, backend.base_url)
    return InlineBatches(backend, client) if dialect == "openrouter" else FileBatches(backend, client)
