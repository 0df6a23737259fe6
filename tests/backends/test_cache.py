"""Response cache: keys, hits and misses, concurrent writers, and resume after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from src.backends.base import Backend, GenerationResult
from src.backends.cache import CachedBackend, ResponseCache, cache_key, cache_key_fields, entry_checksum
from src.backends.openai_backend import OpenAIBackend
from src.core.requests import ChatRequest
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.paths import REPO_ROOT


class CountingBackend(Backend):
    """A deterministic in-memory backend that records what it was asked."""

    name = "counting"

    def __init__(self, model_id: str = "m", fail_on: str | None = None):
        self.model_id = model_id
        self.fail_on = fail_on
        self.sent: list[ChatRequest] = []

    def cache_identity(self) -> dict:
        return {"variant": 1}

    def generate(self, requests, progress=None, on_result=None):
        results = []
        for index, request in enumerate(requests):
            self.sent.append(request)
            content = request.messages[-1][1]
            if self.fail_on and self.fail_on in content:
                result = GenerationResult(request, None, error="boom")
            else:
                result = GenerationResult(
                    request, f"answer to {content}", usage={"completion_tokens": 3}, latency_s=0.5, finish_reason="stop"
                )
            if on_result is not None:
                on_result(index, result)
            results.append(result)
        return results


def request(text: str, **fields) -> ChatRequest:
    return ChatRequest((("user", text),), request_id=f"id-{text}", **fields)


def key_of(req: ChatRequest, backend_name="b", model_id="m", identity=None) -> str:
    return cache_key(cache_key_fields(backend_name, model_id, identity or {}, req))


def test_key_covers_what_determines_the_answer_and_not_the_request_id():
    base = request("hello")
    assert key_of(base) == key_of(replace(base, request_id="another id"))
    assert key_of(base) == key_of(replace(base, temperature=0))  # int and float zero agree
    variants = [
        key_of(replace(base, messages=(("user", "hello!"),))),
        key_of(replace(base, messages=(("system", "hello"),))),
        key_of(replace(base, max_tokens=100)),
        key_of(replace(base, seed=1)),
        key_of(replace(base, temperature=0.7)),
        key_of(base, backend_name="other"),
        key_of(base, model_id="m2"),
        key_of(base, identity={"gguf_file": "x.gguf"}),
    ]
    assert len({key_of(base), *variants}) == len(variants) + 1


def test_hits_are_marked_and_only_misses_are_sent(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, ResponseCache(tmp_path))
    first = cached.generate([request("a"), request("b")])
    assert [r.cached for r in first] == [False, False]
    inner.sent.clear()
    second = cached.generate([request("b"), request("c"), request("a")])
    assert [r.messages[0][1] for r in inner.sent] == ["c"]
    assert [r.cached for r in second] == [True, False, True]
    assert [r.text for r in second] == ["answer to b", "answer to c", "answer to a"]
    assert second[0].usage == {"completion_tokens": 3} and second[0].latency_s == 0.5
    assert second[2].request.request_id == "id-a"  # the caller's request, not the stored one


def test_rerun_of_a_finished_call_sends_nothing(tmp_path):
    inner = CountingBackend()
    requests = [request(str(i)) for i in range(10)]
    CachedBackend(inner, ResponseCache(tmp_path)).generate(requests)
    inner.sent.clear()
    results = CachedBackend(inner, ResponseCache(tmp_path)).generate(requests)
    assert inner.sent == [] and all(r.cached for r in results)


def test_sampled_requests_are_never_cached(tmp_path):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    cached.generate([request("hot", temperature=0.8)])
    cached.generate([request("hot", temperature=0.8)])
    assert len(inner.sent) == 2 and len(cache) == 0


def test_failures_are_not_cached(tmp_path):
    inner = CountingBackend(fail_on="bad")
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    results = cached.generate([request("bad"), request("good")])
    assert results[0].text is None and results[0].error == "boom"
    assert len(cache) == 1
    inner.sent.clear()
    cached.generate([request("bad"), request("good")])
    assert [r.messages[0][1] for r in inner.sent] == ["bad"]


def test_duplicates_in_one_call_are_sent_once(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, ResponseCache(tmp_path))
    results = cached.generate([request("same"), replace(request("same"), request_id="twin")])
    assert len(inner.sent) == 1
    assert [r.request.request_id for r in results] == ["id-same", "twin"]
    assert results[0].text == results[1].text == "answer to same"


def test_corrupt_or_foreign_entries_are_misses(tmp_path):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    req = request("x")
    key = cache_key(cached.key_fields(req))
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_text('{"text": "trunc')
    assert cached.generate([req])[0].cached is False
    assert json.loads(cache.path(key).read_text())["text"] == "answer to x"  # repaired
    cache.path(key).write_text(json.dumps({"fields": {"other": 1}, "text": "stale"}))
    assert cached.generate([req])[0].text == "answer to x"


def test_old_entry_with_null_text_is_a_miss_and_is_requested_again(tmp_path):
    """Older versions cached a provider's null content; such an entry must not score as ''."""
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    req = request("nulled")
    fields = cached.key_fields(req)
    key = cache_key(fields)
    cache.path(key).parent.mkdir(parents=True)
    old_entry = {"fields": fields, "text": None, "usage": {}, "latency_s": 0.1, "created": 0}
    cache.path(key).write_text(json.dumps(old_entry))
    assert cache.get(key, fields) is None
    (result,) = cached.generate([req])
    assert result.text == "answer to nulled" and not result.cached
    assert [r.messages[0][1] for r in inner.sent] == ["nulled"]
    assert cache.get(key, fields)["text"] == "answer to nulled"  # replaced by the real answer


def test_finish_reason_is_stored_and_restored_and_none_for_old_entries(tmp_path):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    cached.generate([request("a")])
    (hit,) = cached.generate([request("a")])
    assert hit.cached and hit.finish_reason == "stop"
    req = request("old")
    fields = cached.key_fields(req)
    cache.path(cache_key(fields)).parent.mkdir(parents=True, exist_ok=True)
    cache.path(cache_key(fields)).write_text(json.dumps({"fields": fields, "text": "x", "usage": {}, "latency_s": 0}))
    (old,) = cached.generate([req])
    assert old.cached and old.text == "x" and old.finish_reason is None


def test_only_string_answers_are_ever_written(tmp_path):
    cache = ResponseCache(tmp_path)
    with pytest.raises(TypeError):
        cache.put("ab" * 32, {}, None, {}, 0.0)  # type: ignore[arg-type]
    assert len(cache) == 0


def test_a_different_backend_option_misses(tmp_path):
    cache = ResponseCache(tmp_path)
    first = CountingBackend()
    CachedBackend(first, cache).generate([request("x")])
    other = CountingBackend()
    other.cache_identity = lambda: {"variant": 2}
    CachedBackend(other, cache).generate([request("x")])
    assert len(other.sent) == 1 and len(cache) == 2


WRITER_SCRIPT = """
import sys
from src.backends.cache import ResponseCache, cache_key
directory, worker, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cache = ResponseCache(directory)
for round_number in range(rounds):
    for shared in range(10):  # every worker writes the same keys with the same answer
        fields = {"shared": shared}
        cache.put(cache_key(fields), fields, f"shared answer {shared}", {"n": shared}, 0.1)
    fields = {"worker": worker, "round": round_number}  # and keys of its own
    cache.put(cache_key(fields), fields, f"own {worker}/{round_number}", {}, 0.1)
"""


def test_concurrent_writers_leave_a_consistent_cache(tmp_path):
    workers, rounds = 4, 25
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(tmp_path), str(w), str(rounds)], cwd=REPO_ROOT)
        for w in range(workers)
    ]
    assert [process.wait(timeout=60) for process in processes] == [0] * workers
    cache = ResponseCache(tmp_path)
    assert len(cache) == 10 + workers * rounds
    assert list(tmp_path.rglob("*.tmp")) == []
    for shared in range(10):
        fields = {"shared": shared}
        assert cache.get(cache_key(fields), fields)["text"] == f"shared answer {shared}"
    for worker in range(workers):
        for round_number in range(rounds):
            fields = {"worker": worker, "round": round_number}
            assert cache.get(cache_key(fields), fields)["text"] == f"own {worker}/{round_number}"


def test_interrupted_http_run_resumes_with_only_missing_requests(tmp_path, monkeypatch):
    """Kill a run mid-way with SIGKILL; the re-run sends exactly the requests not yet stored."""
    total = 24
    with FakeOpenAIServer(latency_s=0.15) as server:
        script = f"""
import sys
from src.core.requests import ChatRequest
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import OpenAIBackend
backend = OpenAIBackend(model_id="m", base_url="{server.base_url}", max_concurrency=2, api_key_env=None)
requests = [ChatRequest((("user", f"item {{i}}"),), request_id=str(i)) for i in range({total})]
CachedBackend(backend, ResponseCache(sys.argv[1])).generate(requests)
"""
        child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT)
        cache = ResponseCache(tmp_path)
        deadline = time.monotonic() + 60
        while len(cache) < 6 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        stored = len(cache)
        assert 6 <= stored < total
        first_run_requests = server.request_count
        monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
        backend = OpenAIBackend(model_id="m", base_url=server.base_url, max_concurrency=8, api_key_env=None)
        requests = [ChatRequest((("user", f"item {i}"),), request_id=str(i)) for i in range(total)]
        results = CachedBackend(backend, ResponseCache(tmp_path)).generate(requests)
        assert server.request_count - first_run_requests == total - stored
        assert sum(r.cached for r in results) == stored
        assert [r.text for r in results] == [json.dumps([f"item {i}"]) for i in range(total)]
        assert len(cache) == total


@pytest.mark.parametrize("raise_after", [1, 5])
def test_results_are_stored_as_they_complete(tmp_path, raise_after):
    """A failure while the call is still running keeps what had finished before it."""
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    calls = []

    def crash(index, result):
        calls.append(index)
        if len(calls) == raise_after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        CachedBackend(inner, cache).generate([request(str(i)) for i in range(8)], on_result=crash)
    assert len(cache) == raise_after


def test_the_cache_key_of_an_existing_entry_never_changes():
    """Pinned: entries already on disk (the committed pipeline's cache) must keep hitting."""
    chat = ChatRequest((("system", "Extract."), ("user", "He left on Friday .")), max_tokens=64, request_id="x")
    identity = {"base_url": "https://openrouter.ai/api/v1", "extra_body": {}}
    assert cache_key(cache_key_fields("openai", "qwen/qwen-2.5-7b-instruct", identity, chat)) == PINNED_OPENAI_KEY
    local = replace(chat, response_schema='{"type":"array"}', completion=False, stop_at_repeat="$")
    assert cache_key(cache_key_fields("llamacpp", "m", {"gguf_file": "m.gguf"}, local)) == PINNED_LOCAL_KEY


PINNED_OPENAI_KEY = "a637ffcc559175f0eda14974613c6e91cae15c811025a294f9be719389b141a9"
PINNED_LOCAL_KEY = "fccd0eb65684a13d7fc3ec8e5e346dfe0d339fed37719259257db98d80f28c7e"


def _stored(cache: ResponseCache, key: str) -> dict:
    return json.loads(cache.path(key).read_text())


def test_every_entry_carries_a_checksum_and_an_edited_entry_is_a_miss(tmp_path, caplog):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    req = request("x")
    key = cache_key(cached.key_fields(req))
    cached.generate([req])
    entry = _stored(cache, key)
    assert entry["checksum"] == entry_checksum(entry) and len(entry["checksum"]) == 64
    entry["text"] = "a better answer"  # edited by hand; the checksum no longer matches
    cache.path(key).write_text(json.dumps(entry))
    assert cache.get(key) is None
    assert f"ignoring cache entry {cache.path(key)}: its checksum does not match" in caplog.text
    (again,) = cached.generate([req])
    assert not again.cached and again.text == "answer to x" and len(inner.sent) == 2
    assert _stored(cache, key)["text"] == "answer to x"


@pytest.mark.parametrize(
    "field, value",
    [("usage", "garbage"), ("usage", {"cost": "free"}), ("latency_s", "slow"), ("finish_reason", 3), ("served", [])],
)
def test_a_wrong_typed_entry_is_a_miss_with_one_warning_naming_the_file(tmp_path, caplog, field, value):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    req = request("x")
    fields = cached.key_fields(req)
    key = cache_key(fields)
    cache.path(key).parent.mkdir(parents=True)
    legacy = {"fields": fields, "text": "old", "usage": {}, "latency_s": 0.1, field: value}  # no checksum
    cache.path(key).write_text(json.dumps(legacy))
    assert cache.get(key, fields) is None and cache.get(key, fields) is None
    assert caplog.text.count(str(cache.path(key))) == 1
    assert f"field {field!r} has the wrong type" in caplog.text
    (result,) = cached.generate([req])
    assert result.text == "answer to x" and not result.cached


def test_an_entry_written_before_checksums_still_hits(tmp_path):
    inner = CountingBackend()
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(inner, cache)
    req = request("x")
    fields = cached.key_fields(req)
    cache.path(cache_key(fields)).parent.mkdir(parents=True)
    legacy = {"fields": fields, "text": "old", "usage": {"completion_tokens": 1}, "latency_s": 0.1, "created": 1.0}
    cache.path(cache_key(fields)).write_text(json.dumps(legacy, sort_keys=True))
    (hit,) = cached.generate([req])
    assert hit.cached and hit.text == "old" and hit.served == {} and inner.sent == []


class ScriptedBackend(CountingBackend):
    """Answers each request with the (text, finish_reason, served) its content names."""

    def __init__(self, script: dict):
        super().__init__()
        self.script = script

    def generate(self, requests, progress=None, on_result=None):
        results = []
        for index, req in enumerate(requests):
            self.sent.append(req)
            text, finish_reason, served = self.script[req.messages[-1][1]]
            result = GenerationResult(req, text, finish_reason=finish_reason, served=served)
            if on_result is not None:
                on_result(index, result)
            results.append(result)
        return results


def test_only_answers_are_cached_with_what_served_them(tmp_path):
    script = {
        "ok": ("[1]", "stop", {"model": "m", "provider": "P"}),
        "empty": ("", "stop", {}),
        "cut": ("", "length", {}),
        "blank-unknown": ("  ", None, {}),
        "errored": ("[2]", "error", {}),
        "filtered": ("[]", "content_filter", {}),
    }
    cache = ResponseCache(tmp_path)
    cached = CachedBackend(ScriptedBackend(script), cache)
    cached.generate([request(name) for name in script])
    stored = {
        entry["fields"]["messages"][0][1]: entry
        for entry in map(json.loads, map(Path.read_text, tmp_path.glob("??/*.json")))
    }
    assert sorted(stored) == ["cut", "empty", "ok"]
    assert stored["ok"]["served"] == {"model": "m", "provider": "P"}
    (hit,) = cached.generate([request("ok")])
    assert hit.cached and hit.served == {"model": "m", "provider": "P"}
    with pytest.raises(ValueError, match="no answer"):
        cache.put("ab" * 32, {}, "x", {}, 0.0, "error")
