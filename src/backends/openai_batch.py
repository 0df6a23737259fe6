"""One backend call through a Batch API: submit, poll, collect, and what no batch answered.

``mode: batch`` sends the requests a call was given (the cached backend gives it only the
uncached ones) as batches of request lines (``custom_id`` and the very body the synchronous path
would send), in the endpoint's dialect (:mod:`src.backends.batch_apis`: OpenAI's files or
OpenRouter's inline requests), polls every ``batch_poll_s`` seconds and reads each result line
exactly as a synchronous reply (:mod:`src.backends.openai_reply`, then the backend's own
``answer_of``), so the answers, the response cache, scoring and resume are the synchronous
path's; each is billed at the model's batch price, every line admitted by the run's meter first.

Batch ids are kept beside the response cache (:mod:`src.backends.batch_state`), each step
recorded before the next: a run killed while it polls resumes polling the same batch and never
submits a request twice; processes of one endpoint and model decide what to submit one after
the other, so they share batches too.

A request a batch did not answer (its error line, a reply that is a fault, a batch that expired,
was cancelled or failed validation) goes to the next batch, at most ``batch_rounds`` more times,
then to the synchronous path; each move is logged with its count and causes. A Batch API call
that fails for good (a rejected key, an endpoint without the API) fails the call's requests with
one line. Which providers accept which dialect: docs/cost.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

from src.backends.base import ChatRequest, GenerationResult, OrderedResults, ResultCallback
from src.backends.batch_apis import TERMINAL, BatchAPIError, BatchView, batch_api
from src.backends.batch_state import BatchState, custom_ids, state_file
from src.backends.openai_reply import RetryableError, error_text, reply_of
from src.billing.bill import Bill
from src.billing.meter import Admission

logger = logging.getLogger(__name__)

OpenAIBackend = Any  # the backend that calls (it imports this module, so no import back)


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
        self.capped: set[int] = set()  # requests the cap left out of the latest round
        self.state = BatchState(state_file(backend))
        self.bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)

    async def run(self) -> list[GenerationResult]:
        pending = set(range(len(self.requests)))
        try:
            async with self.backend.client(2) as client:
                api = batch_api(self.backend, client)
                for round_number in range(self.backend.batch_rounds + 1):
                    if not pending:
                        break
                    pending = await self._round(api, pending, round_number)
            capped = pending & self.capped
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

    async def _round(self, api, pending: set[int], round_number: int) -> set[int]:
        """Adopt the batches an earlier process left for these requests, submit the rest, poll all
        to the end and collect; returns the requests still unanswered."""
        admissions: dict[int, Admission] = {}
        with self.state.claim():  # adopt-or-submit is one step for every process of this endpoint
            batches = self.state.adoptable({self.ids[n] for n in pending})
            for entry in batches:
                mine = self._mine(entry)
                logger.info("batch %s: resuming (%d of this call's requests)", entry.get("batch_id"), len(mine))
                for n in mine:  # sent by the process that submitted them: counted whatever the cap says
                    self.attempts[n] += 1
                    admissions[n] = self.backend.meter.admit(self.requests[n], self.attempts[n] == 1, "batch", True)
            admitted = self._admit([n for n in sorted(pending) if n not in admissions])
            admissions.update(admitted)
            for number, chunk in enumerate(_chunks(sorted(admitted), self.backend.batch_max_requests)):
                batches.append(await self._submit(api, chunk, f"{round_number}.{number}"))
        unanswered = pending - set(admissions)
        for entry in batches:
            unanswered |= await self._finish(api, entry, admissions)
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

    async def _submit(self, api, chunk: list[int], key: str) -> dict:
        """Submit one batch of request lines, recording each step before the next."""
        lines, endpoint = [], None
        for n in chunk:
            path, body = self.backend.body(self.requests[n])
            endpoint = endpoint or "/v1" + path
            lines.append({"custom_id": self.ids[n], "method": "POST", "url": "/v1" + path, "body": body})
        entry = {"key": f"{self.ids[chunk[0]]}:{key}", "batch_id": None, "endpoint": endpoint, "collected": False}
        entry["custom_ids"] = [self.ids[n] for n in chunk]
        entry["batch_id"] = await api.submit(lines, endpoint, entry, self.state.record)
        self.state.record(entry)
        logger.info(
            "batch %s: %d requests submitted; polling every %g s",
            entry["batch_id"],
            len(chunk),
            self.backend.batch_poll_s,
        )
        return entry

    async def _finish(self, api, entry: dict, admissions: dict[int, Admission]) -> set[int]:
        """Poll ``entry``'s batch to its end and collect its lines; returns the requests unanswered."""
        mine = self._mine(entry)
        if entry.get("batch_id") is None:
            entry["batch_id"] = await api.find(entry)
            if entry["batch_id"] is None:
                logger.warning(
                    "batch: a submission of %d requests died before its batch id was recorded; it may still "
                    "run and be billed; its requests are submitted again",
                    len(entry["custom_ids"]),
                )
                self._close(entry, "lost")
                for n in mine:
                    self.causes[n] = "its batch's id was never recorded"
                    if n in admissions:
                        self.bills[n].add(self.backend.meter.settle(admissions[n], None))
                return set(mine)
            logger.info("batch %s: found after a restart", entry["batch_id"])
            self.state.record(entry)
        view = await self._poll(api, entry["batch_id"])
        items = await api.results(view) if view.status != "failed" else {}
        unanswered = {n for n in mine if not self._collect(n, items.get(self.ids[n]), admissions.get(n), view)}
        self._close(entry, view.status)
        return unanswered

    def _close(self, entry: dict, status: str) -> None:
        entry.update(collected=True, status=status)
        self.state.record(entry)

    def _collect(self, n: int, item: dict | None, admission: Admission | None, view: BatchView) -> bool:
        """Deliver line ``item`` of request ``n`` as its answer; False (the cause noted) when it is none."""
        meter, request = self.backend.meter, self.requests[n]
        response = (item or {}).get("response") or {}
        if item is None or response.get("status_code") != 200:
            if admission is not None:
                self.bills[n].add(meter.settle(admission, None))
            self.causes[n] = _line_cause(item, view)
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

    async def _poll(self, api, batch_id: str) -> BatchView:
        while True:
            view = await api.retrieve(batch_id)
            self.bar.set_postfix_str(f"batch {batch_id}: {view.status} {view.done}", refresh=True)
            if view.status in TERMINAL:
                logger.info("batch %s: %s (%s answered)", batch_id, view.status, view.done)
                return view
            await asyncio.sleep(self.backend.batch_poll_s)


def _line_cause(item: dict | None, view: BatchView) -> str:
    """Why a request's line holds no answer: its error, its status, or the batch's end."""
    if item is None:
        detail = f": {view.errors}" if view.errors else ""
        return f"batch {view.status}, no line for this request{detail}"
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
