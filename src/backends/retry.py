"""Retry policy for remote backends: which failures to retry and how long to wait.

Rate limits (429), server errors (5xx), request timeouts (408), conflicts (409: the server
was busy with the same resource; OpenAI's own client retries them) and transport failures are
transient, so they are retried with exponential backoff and full jitter (a uniform wait in
``[0, min(max, base * 2**attempt)]``) so that many concurrent requests do not retry in
lockstep. A server's ``Retry-After`` overrides the jittered wait. Every retry loop runs on
tenacity with this policy as its wait (:meth:`RetryPolicy.wait`). A 200 that is not an answer
(null content, bad JSON, an ``error`` object) is retried the same way by the backend. Every
other 4xx is a bug in the request (bad model id, a pin no provider matches) and fails at once,
and counts toward the call's early stop on a repeated fault; 401/403 (a rejected key) too, with
their own message, since retrying a bad key only repeats the rejection.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC

from tenacity import RetryCallState
from tenacity.wait import wait_base

RETRYABLE_STATUS = frozenset({408, 409, 429})
AUTH_STATUS = frozenset({401, 403})


@dataclass(frozen=True)
class RetryPolicy:
    """How many times and how patiently to retry.

    Attributes:
        max_retries: retries after the first attempt (0 disables retrying).
        backoff_base_s: wait scale of the first retry.
        backoff_max_s: cap of the exponential wait (before jitter).
        retry_after_max_s: cap on a server's ``Retry-After`` so a bad header cannot stall a run.
    """

    max_retries: int
    backoff_base_s: float
    backoff_max_s: float
    retry_after_max_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff_base_s and backoff_max_s must be >= 0")

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based).

        Args:
            attempt: how many retries already happened.
            rng: source of the jitter (seeded by the caller).
            retry_after: the server's ``Retry-After`` in seconds, if it sent one.
        """
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        return rng.uniform(0.0, ceiling)

    def wait(self, rng: random.Random, retry_after: Callable[[RetryCallState], float | None]) -> wait_base:
        """This policy as tenacity's wait: :meth:`delay` of the attempts so far, with the
        ``Retry-After`` that ``retry_after`` reads from the failed attempt."""
        return _PolicyWait(self, rng, retry_after)


class _PolicyWait(wait_base):
    def __init__(self, policy: RetryPolicy, rng: random.Random, retry_after) -> None:
        self.policy, self.rng, self.retry_after = policy, rng, retry_after

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.policy.delay(retry_state.attempt_number - 1, self.rng, self.retry_after(retry_state))


def is_retryable_status(status: int) -> bool:
    """True for 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_STATUS or 500 <= status <= 599


def is_auth_status(status: int) -> bool:
    """True for 401 and 403: the credential was rejected."""
    return status in AUTH_STATUS


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date).

    An HTTP date is GMT by definition (RFC 9110), so one written without a zone (or with
    ``-0000``) is read as UTC, never as the local time of the machine. Returns None when the
    header is missing or malformed.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(moment.timestamp() - (time.time() if now is None else now), 0.0)
