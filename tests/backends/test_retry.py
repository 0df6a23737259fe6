"""Retry policy: which statuses retry, jitter bounds, Retry-After parsing, and the Batch API's calls on it."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from types import SimpleNamespace

import httpx
import openai
import pytest

from src.backends.batch_apis import BatchAPIError, FileBatches
from src.backends.retry import (
    RetryPolicy,
    is_auth_status,
    is_retryable_status,
    parse_retry_after,
)


@pytest.mark.parametrize(
    "status, retryable",
    [
        (408, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (599, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_retryable_statuses(status, retryable):
    assert is_retryable_status(status) is retryable


@pytest.mark.parametrize("status, auth", [(401, True), (403, True), (400, False), (407, False), (429, False)])
def test_auth_statuses_are_recognised_and_never_retried(status, auth):
    assert is_auth_status(status) is auth
    assert not (auth and is_retryable_status(status))


def test_full_jitter_stays_under_the_exponential_cap():
    policy = RetryPolicy(max_retries=8, backoff_base_s=0.5, backoff_max_s=4.0)
    rng = random.Random(0)
    for attempt in range(8):
        cap = min(4.0, 0.5 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > 0.8 * cap  # jitter spans the range, not a constant
    policy = RetryPolicy(6, 1.0, 60.0)
    assert policy.delay(3, random.Random(7)) == policy.delay(3, random.Random(7))


def test_retry_after_overrides_jitter_and_is_capped():
    policy = RetryPolicy(6, backoff_base_s=100.0, backoff_max_s=60.0, retry_after_max_s=30.0)
    assert policy.delay(0, random.Random(0), retry_after=2.5) == 2.5
    assert policy.delay(0, random.Random(0), retry_after=3600) == 30.0


def test_parse_retry_after_forms():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(12.0)
    assert parse_retry_after(email.utils.formatdate(now - 50, usegmt=True), now=now) == 0.0


def test_policy_rejects_negative_values():
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1, backoff_base_s=1.0, backoff_max_s=60.0)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo", "UTC"])
def test_an_http_date_without_a_zone_is_read_as_utc_in_every_local_time_zone(monkeypatch, zone):
    """Regression: a 10 s Retry-After became the 300 s cap in New York and 0 s in Tokyo."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        now = 1_700_000_000.0
        without_zone = email.utils.formatdate(now + 10, usegmt=True)[: -len(" GMT")]
        assert parse_retry_after(without_zone, now=now) == pytest.approx(10.0)
        assert parse_retry_after(without_zone + " -0000", now=now) == pytest.approx(10.0)
        assert parse_retry_after(email.utils.formatdate(now + 10, localtime=True), now=now) == pytest.approx(10.0)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        (500, "Input should be 'text' or 'json_object'", True),  # llama.cpp's server
        (400, '{"error": {"message": "response_format is not supported"}}', True),
        (422, "unknown field json_schema", True),
        (500, "CUDA out of memory", False),  # a server fault: retried
        (503, "response_format busy", False),  # overload, whatever the text
        (404, "json_schema", False),
    ],
)
def test_a_refusal_of_the_schema_form_is_told_from_a_server_fault(status, body, refused):
    from src.backends.openai_reply import is_format_refusal

    assert is_format_refusal(status, body) is refused


def _status_error(status: int, retry_after: str | None = None) -> openai.APIStatusError:
    headers = {} if retry_after is None else {"retry-after": retry_after}
    response = httpx.Response(status, headers=headers, request=httpx.Request("GET", "http://127.0.0.1/v1/batches"))
    return openai.APIStatusError(f"HTTP {status}", response=response, body=None)


def _batch_api(monkeypatch, waits: list[float]) -> FileBatches:
    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    backend = SimpleNamespace(
        seed=0, retry=RetryPolicy(6, 1.0, 60.0), _redact=lambda text: text, _auth_message=lambda status: "rejected"
    )
    return FileBatches(backend, client=None)


def test_a_batch_api_call_backs_off_with_full_jitter_and_honours_retry_after(monkeypatch):
    """The Batch API's calls retry on the backend's policy (tenacity): jittered under the
    exponential cap, a server's Retry-After as sent; the loop before waited exactly base * 2**k."""
    waits: list[float] = []
    api = _batch_api(monkeypatch, waits)
    faults = [_status_error(503), _status_error(503), _status_error(429, "7"), _status_error(500)]

    async def make():
        if faults:
            raise faults.pop(0)
        return "answered"

    assert asyncio.run(api.call(make)) == "answered"
    assert len(waits) == 4 and waits[2] == 7.0
    jittered = [waits[0], waits[1], waits[3]]
    assert all(0.0 <= wait <= cap for wait, cap in zip(jittered, (1.0, 2.0, 8.0)))
    assert jittered != [1.0, 2.0, 8.0]


def test_a_batch_api_call_gives_up_after_its_retries_and_never_retries_a_bad_request(monkeypatch):
    waits: list[float] = []
    api = _batch_api(monkeypatch, waits)
    sent = []

    async def failing(status: int):
        sent.append(status)
        raise _status_error(status)

    with pytest.raises(BatchAPIError, match="HTTP 502"):
        asyncio.run(api.call(lambda: failing(502), retries=3))
    assert sent == [502] * 4 and len(waits) == 3
    sent.clear()
    with pytest.raises(BatchAPIError, match="HTTP 400"):
        asyncio.run(api.call(lambda: failing(400)))
    assert sent == [400]
    with pytest.raises(BatchAPIError, match="rejected"):
        asyncio.run(api.call(lambda: failing(401)))
