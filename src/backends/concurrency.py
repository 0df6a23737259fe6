"""Adaptive bound on requests in flight (AIMD), and the timeout of one attempt.

A fixed bound either underuses a large provider or melts a small self-hosted server: 16
requests at once against a one-slot llama.cpp server queue behind each other, the last ones
time out, and their retries (while the abandoned attempts still hold the server) make it worse.
So the bound adapts, as TCP's congestion window (and Inspect AI's adaptive connections) do:
it starts at ``max_concurrency``, is halved on a sign of overload (a timeout, 429 or 503) and
grows by one after a window of consecutive successes (as many as the bound, at least
``GROW_AFTER``, so that a server with one slot is not probed with a second request every other
answer), never below 1 nor above ``max_concurrency``. A burst of overload signals from attempts sent under the same bound halves
it once, not once per attempt: only an attempt sent after the last decrease can decrease it.

The timeout of one attempt (:func:`attempt_timeout`) covers one slow answer of the request's
``max_tokens`` for every request that may be queued ahead of it at a server that serves one at
a time: ``max(timeout_s, limit * max_tokens / min_tokens_per_s)``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

#: What an attempt's outcome says about the server's load.
SUCCESS, OVERLOAD, NEUTRAL = "success", "overload", "neutral"
OVERLOAD_STATUS = frozenset({429, 503})
GROW_AFTER = 10  # fewest consecutive successes before the bound grows by one


@dataclass
class ConcurrencyStats:
    """How the bound moved during one ``generate`` call (the run logs these)."""

    start: int
    limit: int
    lowest: int
    decreases: int = 0
    increases: int = 0
    most_in_flight: int = 0
    changes: list[tuple[str, int]] = field(default_factory=list)  # ("down"|"up", new limit)

    def as_dict(self) -> dict:
        """The numbers, without the history (MLflow metrics)."""
        return {
            "concurrency_start": self.start,
            "concurrency_final": self.limit,
            "concurrency_lowest": self.lowest,
            "concurrency_decreases": self.decreases,
            "concurrency_increases": self.increases,
            "concurrency_most_in_flight": self.most_in_flight,
        }


class AdaptiveLimit:
    """An asyncio bound on attempts in flight that halves on overload and grows on success.

    Use ``async with limit.slot() as ticket:`` around one attempt and call
    ``limit.record(ticket, outcome)`` with :data:`SUCCESS`, :data:`OVERLOAD` or :data:`NEUTRAL`
    before leaving the block.
    """

    def __init__(self, maximum: int, stats: ConcurrencyStats | None = None) -> None:
        """``stats``: those of an earlier call, to go on from the bound it reached."""
        if maximum < 1:
            raise ValueError(f"concurrency bound must be >= 1, got {maximum}")
        self.maximum = int(maximum)
        self.stats = stats or ConcurrencyStats(start=self.maximum, limit=self.maximum, lowest=self.maximum)
        self._in_flight = 0
        self._epoch = 0  # bumped on every decrease; an attempt remembers the epoch it was sent in
        self._successes = 0
        self._changed = asyncio.Condition()

    @property
    def limit(self) -> int:
        return self.stats.limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.asynccontextmanager
    async def slot(self):
        """Wait until fewer than ``limit`` attempts are in flight; yields the attempt's ticket."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._in_flight < self.stats.limit)
            self._in_flight += 1
            self.stats.most_in_flight = max(self.stats.most_in_flight, self._in_flight)
        try:
            yield self._epoch
        finally:
            async with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def record(self, ticket: int, outcome: str) -> None:
        """Adjust the bound after an attempt sent in epoch ``ticket`` ended with ``outcome``."""
        stats = self.stats
        if outcome == OVERLOAD:
            self._successes = 0
            if ticket == self._epoch and stats.limit > 1:  # one decrease per window of attempts
                stats.limit = max(1, stats.limit // 2)
                stats.lowest = min(stats.lowest, stats.limit)
                stats.decreases += 1
                stats.changes.append(("down", stats.limit))
            if ticket == self._epoch:
                self._epoch += 1
        elif outcome == SUCCESS:
            self._successes += 1
            if self._successes >= max(stats.limit, GROW_AFTER) and stats.limit < self.maximum:
                self._successes = 0
                stats.limit += 1
                stats.increases += 1
                stats.changes.append(("up", stats.limit))  # waiters re-check when this slot is released


def attempt_timeout(timeout_s: float, max_tokens: int, min_tokens_per_s: float, queued: int) -> float:
    """Seconds one attempt may take: at least ``timeout_s``, and long enough for ``queued``
    answers of ``max_tokens`` tokens at ``min_tokens_per_s`` (a one-slot server runs the
    requests in flight one after another)."""
    return max(float(timeout_s), max(1, queued) * max_tokens / float(min_tokens_per_s))
