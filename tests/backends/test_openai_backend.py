"""The OpenAI-compatible backend against the loopback server: retries, bounds, failures, secrets."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from src.backends.base import ChatRequest
from src.backends.openai_backend import MissingAPIKeyError, OpenAIBackend
from tests.backends.fake_openai_server import FakeOpenAIServer

KEY_ENV = "TEMPGEN_TEST_API_KEY"
SECRET = "fake-key-7f3a9c1e-DO-NOT-LEAK"


@pytest.fixture
def server():
    with FakeOpenAIServer() as running:
        yield running


@pytest.fixture
def make_backend(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)

    def make(**options) -> OpenAIBackend:
        defaults = dict(
            model_id="test/model", base_url=server.base_url, api_key_env=KEY_ENV,
            max_concurrency=8, timeout_s=5.0, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05,
        )
        return OpenAIBackend(**{**defaults, **options})

    return make


def request(text: str, **fields) -> ChatRequest:
    return ChatRequest((("system", "Extract spans."), ("user", text)), max_tokens=64, request_id=text, **fields)


def test_answers_in_order_with_usage_and_sends_deterministic_settings(server, make_backend):
    backend = make_backend(request_cost=True)
    requests = [request(f"sentence {i}") for i in range(5)]
    results = backend.generate(requests)
    assert [r.text for r in results] == [f'["sentence {i}"]' for i in range(5)]
    assert [r.request for r in results] == requests
    assert all(r.error is None and not r.cached and r.latency_s > 0 for r in results)
    assert results[0].usage["prompt_tokens"] == 4 and results[0].usage["completion_tokens"] == 2
    assert results[0].usage["cost"] == pytest.approx(6e-6)
    body = server.bodies[0]
    assert body["temperature"] == 0 and body["seed"] == 0 and body["max_tokens"] == 64
    assert body["model"] == "test/model" and body["usage"] == {"include": True}
    assert server.authorizations[0] == f"Bearer {SECRET}"


def test_usage_include_only_sent_to_openrouter_by_default(server, make_backend):
    make_backend().generate([request("x")])
    assert "usage" not in server.bodies[0]


def test_429_is_retried_after_retry_after(server, make_backend):
    server.inject("flaky", status=429, times=2, retry_after=0.25)
    results = make_backend().generate([request("flaky one"), request("steady")])
    assert results[0].text == '["flaky one"]' and results[1].text == '["steady"]'
    arrivals = server.arrivals_matching("flaky")
    assert len(arrivals) == 3
    gaps = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    assert all(gap >= 0.24 for gap in gaps), gaps


def test_5xx_is_retried(server, make_backend):
    server.inject("wobbly", status=500, times=1)
    server.inject("wobbly", status=503, times=1)
    (result,) = make_backend().generate([request("wobbly")])
    assert result.text == '["wobbly"]' and result.error is None
    assert server.requests_matching("wobbly") == 3


def test_timeout_is_retried(server, make_backend):
    server.inject("sleepy", delay_s=1.5, times=1)
    started = time.monotonic()
    (result,) = make_backend(timeout_s=0.3).generate([request("sleepy")])
    assert result.text == '["sleepy"]'
    assert server.requests_matching("sleepy") == 2
    assert time.monotonic() - started < 1.4  # did not wait for the slow answer


def test_400_fails_at_once(server, make_backend):
    server.inject("bad", status=400, times=None)
    results = make_backend().generate([request("bad"), request("good")])
    assert results[0].text is None and "HTTP 400" in results[0].error
    assert results[1].text == '["good"]'
    assert server.requests_matching("bad") == 1


def test_gives_up_after_retries_while_others_succeed(server, make_backend):
    server.inject("doomed", status=503, times=None)
    requests = [request(f"fine {i}") for i in range(6)] + [request("doomed")]
    results = make_backend(max_retries=2).generate(requests)
    assert [r.text is not None for r in results] == [True] * 6 + [False]
    assert "gave up after 3 attempts" in results[-1].error and "503" in results[-1].error
    assert server.requests_matching("doomed") == 3


def test_concurrency_bound_is_respected_and_reached(make_backend):
    with FakeOpenAIServer(latency_s=0.1) as slow:
        backend = make_backend(base_url=slow.base_url, max_concurrency=4)
        results = backend.generate([request(f"s{i}") for i in range(20)])
        assert all(r.text for r in results)
        assert slow.max_in_flight == 4


def test_on_result_reports_each_request_as_it_finishes(server, make_backend):
    server.inject("late", delay_s=0.4)
    seen: list[tuple[int, float]] = []
    backend = make_backend()
    results = backend.generate(
        [request("late"), request("early")], on_result=lambda i, r: seen.append((i, time.monotonic()))
    )
    assert [i for i, _ in seen] == [1, 0]  # completion order, not request order
    assert [r.text for r in results] == ['["late"]', '["early"]']


def test_generate_works_inside_a_running_event_loop(make_backend):
    backend = make_backend()

    async def inside_loop():
        return backend.generate([request("in loop")])

    assert asyncio.run(inside_loop())[0].text == '["in loop"]'


def test_missing_key_fails_at_construction_naming_the_variable(monkeypatch, server):
    monkeypatch.delenv("TEMPGEN_ABSENT_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="TEMPGEN_ABSENT_KEY"):
        OpenAIBackend(model_id="m", base_url="https://openrouter.ai/api/v1", api_key_env="TEMPGEN_ABSENT_KEY")
    with pytest.raises(MissingAPIKeyError, match="TEMPGEN_ABSENT_KEY"):
        OpenAIBackend(model_id="m", base_url=server.base_url, api_key_env="TEMPGEN_ABSENT_KEY", require_api_key=True)
    assert server.request_count == 0


def test_loopback_server_needs_no_key(monkeypatch, server):
    monkeypatch.delenv("TEMPGEN_ABSENT_KEY", raising=False)
    backend = OpenAIBackend(model_id="m", base_url=server.base_url, api_key_env="TEMPGEN_ABSENT_KEY")
    assert backend.generate([request("local")])[0].text == '["local"]'
    assert server.authorizations[0] == "Bearer EMPTY"


def test_api_key_never_leaks(server, make_backend, caplog):
    caplog.set_level(logging.DEBUG)
    # A provider that echoes the credential back in its error body.
    server.inject("echo", status=401, times=None, body=f'{{"error": {{"message": "bad key {SECRET}"}}}}')
    server.inject("retry", status=429, times=None, retry_after=0.01, body=f'{{"error": "{SECRET}"}}')
    backend = make_backend(max_retries=1)
    results = backend.generate([request("echo"), request("retry"), request("ok")])
    assert results[2].text == '["ok"]'
    assert results[0].error and results[1].error
    texts = [caplog.text, repr(backend), str(backend)]
    texts += [repr(r) for r in results] + [str(r.error) for r in results]
    assert all(SECRET not in text for text in texts)
    assert "***" in results[0].error  # the echoed key was redacted, not just absent
    assert server.authorizations[0] == f"Bearer {SECRET}"


def test_rejects_bad_options(make_backend):
    with pytest.raises(ValueError, match="max_concurrency"):
        make_backend(max_concurrency=0)
    with pytest.raises(ValueError, match="model_id"):
        make_backend(model_id="")
