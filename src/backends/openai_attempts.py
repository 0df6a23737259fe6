"""One request's attempts (:class:`Tally`) and what the attempts of one call share
(:class:`LoopState`): the connection slots, the rate-limit pause and the early stop on a
repeated fault. :class:`~src.backends.openai_backend.OpenAIBackend` drives both."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque

import openai

from src.backends.base import GenerationResult
from src.backends.concurrency import AdaptiveLimit
from src.backends.openai_reply import NeverHeals, NotAnAnswer, Reply, RetryableError
from src.billing.bill import Bill
from src.core.requests import ChatRequest

logger = logging.getLogger(__name__)

NEVER_HEALS_RETRIES = 1  # retries of a fault that repeating cannot fix (undecodable body, wrong types)


class Tally:
    """One request's attempts so far: what they cost and how the faults went."""

    def __init__(self, request: ChatRequest) -> None:
        self.request = request
        self.sent = 0  # attempts counted (a resend in a fallback form is not)
        self.retries = 0
        self.bill = Bill()
        self.last_error = ""
        self.never_heals = 0
        self.blank_answers: list[Reply | None] = []  # per not-an-answer reply: its blank "stop" answer or None
        self.last_not_answer: NotAnAnswer | None = None
        self.retry_after: float | None = None
        self.rate_limited = False
        self.latency = 0.0

    def fault(self, exc: RetryableError, bill: Bill, message: str) -> None:
        self.sent += 1
        self.bill.add(bill)
        self.last_error = message
        self.retry_after, self.rate_limited = exc.retry_after, exc.rate_limited
        self.last_not_answer = exc if isinstance(exc, NotAnAnswer) else None
        if self.last_not_answer is not None:
            self.blank_answers.append(exc.answer)
        self.never_heals += isinstance(exc, NeverHeals)

    def answered(self, reply: Reply, latency: float) -> GenerationResult:
        return GenerationResult(
            self.request,
            reply.text,
            usage=reply.usage,
            latency_s=latency,
            finish_reason=reply.finish_reason,
            served=reply.served,
            attempts=self.sent,
            refusal=reply.refusal,
            bill=self.bill,
        )

    def failed(self, error: str) -> GenerationResult:
        return GenerationResult(self.request, None, error=error, attempts=self.sent, bill=self.bill)

    def give_up(self) -> GenerationResult:
        """After the last retry: the model's own empty answer (blank and ``stop`` every time it
        answered), else the failure naming the last fault."""
        if self.last_not_answer is not None and all(answer is not None for answer in self.blank_answers):
            return self.answered(self.last_not_answer.answer, self.latency)
        healing = "; retrying does not heal this" if self.never_heals > NEVER_HEALS_RETRIES else ""
        message = f"gave up after {self.sent} attempts: {self.last_error}{healing}"
        logger.warning("request %r %s", self.request.request_id, message)
        return self.failed(message)


class LoopState:
    """Per-call shared state: the adaptive bound, the connection slots, jitter source, a global
    rate-limit pause, the meter's settle signal and the early stop on a repeated fault.

    Each slot is a client with a free connection (``max_concurrency`` in all); the adaptive
    bound (``limit``) decides how many of them are in use.
    """

    def __init__(
        self,
        clients: list[openai.AsyncOpenAI],
        sizes: list[int],
        rng: random.Random,
        limit: AdaptiveLimit,
        same_fault_limit: int | None = None,
    ) -> None:
        self._free: asyncio.Queue[openai.AsyncOpenAI] = asyncio.Queue()
        for client, size in zip(clients, sizes):
            for _ in range(size):
                self._free.put_nowait(client)
        self.rng = rng
        self.limit = limit
        self.form_probe = asyncio.Lock()  # held by the request that tries the schema form first
        self.settled = asyncio.Event()  # set whenever an attempt is settled (the meter has room again)
        self._not_before = 0.0
        self._same_fault_limit = same_fault_limit
        self._faults: deque[tuple[str, str]] = deque(maxlen=same_fault_limit or 1)
        # set by a rejected key, a refused response_format (not under auto), the cap or a repeated
        # fault; fails the rest at once
        self.stop_error: str | None = None

    def stop(self, message: str) -> None:
        if self.stop_error is None:
            self.stop_error = message
            logger.error("%s", message)

    def note_fault(self, kind: str, request_id: str) -> None:
        """Count a fault; stop the call when the last ``same_fault_limit`` attempts, over more than one
        request, all failed this way."""
        if not self._same_fault_limit:
            return
        self._faults.append((kind, request_id))
        if len(self._faults) < self._same_fault_limit or len({k for k, _ in self._faults}) != 1:
            return
        requests = len({r for _, r in self._faults})
        if requests > 1:
            self.stop(
                f"stopped early: the last {self._same_fault_limit} attempts ({requests} requests) all failed the "
                f"same way ({kind}); nothing more is sent (model.options.stop_after_same_fault="
                f"{self._same_fault_limit}); fix the endpoint or the request and rerun"
            )

    def note_answer(self) -> None:
        self._faults.clear()

    @contextlib.asynccontextmanager
    async def slot(self):
        client = await self._free.get()
        try:
            yield client
        finally:
            self._free.put_nowait(client)

    def pause_until(self, moment: float) -> None:
        self._not_before = max(self._not_before, moment)

    async def wait_for_rate_limit(self) -> None:
        while (remaining := self._not_before - time.monotonic()) > 0:
            await asyncio.sleep(remaining)
