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
import json
import logging
from collections import Counter
from typing import Any

from tqdm.auto import tqdm

from src.backends.base import GenerationResult, OrderedResults, ResultCallback
from src.backends.batch_apis import TERMINAL, BatchAPIError, BatchNotFound, BatchView, batch_api
from src.backends.batch_state import BatchState, custom_ids, state_file
from src.backends.openai_reply import RetryableError, error_text, reply_of
from src.billing.bill import Bill, BilledReply
from src.billing.meter import Admission
from src.core.requests import ChatRequest

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
        self.outside_cap = 0  # lines of adopted batches counted with no room left under the cap
        self.odd_lines = 0  # result lines repeated or without a custom_id
        self.open_batches: dict[str, dict] = {}  # submitted or adopted, not collected yet
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
        except asyncio.CancelledError:  # Ctrl-C, SIGTERM: the batches stay with the provider
            self._left_running()
            raise
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
        adopted: set[int] = set()
        with self.state.claim():  # adopt-or-submit is one step for every process of this endpoint
            batches = self.state.adoptable({self.ids[n] for n in pending})
            for entry in batches:
                mine = self._mine(entry)
                adopted.update(mine)
                logger.info("batch %s: resuming (%d of this call's requests)", entry.get("batch_id"), len(mine))
                admissions.update(self._adopt(entry, mine))
            admitted = self._admit([n for n in sorted(pending) if n not in adopted])
            admissions.update(admitted)
            for number, chunk in enumerate(self._split(api, sorted(admitted))):
                batches.append(await self._submit(api, chunk, f"{round_number}.{number}", admissions))
        unanswered = pending - set(admissions) - adopted
        for entry in batches:
            unanswered |= await self._finish(api, entry, admissions)
        self._name_odd_lines(api)
        if unanswered:
            causes = Counter(self.causes.get(n, "no result") for n in unanswered)
            listed = "; ".join(f"{count} x {cause}" for cause, count in causes.most_common(5))
            where = "the next batch" if round_number < self.backend.batch_rounds else "the synchronous path"
            logger.warning("batch round %d: %d requests unanswered (%s); they go to %s", round_number + 1,
                           len(unanswered), listed, where)  # fmt: skip
        return unanswered

    def _adopt(self, entry: dict, mine: list[int], collecting: bool = False) -> dict[int, Admission]:
        """Admissions for the lines of a batch an earlier or parallel process submitted. A batch its
        live submitter still holds is left to it (its answers are read once it has collected them);
        one whose run ended is taken over with its hold in the ledger, so its lines are admitted
        within the cap like any other, never past it by force."""
        meter, reservation = self.backend.meter, self.backend.meter.reservation
        held = reservation.take_batch(entry["key"]) if reservation is not None else "none"
        self.open_batches[entry["key"]] = entry
        if held == "owned" and not collecting:
            logger.info("batch %s: collected by the run that submitted it; this run waits", entry.get("batch_id"))
            return {}
        admissions = {}
        for n in mine:
            self.attempts[n] += 1
            first = self.attempts[n] == 1
            admission = meter.admit(self.requests[n], first, "batch")
            if admission is None and meter.extend_for(self.requests[n], first, "batch"):
                admission = meter.admit(self.requests[n], first, "batch")
            admissions[n] = admission or meter.already_sent(self.requests[n], first, "batch")
            self.outside_cap += admission is None
        if self.outside_cap:
            logger.warning("batch %s: %d of its lines are counted beyond the cap's room (sent by an earlier run "
                           "with no hold in a ledger; the provider bills them)", entry.get("batch_id"),
                           self.outside_cap)  # fmt: skip
            self.outside_cap = 0
        if reservation is not None and held != "held":
            ceiling = sum(admissions[n].ceiling for n in mine)
            reservation.hold_batch(entry["key"], entry.get("batch_id"), ceiling)
        return admissions

    def _split(self, api, numbers: list[int]) -> list[list[int]]:
        """The admitted lines in batches within the dialect's request and byte limits."""
        sizes = [len(json.dumps(self.backend.body(self.requests[n])[1]).encode("utf-8")) + 200 for n in numbers]
        return [[numbers[i] for i in chunk] for chunk in split_by_limits(sizes, *api.limits)]

    def _name_odd_lines(self, api) -> None:
        """Name result lines a provider should not have sent: repeated custom_ids, lines without one."""
        if api.duplicates:
            named = ", ".join(sorted(set(api.duplicates))[:5])
            logger.warning("batch: %d custom_ids answered more than once (the first answer kept): %s",
                           len(api.duplicates), named)  # fmt: skip
            self.odd_lines += len(api.duplicates)
        if api.unnamed:
            logger.warning("batch: %d result lines without a custom_id (not matched to any request)", api.unnamed)
            self.odd_lines += api.unnamed
        if api.unreadable:
            logger.warning("batch: %d result lines unreadable (not UTF-8 or not JSON)", api.unreadable)
            self.odd_lines += api.unreadable
        api.duplicates, api.unnamed, api.unreadable = [], 0, 0

    def _left_running(self) -> None:
        """One line per batch this call leaves in flight: left running (cancelling it would still bill
        the lines it completed), its ceiling held in the ledger, collected by the same command."""
        reservation = self.backend.meter.reservation
        held = reservation is not None and reservation.shared
        for entry in self.open_batches.values():
            where = "its ceiling stays reserved in the ledger; " if held else ""
            logger.warning("batch %s: left running at the provider (%d requests, not cancelled); %sthe same command "
                           "collects and settles it", entry.get("batch_id") or "(being created)",
                           len(entry["custom_ids"]), where)  # fmt: skip

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

    async def _submit(self, api, chunk: list[int], key: str, admissions: dict[int, Admission]) -> dict:
        """Submit one batch of request lines, recording each step before the next."""
        lines, endpoint = [], None
        for n in chunk:
            path, body = self.backend.body(self.requests[n])
            endpoint = endpoint or "/v1" + path
            lines.append({"custom_id": self.ids[n], "method": "POST", "url": "/v1" + path, "body": body})
        entry = {"key": f"{self.ids[chunk[0]]}:{key}", "batch_id": None, "endpoint": endpoint, "collected": False}
        entry["custom_ids"] = [self.ids[n] for n in chunk]
        reservation = self.backend.meter.reservation
        if reservation is not None:  # from here the batch may run and bill whatever becomes of this run
            reservation.hold_batch(entry["key"], None, sum(admissions[n].ceiling for n in chunk))
        self.open_batches[entry["key"]] = entry
        entry["batch_id"] = await api.submit(lines, endpoint, entry, self.state.record)
        self.state.record(entry)
        if reservation is not None:
            reservation.hold_batch(entry["key"], entry["batch_id"], sum(admissions[n].ceiling for n in chunk))
        logger.info(
            "batch %s: %d requests submitted; polling every %g s",
            entry["batch_id"],
            len(chunk),
            self.backend.batch_poll_s,
        )
        return entry

    async def _finish(self, api, entry: dict, admissions: dict[int, Admission]) -> set[int]:
        """Poll ``entry``'s batch to its end and collect its lines, holding its collect lock so that
        no two processes settle one batch; returns the requests unanswered."""
        async with self.state.collecting(entry["key"]):
            now = self.state.entry(entry["key"]) or entry
            if now.get("collected") and now.get("status") != "lost":
                return self._read_collected(entry, admissions)
            return await self._collect_batch(api, entry, admissions)

    def _read_collected(self, entry: dict, admissions: dict[int, Admission]) -> set[int]:
        """Another process collected and settled this batch: its answers, read from what it kept, unbilled here."""
        items = self.state.results(entry["key"])
        for n in self._mine(entry):
            if n in admissions:  # admitted here too (a batch's run that ended meanwhile): not billed twice
                self.backend.meter.release(admissions.pop(n))
        self.open_batches.pop(entry["key"], None)
        if self.backend.meter.reservation is not None:
            self.backend.meter.reservation.collected_batch(entry["key"])
        view = BatchView(str(entry.get("batch_id")), str(self.state.entry(entry["key"]).get("status")))
        logger.info("batch %s: collected by another process; its answers are read here, not billed again",
                    entry.get("batch_id"))  # fmt: skip
        return {n for n in self._mine(entry) if not self._collect(n, items.get(self.ids[n]), None, view)}

    async def _collect_batch(self, api, entry: dict, admissions: dict[int, Admission]) -> set[int]:
        mine = self._mine(entry)
        if missing := [n for n in mine if n not in admissions]:  # its submitter died before collecting it
            admissions.update(self._adopt(entry, missing, collecting=True))
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
        try:
            view = await self._poll(api, entry["batch_id"])
        except BatchNotFound as error:
            return self._lost(entry, mine, admissions, str(error))
        try:
            items = await api.results(view) if view.status != "failed" else {}
        except BatchAPIError as error:
            self._unreadable(entry, mine, admissions, view, str(error))
            raise
        self.state.keep_results(entry["key"], items)
        lost = self._billed_without_line(api, entry, mine, items, view)
        unanswered = {
            n for n in mine if not self._collect(n, items.get(self.ids[n]), admissions.get(n), view, n in lost)
        }
        self._close(entry, view.status)
        if self.backend.meter.reservation is not None:
            self.backend.meter.reservation.collected_batch(entry["key"])
        return unanswered

    def _lost(self, entry: dict, mine: list[int], admissions: dict[int, Admission], error: str) -> set[int]:
        """A batch the provider no longer knows (404 on its poll): it bills nothing more, so its lines
        are settled unbilled, its hold in the ledger is released and its requests go to the next round."""
        logger.warning(
            "batch %s: the provider does not know this batch (%s): marked lost, its hold released, "
            "its %d requests sent again (if it was another account's, that account may still bill it)",
            entry.get("batch_id"), error, len(mine),
        )  # fmt: skip
        for n in mine:
            self.causes[n] = "its batch is unknown to the provider (HTTP 404)"
            if n in admissions:
                self.bills[n].add(self.backend.meter.settle(admissions.pop(n), None))
        self._close(entry, "lost")
        if self.backend.meter.reservation is not None:
            self.backend.meter.reservation.collected_batch(entry["key"])
        return set(mine)

    def _unreadable(
        self, entry: dict, mine: list[int], admissions: dict[int, Admission], view: BatchView, error: str
    ) -> None:
        """A finished batch whose results cannot be read: the lines the provider counts as completed
        (all admitted ones when it gives no count) are settled as billed, estimated at their bound,
        so the ledger never holds less than the bill; the batch is closed and its hold released."""
        billed = len(mine) if view.completed is None else min(len(mine), int(view.completed))
        logger.warning(
            "batch %s: its results could not be read (%s): %d lines the provider completed are counted as "
            "billed (estimated at their bound); their requests fail", view.id, error, billed,
        )  # fmt: skip
        for rank, n in enumerate(mine):
            if n in admissions:
                reply = BilledReply({}) if rank < billed else None
                self.bills[n].add(self.backend.meter.settle(admissions.pop(n), reply))
        self._close(entry, "unreadable")
        if self.backend.meter.reservation is not None:
            self.backend.meter.reservation.collected_batch(entry["key"])

    def _billed_without_line(self, api, entry: dict, mine: list[int], items: dict, view: BatchView) -> set[int]:
        """Requests of ``mine`` the provider counts as completed (``request_counts``) but whose answer
        its output does not hold or could not be read: billed, so settled as billed (estimated at
        their admitted bound) before they are bought again, and named."""
        if view.completed is None:
            return set()
        answered = sum(1 for custom_id in entry["custom_ids"] if _answered(items.get(custom_id)))
        shortfall = int(view.completed) - answered
        if shortfall <= 0:
            return set()
        lost = {n for n in mine if items.get(self.ids[n]) is None}
        lost = set(sorted(lost)[:shortfall])
        logger.warning(
            "batch %s: the provider counts %d completed requests, its output holds %d answers: %d billed answers "
            "are missing; they are counted as billed (estimated) and bought again",
            view.id, view.completed, answered, shortfall,
        )  # fmt: skip
        self.odd_lines += shortfall
        return lost

    def _close(self, entry: dict, status: str) -> None:
        self.open_batches.pop(entry["key"], None)
        entry.update(collected=True, status=status)
        self.state.record(entry)

    def _collect(
        self, n: int, item: dict | None, admission: Admission | None, view: BatchView, billed_lost: bool = False
    ) -> bool:
        """Deliver line ``item`` of request ``n`` as its answer; False (the cause noted) when it is none.
        ``billed_lost``: the provider billed an answer its output does not hold (an estimate is settled)."""
        meter, request = self.backend.meter, self.requests[n]
        response = (item or {}).get("response") or {}
        if item is None or response.get("status_code") != 200:
            if admission is not None:
                self.bills[n].add(meter.settle(admission, BilledReply({}) if billed_lost else None))
            cause = "billed by the provider, missing from its output" if billed_lost else _line_cause(item, view)
            self.causes[n] = self.backend._redact(cause)
            return False
        try:
            reply = self.backend.answer_of(reply_of(response.get("body"), request.completion), request)
        except RetryableError as fault:
            if admission is not None:
                self.bills[n].add(meter.settle(admission, fault.billed))
            self.causes[n] = self.backend._redact(f"reply fault: {fault.kind}")
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


def _answered(item: dict | None) -> bool:
    return isinstance(item, dict) and ((item.get("response") or {}).get("status_code")) == 200


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


def split_by_limits(sizes: list[int], most: int, size_limit: int) -> list[list[int]]:
    """Indexes of lines of ``sizes`` bytes in consecutive batches of at most ``most`` lines and
    ``size_limit`` bytes (a line alone over the byte limit is a batch of its own: the provider names it)."""
    chunks: list[list[int]] = []
    size = 0
    for index, line in enumerate(sizes):
        if not chunks or len(chunks[-1]) >= most or size + line > size_limit:
            chunks.append([])
            size = 0
        chunks[-1].append(index)
        size += line
    return chunks
