"""The adaptive bound on requests in flight (AIMD) and the attempt timeout, alone and against a
one-slot server that queues or refuses what it cannot serve at once."""

from __future__ import annotations

import asyncio

import pytest

from src.backends.concurrency import GROW_AFTER, NEUTRAL, OVERLOAD, SUCCESS, AdaptiveLimit, attempt_timeout
from src.backends.openai_backend import OpenAIBackend
from src.core.requests import ChatRequest
from tests.helpers.openai_server import OpenAIServer

N = 12


def requests(n: int = N, max_tokens: int = 64) -> list[ChatRequest]:
    return [ChatRequest((("user", f"sentence {i}"),), max_tokens=max_tokens, request_id=str(i)) for i in range(n)]


def backend(server: OpenAIServer, **options) -> OpenAIBackend:
    defaults = dict(
        model_id="m",
        base_url=server.base_url,
        api_key_env=None,
        max_concurrency=16,
        timeout_s=0.3,
        max_retries=10,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
    )
    return OpenAIBackend(**{**defaults, **options})


def test_overload_halves_once_per_window_and_never_below_one():
    async def scenario() -> AdaptiveLimit:
        limit = AdaptiveLimit(16)
        tickets = []
        for _ in range(5):  # five attempts sent under the same bound, all overloaded
            async with limit.slot() as ticket:
                tickets.append(ticket)
        for ticket in tickets:
            limit.record(ticket, OVERLOAD)
        assert limit.limit == 8  # one decrease for the burst, not five
        for _ in range(10):  # each overload sent after the last decrease halves again
            async with limit.slot() as ticket:
                limit.record(ticket, OVERLOAD)
        return limit

    limit = asyncio.run(scenario())
    assert limit.limit == 1 and limit.stats.lowest == 1
    assert limit.stats.decreases == 4  # 16 -> 8 -> 4 -> 2 -> 1, then it stays at 1
    assert [new for _, new in limit.stats.changes] == [8, 4, 2, 1]


def test_a_window_of_successes_grows_the_bound_by_one_up_to_the_maximum():
    async def scenario() -> AdaptiveLimit:
        limit = AdaptiveLimit(4)
        async with limit.slot() as ticket:
            limit.record(ticket, OVERLOAD)  # 4 -> 2
        for _ in range(GROW_AFTER - 1):  # not yet a window
            async with limit.slot() as ticket:
                limit.record(ticket, SUCCESS)
        assert limit.limit == 2
        for _ in range(1 + GROW_AFTER + 100):  # a window 2 -> 3, another 3 -> 4, then capped
            async with limit.slot() as ticket:
                limit.record(ticket, SUCCESS)
        async with limit.slot() as ticket:
            limit.record(ticket, NEUTRAL)  # a client-side fault says nothing about load
        return limit

    limit = asyncio.run(scenario())
    assert limit.limit == 4 and limit.stats.increases == 2 and limit.stats.decreases == 1


def test_the_bound_holds_attempts_in_flight():
    async def scenario() -> tuple[int, AdaptiveLimit]:
        limit = AdaptiveLimit(3)
        seen = 0

        async def work() -> None:
            nonlocal seen
            async with limit.slot():
                seen = max(seen, limit.in_flight)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(work() for _ in range(20)))
        return seen, limit

    seen, limit = asyncio.run(scenario())
    assert seen == 3 and limit.stats.most_in_flight == 3 and limit.in_flight == 0


def test_the_attempt_timeout_covers_one_slow_answer_per_queued_request():
    assert attempt_timeout(120, 512, 10, 16) == pytest.approx(16 * 51.2)
    assert attempt_timeout(120, 64, 10, 1) == 120  # never under timeout_s
    assert attempt_timeout(1, 64, 10, 0) == pytest.approx(6.4)  # at least one answer


def test_a_one_slot_queueing_server_gets_exactly_one_request_per_instance():
    # 12 requests at 0.1 s each queue up to 1.2 s, far past timeout_s=0.3; the derived timeout
    # (16 queued x 64 tokens / 200 tokens/s = 5.1 s) waits for them instead of re-sending.
    with OpenAIServer(latency_s=0.1, slots=1, when_busy="queue") as server:
        client = backend(server, min_tokens_per_s=200.0)
        results = client.generate(requests())
        assert server.request_count == N and server.most_served == 1
    assert all(result.ok for result in results), [result.error for result in results]
    assert client.concurrency_stats.decreases == 0


def test_without_the_derived_timeout_the_same_server_is_sent_duplicates():
    # The failure the timeout rule prevents: queued requests time out and are sent again.
    with OpenAIServer(latency_s=0.1, slots=1, when_busy="queue") as server:
        client = backend(server, min_tokens_per_s=None, max_retries=2)
        client.generate(requests())
        assert server.request_count > N
    assert client.concurrency_stats.decreases >= 1  # and the timeouts lowered the bound


def test_a_one_slot_server_that_refuses_when_busy_brings_the_bound_down_to_one():
    with OpenAIServer(latency_s=0.05, slots=1, when_busy="429") as server:
        client = backend(server, min_tokens_per_s=200.0)
        results = client.generate(requests())
        sent, refused = server.request_count, server.busy_refusals
    assert all(result.ok for result in results), [result.error for result in results]
    stats = client.concurrency_stats
    assert stats.lowest == 1 and 4 <= stats.decreases <= 5  # 16 -> 8 -> 4 -> 2 -> 1 (and one probe of 2)
    assert sent == N + refused and refused <= 3 * N  # bounded: about one refused wave per halving


def test_no_request_ever_has_two_attempts_in_flight(monkeypatch):
    in_flight: dict[str, int] = {}
    most = {"value": 0}
    original = OpenAIBackend._attempt

    async def counted(self, request, *args):
        in_flight[request.request_id] = in_flight.get(request.request_id, 0) + 1
        most["value"] = max(most["value"], in_flight[request.request_id])
        try:
            return await original(self, request, *args)
        finally:
            in_flight[request.request_id] -= 1  # runs once the timed-out attempt is cancelled

    monkeypatch.setattr(OpenAIBackend, "_attempt", counted)
    with OpenAIServer(latency_s=0.05, fault_rate=0.5, kinds=("hang", "429", "500"), hang_s=0.5) as server:
        results = backend(server, timeout_s=0.2).generate(requests())
        assert server.request_count > N  # faults were served and retried
    assert all(result.ok for result in results), [result.error for result in results]
    assert most["value"] == 1 and set(in_flight.values()) == {0}


def test_the_bound_carries_over_to_the_next_call():
    with OpenAIServer(latency_s=0.02, slots=1, when_busy="429") as server:
        client = backend(server, min_tokens_per_s=200.0)
        client.generate(requests())
        lowered = client.concurrency_stats.limit
        server.reset_counts()
        client.generate(requests(4))
        refused_again = server.busy_refusals
    assert lowered < 16
    assert refused_again <= 1  # the second call starts where the first ended, not at 16
