"""The OpenAI-compatible backend against the loopback server: retries, bounds, failures, secrets."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from src.backends.base import ChatRequest
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import (
    KeyHostMismatchError,
    MissingAPIKeyError,
    OpenAIBackend,
)
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
            model_id="test/model",
            base_url=server.base_url,
            api_key_env=KEY_ENV,
            max_concurrency=8,
            timeout_s=5.0,
            max_retries=3,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
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
    server.inject("echo", status=400, times=None, body=f'{{"error": {{"message": "bad key {SECRET}"}}}}')
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


def test_partial_key_echoes_are_scrubbed(server, make_backend, caplog):
    """Servers echo a key's last (or first) characters; no 4+ character piece may survive."""
    caplog.set_level(logging.DEBUG)
    body = f'{{"error": {{"message": "key ...{SECRET[-6:]} invalid, starts {SECRET[:5]}"}}}}'
    server.inject("partial", status=400, times=None, body=body)
    (result,) = make_backend().generate([request("partial")])
    assert SECRET[-6:] not in result.error and SECRET[:5] not in result.error
    assert SECRET[-6:] not in caplog.text and SECRET[:5] not in caplog.text


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_names_the_variable_fails_at_once_and_hides_the_key(server, make_backend, caplog, status):
    caplog.set_level(logging.DEBUG)
    echo = f'{{"error": {{"message": "Invalid key sk-...{SECRET[-4:]}", "key": "{SECRET}"}}}}'
    server.inject(None, status=status, times=None, body=echo)
    results = make_backend(max_retries=4, max_concurrency=1).generate([request("a"), request("b")])
    assert [r.text for r in results] == [None, None]
    assert all(r.error.startswith(f"authentication failed: check {KEY_ENV}") for r in results)
    assert "after retries" not in results[0].error and f"HTTP {status}" in results[0].error
    assert server.request_count == 1  # no retry, and the second request is not sent to a rejecting server
    for text in [caplog.text] + [r.error for r in results]:
        assert SECRET[-4:] not in text and SECRET not in text


MALFORMED_200 = {
    "null content": '{"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]}',
    "missing content": '{"choices": [{"index": 0, "message": {"role": "assistant"}}]}',
    "missing message": '{"choices": [{"index": 0, "finish_reason": "stop"}]}',
    "empty choices": '{"choices": []}',
    "no choices": '{"id": "x"}',
    "truncated JSON": '{"choices": [{"index": 0, "message": {"role": "assist',
    "error object": '{"error": {"message": "upstream overloaded", "code": 502}, "choices": []}',
    "error beside choices": '{"error": {"message": "moderation"}, "choices": [{"message": {"content": "x"}}]}',
    "non-string content": '{"choices": [{"message": {"content": ["x"]}}]}',
    "JSON array body": "[1, 2]",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED_200))
def test_malformed_200_is_retried_like_a_5xx(server, make_backend, kind):
    server.inject("odd", status=200, times=2, body=MALFORMED_200[kind])
    (result,) = make_backend().generate([request("odd")])
    assert result.text == '["odd"]' and result.error is None
    assert server.requests_matching("odd") == 3


def test_html_200_is_retried(server, make_backend):
    server.inject("html", status=200, times=1, body="<html><body>Bad gateway</body></html>", content_type="text/html")
    (result,) = make_backend().generate([request("html")])
    assert result.text == '["html"]' and server.requests_matching("html") == 2


@pytest.mark.parametrize(
    "kind, cause",
    [
        ("null content", "null content"),
        ("missing message", "without message"),
        ("truncated JSON", "not valid JSON"),
        ("error object", "upstream overloaded"),
        ("empty choices", "without choices"),
    ],
)
def test_a_200_that_never_answers_ends_as_a_failure_naming_the_cause(tmp_path, server, make_backend, kind, cause):
    server.inject("odd", status=200, times=None, body=MALFORMED_200[kind])
    cache = ResponseCache(tmp_path)
    (result,) = CachedBackend(make_backend(max_retries=2), cache).generate([request("odd")])
    assert result.text is None and not result.ok
    assert "gave up after 3 attempts" in result.error and cause in result.error, result.error
    assert "AttributeError" not in result.error
    assert server.requests_matching("odd") == 3
    assert len(cache) == 0  # nothing cached, so the next run asks again


def test_empty_string_content_is_a_real_answer(server, make_backend):
    server.inject(
        "blank", status=200, times=None, body='{"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}'
    )
    (result,) = make_backend().generate([request("blank")])
    assert result.text == "" and result.ok and server.requests_matching("blank") == 1


def test_finish_reason_is_reported_and_survives_the_cache(tmp_path, server, make_backend):
    cut = '{"choices": [{"message": {"content": "[\\"Fri"}, "finish_reason": "length"}]}'
    server.inject("long", status=200, times=None, body=cut)
    cached = CachedBackend(make_backend(), ResponseCache(tmp_path))
    first = cached.generate([request("long"), request("short")])
    assert [r.finish_reason for r in first] == ["length", "stop"]
    again = cached.generate([request("long"), request("short")])
    assert all(r.cached for r in again) and [r.finish_reason for r in again] == ["length", "stop"]
    assert again[0].text == '["Fri'


def test_provider_key_goes_only_to_its_provider(monkeypatch, server):
    """OPENROUTER_API_KEY / OPENAI_API_KEY never leave for another host; loopback gets the placeholder."""
    monkeypatch.setenv("OPENROUTER_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "-openai")
    for variable in ("OPENROUTER_API_KEY", "OPENAI_API_KEY"):
        backend = OpenAIBackend(model_id="m", base_url=server.base_url, api_key_env=variable)
        assert backend.generate([request(variable)])[0].text == f'["{variable}"]'
    assert server.authorizations == ["Bearer EMPTY", "Bearer EMPTY"]
    for url in (
        "https://example.com/v1",
        "https://openrouter.ai.example.com/v1",
        "https://evilopenrouter.ai/v1",
        "http://10.0.0.5:8000/v1",
    ):
        with pytest.raises(KeyHostMismatchError, match="OPENROUTER_API_KEY.*openrouter.ai.*api_key_env"):
            OpenAIBackend(model_id="m", base_url=url, api_key_env="OPENROUTER_API_KEY")
    with pytest.raises(KeyHostMismatchError, match="OPENAI_API_KEY"):
        OpenAIBackend(model_id="m", base_url="https://openrouter.ai/api/v1", api_key_env="OPENAI_API_KEY")
    OpenAIBackend(model_id="m", base_url="https://openrouter.ai/api/v1", api_key_env="OPENROUTER_API_KEY")
    OpenAIBackend(model_id="m", base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")
    OpenAIBackend(
        model_id="m", base_url="https://example.com/v1", api_key_env="TEMPGEN_ABSENT_KEY_OK", require_api_key=False
    )


def test_a_key_variable_of_its_own_is_sent_to_any_host(monkeypatch, server):
    """Naming another variable (a vLLM started with --api-key) is the explicit opt-in."""
    monkeypatch.setenv("OPENROUTER_API_KEY", SECRET)
    monkeypatch.setenv("TEMPGEN_VLLM_KEY", "vllm-local-key")
    backend = OpenAIBackend(model_id="m", base_url=server.base_url, api_key_env="TEMPGEN_VLLM_KEY")
    backend.generate([request("own key")])
    assert server.authorizations == ["Bearer vllm-local-key"]


def test_every_loopback_spelling_counts_as_loopback(monkeypatch, server):
    monkeypatch.setenv("OPENROUTER_API_KEY", SECRET)
    port = server.base_url.rsplit(":", 1)[1]
    backend = OpenAIBackend(model_id="m", base_url=f"http://127.0.0.1:{port}", api_key_env="OPENROUTER_API_KEY")
    backend.generate([request("dotted")])
    for host in ("127.0.0.2", "[::1]", "LOCALHOST", "localhost."):
        OpenAIBackend(model_id="m", base_url=f"http://{host}:1/v1", api_key_env="OPENROUTER_API_KEY")
    assert server.authorizations == ["Bearer EMPTY"]


def test_rejects_bad_options(make_backend):
    with pytest.raises(ValueError, match="max_concurrency"):
        make_backend(max_concurrency=0)
    with pytest.raises(ValueError, match="model_id"):
        make_backend(model_id="")


def test_a_request_schema_is_sent_as_response_format_in_the_servers_dialect():
    import json as _json

    from src.backends.base import ChatRequest as _Request
    from src.backends.openai_backend import OpenAIBackend as _Backend

    schema = _json.dumps({"type": "array", "items": {"type": "string"}})
    with FakeOpenAIServer(answer=lambda body: '["Friday"]') as server:
        request = _Request(messages=(("user", "When?"),), response_schema=schema, request_id="r")
        for kind, expected in (
            (
                "json_schema",
                {
                    "type": "json_schema",
                    "json_schema": {"name": "answer", "strict": True, "schema": _json.loads(schema)},
                },
            ),
            ("json_object", {"type": "json_object", "schema": _json.loads(schema)}),
            ("none", None),
        ):
            backend = _Backend(model_id="m", base_url=server.base_url, schema_format=kind)
            [result] = backend.generate([request])
            assert result.ok
            assert server.bodies[-1].get("response_format") == expected
        assert "response_format" not in _Backend(model_id="m", base_url=server.base_url).cache_identity()


def test_an_answer_is_cut_at_the_first_repeated_item_of_its_final_list(tmp_path, server, make_backend):
    """The server cannot stop there, so the backend cuts the text: the same answer a local
    backend gives by stopping, finish_reason stop even where the server ran to its budget."""
    looping = '{"choices": [{"message": {"content": "[\\"Friday\\", \\"May\\", \\"Friday\\", \\"Fri"}, "finish_reason": "length"}]}'
    server.inject("loop", status=200, times=None, body=looping)
    cached = CachedBackend(make_backend(), ResponseCache(tmp_path))
    stopped, free = cached.generate([request("loop", stop_at_repeat="$"), request("loop")])
    assert (stopped.text, stopped.finish_reason) == ('["Friday", "May"]', "stop")
    assert (free.text, free.finish_reason) == ('["Friday", "May", "Friday", "Fri', "length")
    assert server.requests_matching("loop") == 2  # two cache keys
    again = cached.generate([request("loop", stop_at_repeat="$")])[0]
    assert again.cached and (again.text, again.finish_reason) == ('["Friday", "May"]', "stop")
