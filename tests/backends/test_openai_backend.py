"""The OpenAI-compatible backend against the loopback server: retries, bounds, failures, secrets."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import (
    KeyHostMismatchError,
    MissingAPIKeyError,
    OpenAIBackend,
)
from src.core.requests import ChatRequest
from tests.helpers.openai_server import FakeOpenAIServer, OpenAIServer

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
            min_tokens_per_s=None,  # timeout_s alone
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
    server.inject("sleepy", delay_s=6.0, times=1)
    started = time.monotonic()
    (result,) = make_backend(timeout_s=0.3).generate([request("sleepy")])
    assert result.text == '["sleepy"]'
    assert server.requests_matching("sleepy") == 2
    assert time.monotonic() - started < 4.0  # gave up on the 6 s answer after 0.3 s (wide margin: a loaded CI machine)


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
    "blank content": '{"choices": [{"message": {"content": "  "}, "finish_reason": "error"}]}',
    "content filter": '{"choices": [{"message": {"content": "[]"}, "finish_reason": "content_filter"}]}',
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


def test_an_empty_answer_is_retried_and_kept_only_when_it_said_stop_every_time(tmp_path, server, make_backend):
    blank = '{"choices": [{"message": {"content": "%s"}, "finish_reason": "stop"}]}'
    server.inject("blank", status=200, times=None, body=blank % "")
    server.inject("spaces", status=200, times=1, body=blank % " \\n ")
    cached = CachedBackend(make_backend(max_retries=2), ResponseCache(tmp_path))
    blank_result, healed = cached.generate([request("blank"), request("spaces")])
    assert blank_result.text == "" and blank_result.ok and blank_result.empty and blank_result.finish_reason == "stop"
    assert server.requests_matching("blank") == 3  # retried like a transient fault first
    assert healed.text == '["spaces"]' and not healed.empty and server.requests_matching("spaces") == 2
    assert all(r.cached for r in cached.generate([request("blank"), request("spaces")]))


@pytest.mark.parametrize(
    "finish_reasons, cause",
    [
        (["error"], "blank answer with finish_reason 'error'"),
        (["content_filter"], "blank answer with finish_reason 'content_filter'"),
        ([None], "blank answer with finish_reason None"),
        (["no_idea"], "blank answer with finish_reason 'no_idea'"),
        (["stop", "stop", "error"], "blank answer with finish_reason 'error'"),
        (["error", "stop", "stop"], "blank answer with finish_reason 'stop'"),
    ],
)
def test_an_empty_answer_that_did_not_say_stop_every_time_fails_and_is_not_cached(
    tmp_path, server, make_backend, finish_reasons, cause
):
    for reason in finish_reasons:
        choice = {"message": {"content": ""}, "finish_reason": reason}
        server.inject("blank", status=200, times=1, body=json.dumps({"choices": [choice]}))
    cache = ResponseCache(tmp_path)
    (result,) = CachedBackend(make_backend(max_retries=len(finish_reasons) - 1), cache).generate([request("blank")])
    assert result.text is None and not result.ok
    assert result.error == f"gave up after {len(finish_reasons)} attempts: {cause}"
    assert len(cache) == 0


def test_content_as_a_list_of_text_parts_is_joined(server, make_backend):
    parts = [{"type": "text", "text": '["Fri'}, {"type": "reasoning", "text": "x"}, {"type": "text", "text": 'day"]'}]
    body = {"choices": [{"message": {"content": parts}, "finish_reason": "stop"}]}
    server.inject("parts", status=200, times=None, body=json.dumps(body))
    (result,) = make_backend().generate([request("parts")])
    assert result.text == '["Friday"]' and server.requests_matching("parts") == 1


NEVER_HEALS = {
    "content a number": ('{"choices": [{"message": {"content": 42}}]}', "content is a JSON int"),
    "content parts without text": (
        '{"choices": [{"message": {"content": [{"type": "image_url"}]}}]}',
        "list of parts without text",
    ),
    "JSON array body": ("[1, 2]", "response is a JSON list, not an object"),
    "choices an object": ('{"choices": {"message": "x"}}', "choices is a JSON dict"),
    "message a string": ('{"choices": [{"message": "x"}]}', "message is a JSON str"),
}


@pytest.mark.parametrize("kind", sorted(NEVER_HEALS))
def test_a_reply_that_retrying_cannot_heal_is_sent_twice_at_most_and_named(server, make_backend, kind):
    body, cause = NEVER_HEALS[kind]
    server.inject("odd", status=200, times=None, body=body)
    (result,) = make_backend(max_retries=6).generate([request("odd")])
    assert result.text is None and server.requests_matching("odd") == 2
    assert result.error.startswith("gave up after 2 attempts: ") and cause in result.error, result.error
    assert result.error.endswith("retrying does not heal this")


def test_an_undecodable_gzip_body_is_named_and_retried_once(make_backend):
    with OpenAIServer() as broken:
        broken.doom("zip", "bad_gzip")
        (result,) = make_backend(base_url=broken.base_url, max_retries=6).generate([request("zip")])
        assert broken.requests_matching("zip") == 2
    assert "response body could not be decoded: DecodingError" in result.error, result.error
    assert "Connection error." not in result.error


def test_a_length_cut_far_short_of_the_budget_is_retried(server, make_backend):
    cut = {"choices": [{"message": {"content": '["Fr'}, "finish_reason": "length"}], "usage": {"completion_tokens": 2}}
    full = {**cut, "usage": {"completion_tokens": 64}}
    server.inject("short", status=200, times=1, body=json.dumps(cut))
    server.inject("budget", status=200, times=None, body=json.dumps(full))
    short, budget = make_backend().generate([request("short"), request("budget")])
    assert short.text == '["short"]' and short.finish_reason == "stop" and server.requests_matching("short") == 2
    assert budget.text == '["Fr' and budget.finish_reason == "length" and server.requests_matching("budget") == 1


def test_the_served_model_is_recorded_on_every_answer_and_in_the_cache(tmp_path, make_backend, caplog):
    fields = {"system_fingerprint": "fp_44709d6fcb", "provider": "Fireworks"}
    with OpenAIServer(served_model="openai/gpt-4o-2024-08-06", extra_fields=fields) as other:
        cached = CachedBackend(make_backend(model_id="gpt-4o", base_url=other.base_url), ResponseCache(tmp_path))
        (fresh,) = cached.generate([request("a")])
    (hit,) = cached.generate([request("a")])
    expected = {"model": "openai/gpt-4o-2024-08-06", **fields}
    assert fresh.served == expected and hit.served == expected and hit.cached
    assert "served by another model" not in caplog.text  # same model under the matching rule


def test_a_mismatch_warns_once_by_default_and_fails_uncached_with_fail(tmp_path, make_backend, caplog):
    with OpenAIServer(served_model="fallback/other-7b") as other:
        warned = CachedBackend(make_backend(base_url=other.base_url), ResponseCache(tmp_path / "warn"))
        results = warned.generate([request("a"), request("b")])
        assert [r.text for r in results] == ['["a"]', '["b"]'] and results[0].served["model"] == "fallback/other-7b"
        assert caplog.text.count("served by another model") == 1
        assert "2 of 2 answers were served by another model than test/model: fallback/other-7b x2" in caplog.text
        other.reset_counts()
        strict_cache = ResponseCache(tmp_path / "fail")
        strict = CachedBackend(make_backend(base_url=other.base_url, on_model_mismatch="fail"), strict_cache)
        (failed,) = strict.generate([request("a")])
        assert other.request_count == 4  # retried like a transient fault (max_retries 3), then failed
    assert failed.text is None and "served model 'fallback/other-7b' is not 'test/model'" in failed.error
    assert len(strict_cache) == 0
    with pytest.raises(ValueError, match="on_model_mismatch"):
        make_backend(on_model_mismatch="ignore")


def test_credentials_in_the_base_url_are_never_shown(make_backend, monkeypatch):
    with OpenAIServer() as running:
        host = running.base_url.split("//")[1]
        backend = make_backend(base_url=f"http://alice:s3cr3t-TOKEN@{host}", api_key_env=None)
        assert "s3cr3t-TOKEN" not in repr(backend) and "alice" not in repr(backend)
        assert backend.cache_identity()["base_url"] == running.base_url
        running.inject(None, status=401, times=None)
        (result,) = backend.generate([request("a")])
    assert "s3cr3t-TOKEN" not in result.error and host in result.error


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

    from src.backends.openai_backend import OpenAIBackend as _Backend
    from src.core.requests import ChatRequest as _Request

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


SCHEMA = json.dumps({"type": "array", "items": {"type": "string"}})


def schema_requests(n: int, prefix: str = "s") -> list[ChatRequest]:
    return [request(f"{prefix} {i}", response_schema=SCHEMA) for i in range(n)]


def test_auto_falls_back_to_json_object_once_on_a_refusal_and_resends_without_billing_an_attempt(make_backend):
    with OpenAIServer(refuse_formats=("json_schema",)) as refusing:
        backend = make_backend(base_url=refusing.base_url, schema_format="auto", max_retries=0)
        results = backend.generate(schema_requests(6))
        assert refusing.request_count == 7 and refusing.refused_formats == {"json_schema": 1}  # once per run
        assert [body["response_format"]["type"] for body in refusing.bodies[1:]] == ["json_object"] * 6
        again = backend.generate(schema_requests(3, "t"))  # the backend remembers the form
        assert refusing.request_count == 10 and refusing.refused_formats == {"json_schema": 1}
    # max_retries=0: the refused request still answered, so the refusal was not an attempt
    assert [r.text for r in results] == [f'["s {i}"]' for i in range(6)] and all(r.ok for r in again)
    assert backend.schema_form_used == "json_object" and backend.format_refusals == 1


def test_auto_goes_on_to_no_schema_when_json_object_is_refused_too(make_backend):
    with OpenAIServer(refuse_formats=("json_schema", "json_object")) as refusing:
        backend = make_backend(base_url=refusing.base_url, schema_format="auto")
        results = backend.generate(schema_requests(4))
        assert refusing.refused_formats == {"json_schema": 1, "json_object": 1}
        assert refusing.request_count == 6 and all("response_format" not in b for b in refusing.bodies[2:])
    assert all(r.ok for r in results) and backend.schema_form_used == "none"


@pytest.mark.parametrize("schema_format", ["strict", "json_schema"])
def test_strict_fails_on_a_refusal_with_one_message_and_no_retry(make_backend, caplog, schema_format):
    with OpenAIServer(refuse_formats=("json_schema",)) as refusing:
        backend = make_backend(base_url=refusing.base_url, schema_format=schema_format)
        results = backend.generate(schema_requests(5))
        assert refusing.request_count == 1  # the first request goes alone; the rest are not sent
    errors = {r.error for r in results}
    assert len(errors) == 1 and all(r.text is None for r in results)
    [error] = errors
    assert error.startswith("the server refused response_format json_schema (HTTP 500:")
    assert "Input should be" in error and "schema_format=auto" in error  # the server's reason, and the cure
    assert backend.schema_form_used is None


def test_a_500_that_does_not_name_the_format_is_still_retried_as_a_server_error(server, make_backend):
    server.inject("flaky", status=500, times=1, body='{"error": {"message": "CUDA out of memory"}}')
    backend = make_backend(schema_format="strict")
    [result] = backend.generate([request("flaky", response_schema=SCHEMA)])
    assert result.ok and server.requests_matching("flaky") == 2 and backend.format_refusals == 0


def test_auto_has_its_own_cache_identity_and_strict_shares_json_schemas(tmp_path, make_backend):
    assert "schema_format" not in make_backend(schema_format="strict").cache_identity()
    assert make_backend(schema_format="strict").cache_identity() == make_backend().cache_identity()
    assert make_backend(schema_format="auto").cache_identity()["schema_format"] == "auto"
    with OpenAIServer(refuse_formats=("json_schema",)) as refusing:
        cache = ResponseCache(tmp_path)
        first = CachedBackend(make_backend(base_url=refusing.base_url, schema_format="auto"), cache)
        first.generate(schema_requests(3))
        sent = refusing.request_count
        rerun = CachedBackend(make_backend(base_url=refusing.base_url, schema_format="auto"), cache)
        results = rerun.generate(schema_requests(3))
        assert refusing.request_count == sent == 4  # a rerun sends nothing, not even a probe
    assert all(r.cached for r in results) and rerun.backend.schema_form_used is None
