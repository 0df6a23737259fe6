"""The OpenAI backend through injected faults: nothing lost, nothing wrong, nothing asked twice.

Billed requests per instance: every run below states and bounds them. A drawn fault at rate p
costs on average p / (1 - p) extra requests per instance (0.43 at 30%); one instance costs at
most ``max_retries + 1`` requests per run, and at most ``NEVER_HEALS_RETRIES + 1`` (2) for a
fault that retrying cannot heal (an undecodable body).
"""

from __future__ import annotations

import json
import logging

import pytest

from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import NEVER_HEALS_RETRIES, OpenAIBackend
from src.core.requests import ChatRequest
from tests.helpers.openai_server import (
    LEGACY_KINDS,
    OTHER_MODEL,
    OpenAIServer,
    quoted_words,
    quoted_words_answer,
)

KEY_ENV = "TEMPGEN_FAULT_TEST_KEY"
KEY = "fault-test-key-0a1b2c3d4e"
PROMPTS = [f'Sentence {i}: find "w{i}a" and "w{i}b".' for i in range(120)]
EXPECTED = [json.dumps(quoted_words(p)) for p in PROMPTS]
MAX_RETRIES = 6
TIMEOUT_S = 1.5


@pytest.fixture
def make_backend(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)

    def make(base_url: str, **options) -> OpenAIBackend:
        defaults = dict(
            model_id="fault/model",
            base_url=base_url,
            api_key_env=KEY_ENV,
            max_concurrency=16,
            timeout_s=TIMEOUT_S,
            min_tokens_per_s=None,  # timeout_s alone: a hang is cut at TIMEOUT_S
            max_retries=MAX_RETRIES,
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


def server(**options) -> OpenAIServer:
    return OpenAIServer(answer=quoted_words_answer, **options)


def test_the_fault_free_run_answers_every_prompt_exactly(make_backend):
    with server() as clean:
        results = make_backend(clean.base_url).generate(requests_for(PROMPTS))
        assert sum(clean.requests.values()) == len(PROMPTS)
    assert [r.text for r in results] == EXPECTED


def test_thirty_percent_faults_of_every_kind_lose_and_change_nothing(tmp_path, make_backend):
    cache = ResponseCache(tmp_path / "cache")
    # hang_s > timeout_s: a hung attempt never answers late (which would count as a duplicate).
    with server(fault_rate=0.3, seed=11, hang_s=2.5, kinds=LEGACY_KINDS) as faulty:
        results = CachedBackend(make_backend(faulty.base_url, max_retries=8), cache).generate(requests_for(PROMPTS))
        faults, answers, requests = dict(faulty.served_faults), dict(faulty.answers), dict(faulty.requests)

    assert set(faults) == set(LEGACY_KINDS), faults  # every kind was really exercised
    assert sum(faults.values()) >= 0.2 * sum(requests.values())
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]  # 100% answered
    assert [r.text for r in results] == EXPECTED  # identical to the fault-free run
    assert all(r.finish_reason == "stop" for r in results)
    assert answers == {p: 1 for p in PROMPTS}  # no answered prompt was requested again
    assert sum(requests.values()) == len(PROMPTS) + sum(faults.values())
    stored = [json.loads(path.read_text()) for path in (tmp_path / "cache").glob("??/*.json")]
    assert sorted(entry["text"] for entry in stored) == sorted(EXPECTED)  # none cached as empty
    assert all(entry["text"] not in ("", "[]") for entry in stored)


# kind -> (backend options, can it fail within one run at 30% so that a rerun is needed)
NEW_KINDS = {
    "empty_stop": ({}, False),
    "empty_error": ({}, False),
    "parts": ({}, False),
    "mismatch_same": ({"on_model_mismatch": "fail"}, False),
    "mismatch_other": ({"on_model_mismatch": "fail"}, False),
    "length": ({}, False),
    "bad_gzip": ({}, True),
    "slow_drip": ({}, False),
    "slow_drip_over": ({}, False),
    "retry_after_date": ({}, False),
}


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
def test_thirty_percent_of_one_fault_scores_nothing_from_it_and_heals_within_one_rerun(
    tmp_path, make_backend, caplog, kind
):
    options, may_need_rerun = NEW_KINDS[kind]
    cache = ResponseCache(tmp_path / "cache")
    with server(fault_rate=0.3, seed=5, kinds=(kind,), hang_s=TIMEOUT_S + 1.0, drip_s=0.3) as faulty:
        backend = CachedBackend(make_backend(faulty.base_url, **options), cache)
        first = backend.generate(requests_for(PROMPTS))
        first_requests = dict(faulty.requests)
        failed = {PROMPTS[i] for i, r in enumerate(first) if not r.ok}
        assert faulty.served_faults[kind] >= 0.2 * len(PROMPTS)  # the fault was really served
        results = backend.generate(requests_for(PROMPTS))  # the rerun: only the failed requests go out
        rerun_sent = {p for p in PROMPTS if faulty.requests[p] > first_requests.get(p, 0)}
        billed = sum(faulty.requests.values())

    assert rerun_sent == failed
    if not may_need_rerun:
        assert failed == set(), [r.error for r in first if not r.ok][:3]
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert [r.text for r in results] == EXPECTED  # 0 instances scored from a fault: the fault-free answers
    assert all(r.finish_reason == "stop" for r in results)
    assert not any(r.served.get("model") == OTHER_MODEL for r in results)
    # Billed requests per instance: at most max_retries + 1 per run (2 for what never heals),
    # and about 1 / (1 - 0.3) = 1.43 on average.
    per_run_cap = NEVER_HEALS_RETRIES + 1 if kind == "bad_gzip" else MAX_RETRIES + 1
    assert max(first_requests.values()) <= per_run_cap
    assert billed / len(PROMPTS) <= 1.7, billed
    for entry in map(json.loads, map(lambda path: path.read_text(), (tmp_path / "cache").glob("??/*.json"))):
        assert entry["text"].strip() and entry["finish_reason"] == "stop"  # nothing from a fault was kept


def test_the_failures_of_an_undecodable_body_name_their_real_cause(make_backend):
    with server() as broken:
        broken.doom('"zip"', "bad_gzip")
        (result,) = make_backend(broken.base_url).generate(requests_for(['find "zip"']))
        assert broken.requests['find "zip"'] == NEVER_HEALS_RETRIES + 1
    assert result.error.startswith("gave up after 2 attempts: response body could not be decoded"), result.error
    assert result.error.endswith("retrying does not heal this") and "Connection error." not in result.error


def test_with_warn_a_mismatch_is_kept_recorded_and_counted_once(tmp_path, make_backend, caplog):
    caplog.set_level(logging.WARNING)
    with server(fault_rate=0.3, seed=5, kinds=("mismatch_other",)) as faulty:
        results = CachedBackend(make_backend(faulty.base_url), ResponseCache(tmp_path)).generate(requests_for(PROMPTS))
        served = faulty.served_faults["mismatch_other"]
    others = [r for r in results if r.served.get("model") == OTHER_MODEL]
    assert len(others) == served > 0 and all(r.text == "[]" for r in others)  # kept, and named
    warnings = [m for m in caplog.messages if "served by another model" in m]
    assert warnings == [
        f"{served} of {len(PROMPTS)} answers were served by another model than fault/model: {OTHER_MODEL} x{served}"
    ]


@pytest.mark.parametrize(
    "kind, cause",
    [
        ("null_content", "null content"),
        ("missing_message", "choice without message"),
        ("html", "not valid JSON (text/html"),
        ("truncated_json", "not valid JSON"),
        ("error_object", "upstream provider error"),
        ("empty_choices", "response without choices"),
        ("empty_error", "blank answer with finish_reason 'error'"),
        ("length", "finish_reason 'length' after 1 of max_tokens 32 tokens"),
        ("500", "HTTP 500"),
        ("reset", "APIConnectionError"),
    ],
)
def test_an_instance_that_keeps_failing_ends_failed_naming_the_cause(tmp_path, make_backend, kind, cause):
    cache = ResponseCache(tmp_path)
    with server() as faulty:
        faulty.doom('"doomed"', kind)
        prompts = ['find "doomed"', 'find "fine"', 'find "also"']
        # a generous timeout: with TIMEOUT_S a stall of the test process (seen once in a full suite)
        # let an attempt time out before this in-process server read it, so it counted 3 of 4
        backend = make_backend(faulty.base_url, max_retries=3, timeout_s=30)
        results = CachedBackend(backend, cache).generate(requests_for(prompts))
        assert faulty.requests['find "doomed"'] == 4
    assert [r.ok for r in results] == [False, True, True]
    assert results[0].text is None
    assert results[0].error.startswith("gave up after 4 attempts") and cause in results[0].error, results[0].error
    assert len(cache) == 2  # the failure is not cached


def test_an_answer_that_is_empty_every_time_with_stop_is_the_models_own(tmp_path, make_backend):
    with server() as faulty:
        faulty.doom('"nothing"', "empty_stop")
        (result,) = make_backend(faulty.base_url, max_retries=2).generate(requests_for(['find "nothing"']))
        assert faulty.requests['find "nothing"'] == 3
    assert result.ok and result.text == "" and result.empty and result.finish_reason == "stop"


def test_hang_past_the_timeout_is_retried_and_reported(make_backend):
    with server(hang_s=1.0) as faulty:
        faulty.doom('"stuck"', "hang")
        (result,) = make_backend(faulty.base_url, timeout_s=0.2, max_retries=1).generate(requests_for(['"stuck"']))
    assert result.text is None and "timeout" in result.error and "gave up after 2 attempts" in result.error


def test_rejected_key_gives_the_authentication_message_and_never_the_key(make_backend, caplog):
    caplog.set_level(logging.DEBUG)
    with server(reject_auth=True) as faulty:
        results = make_backend(faulty.base_url).generate(requests_for(PROMPTS[:10]))
        sent = sum(faulty.requests.values())
    assert all(r.text is None for r in results)
    assert {r.error for r in results} == {f"authentication failed: check {KEY_ENV} (HTTP 401 from {faulty.base_url})"}
    assert sent <= 16  # no retries; only requests already in flight when the first 401 came back
    for text in [caplog.text] + [r.error for r in results]:
        assert KEY[-4:] not in text and KEY not in text
