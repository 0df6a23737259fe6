"""The OpenAI backend through injected faults: nothing lost, nothing wrong, nothing asked twice."""

from __future__ import annotations

import json
import logging

import pytest

from src.backends.base import ChatRequest
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import OpenAIBackend
from tests.reliability.fault_server import FAULT_KINDS, FaultServer, quoted_words

KEY_ENV = "TEMPGEN_FAULT_TEST_KEY"
KEY = "fault-test-key-0a1b2c3d4e"
PROMPTS = [f'Sentence {i}: find "w{i}a" and "w{i}b".' for i in range(120)]


@pytest.fixture
def make_backend(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)

    def make(base_url: str, **options) -> OpenAIBackend:
        defaults = dict(
            model_id="fault/model",
            base_url=base_url,
            api_key_env=KEY_ENV,
            max_concurrency=16,
            timeout_s=1.5,
            max_retries=8,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
            seed=3,
        )
        return OpenAIBackend(**{**defaults, **options})

    return make


def requests_for(prompts: list[str]) -> list[ChatRequest]:
    return [
        ChatRequest((("system", "Extract."), ("user", p)), max_tokens=32, request_id=str(i))
        for i, p in enumerate(prompts)
    ]


def test_thirty_percent_faults_of_every_kind_lose_and_change_nothing(tmp_path, make_backend):
    with FaultServer(fault_rate=0.0) as clean:
        expected = [r.text for r in make_backend(clean.base_url).generate(requests_for(PROMPTS))]
    assert expected == [json.dumps(quoted_words(p)) for p in PROMPTS]

    cache = ResponseCache(tmp_path / "cache")
    # hang_s > timeout_s: a hung attempt never answers late (which would count as a duplicate).
    with FaultServer(fault_rate=0.3, seed=11, hang_s=2.5) as server:
        results = CachedBackend(make_backend(server.base_url), cache).generate(requests_for(PROMPTS))
        faults, answers, requests = dict(server.faults), dict(server.answers), dict(server.requests)

    assert set(faults) == set(FAULT_KINDS), faults  # every kind was really exercised
    assert sum(faults.values()) >= 0.2 * sum(requests.values())
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]  # 100% answered
    assert [r.text for r in results] == expected  # identical to the fault-free run
    assert all(r.finish_reason == "stop" for r in results)
    assert answers == {p: 1 for p in PROMPTS}  # no answered prompt was requested again
    assert sum(requests.values()) == len(PROMPTS) + sum(faults.values())
    stored = [json.loads(path.read_text()) for path in (tmp_path / "cache").glob("??/*.json")]
    assert sorted(entry["text"] for entry in stored) == sorted(expected)  # none cached as empty
    assert all(entry["text"] not in ("", "[]") for entry in stored)


@pytest.mark.parametrize(
    "kind, cause",
    [
        ("null_content", "null content"),
        ("missing_message", "choice without message"),
        ("html", "not valid JSON (text/html"),
        ("truncated_json", "not valid JSON"),
        ("error_object", "upstream provider error"),
        ("empty_choices", "response without choices"),
        ("500", "HTTP 500"),
        ("reset", "APIConnectionError"),
    ],
)
def test_an_instance_that_keeps_failing_ends_failed_naming_the_cause(tmp_path, make_backend, kind, cause):
    cache = ResponseCache(tmp_path)
    with FaultServer() as server:
        server.doom('"doomed"', kind)
        prompts = ['find "doomed"', 'find "fine"', 'find "also"']
        results = CachedBackend(make_backend(server.base_url, max_retries=3), cache).generate(requests_for(prompts))
        assert server.requests['find "doomed"'] == 4
    assert [r.ok for r in results] == [False, True, True]
    assert results[0].text is None
    assert results[0].error.startswith("gave up after 4 attempts") and cause in results[0].error, results[0].error
    assert len(cache) == 2  # the failure is not cached


def test_hang_past_the_timeout_is_retried_and_reported(make_backend):
    with FaultServer(hang_s=1.0) as server:
        server.doom('"stuck"', "hang")
        (result,) = make_backend(server.base_url, timeout_s=0.2, max_retries=1).generate(requests_for(['"stuck"']))
    assert result.text is None and "timeout" in result.error and "gave up after 2 attempts" in result.error


def test_rejected_key_gives_the_authentication_message_and_never_the_key(make_backend, caplog):
    caplog.set_level(logging.DEBUG)
    with FaultServer(reject_auth=True) as server:
        results = make_backend(server.base_url).generate(requests_for(PROMPTS[:10]))
        sent = sum(server.requests.values())
    assert all(r.text is None for r in results)
    assert {r.error for r in results} == {f"authentication failed: check {KEY_ENV} (HTTP 401 from {server.base_url})"}
    assert sent <= 16  # no retries; only requests already in flight when the first 401 came back
    for text in [caplog.text] + [r.error for r in results]:
        assert KEY[-4:] not in text and KEY not in text
