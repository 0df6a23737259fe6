"""The generate scaffolding every local backend shares and the contract every backend keeps
(src/backends/base.py)."""

from __future__ import annotations

import re

import pytest

from src.backends.base import Backend, GenerationResult, LocalBackend, OrderedResults
from src.backends.batch_state import open_batches
from src.backends.cache import CachedBackend, ResponseCache
from src.backends.openai_backend import OpenAIBackend
from src.billing.forecast import forecast_configuration
from src.billing.meter import Meter
from src.billing.prices import TokenCounter
from src.core.requests import ChatRequest
from tests.helpers.paths import REPO_ROOT


class WordBackend(LocalBackend):
    """Tokens are words; a prompt containing "reject" cannot be rendered; answers echo the length."""

    name = "words"
    model_id = "words"
    context_name = "the word backend"

    def __init__(self, context: int | None, skip: set[int] = frozenset()) -> None:
        self.context = context
        self.skip = skip
        self.loads = 0

    def load(self) -> None:
        self.loads += 1

    def encode(self, request: ChatRequest) -> list[int]:
        text = request.messages[-1][1]
        if "reject" in text:
            raise ValueError("template refuses")
        return list(range(len(text.split())))

    def context_length(self) -> int | None:
        return self.context

    def _generate_encoded(self, requests, encoded, results, bar) -> None:
        for index in sorted(encoded, reverse=True):  # out of order, like prefix-sorted backends
            if index not in self.skip:
                results.finish(index, GenerationResult(requests[index], str(len(encoded[index]))))
            bar.update(1)


def request(text: str, max_tokens: int = 2) -> ChatRequest:
    return ChatRequest(messages=(("user", text),), max_tokens=max_tokens, request_id=text)


def test_results_come_back_in_request_order_and_each_is_streamed_once():
    seen: list[int] = []
    backend = WordBackend(context=None)
    results = backend.generate([request("a"), request("a b"), request("a b c")], on_result=lambda i, r: seen.append(i))
    assert [r.text for r in results] == ["1", "2", "3"]
    assert sorted(seen) == [0, 1, 2] and seen == [2, 1, 0]


def test_a_prompt_that_fails_or_does_not_fit_fails_alone_with_the_reason():
    backend = WordBackend(context=5)
    results = backend.generate([request("one two"), request("please reject"), request("a b c d", max_tokens=2)])
    assert results[0].text == "2" and results[0].ok
    assert results[1].text is None and results[1].error == "prompt: ValueError: template refuses"
    assert results[2].text is None
    assert results[2].error == "prompt of 4 tokens + max_tokens 2 exceeds the context length 5 of the word backend"


def test_no_requests_loads_nothing():
    backend = WordBackend(context=None)
    assert backend.generate([]) == []
    assert backend.loads == 0


def test_a_backend_that_drops_a_result_fails_loudly_instead_of_returning_none():
    backend = WordBackend(context=None, skip={1})
    with pytest.raises(RuntimeError, match=r"no result for request positions \[1\]"):
        backend.generate([request("a"), request("a b")])


def test_ordered_results_fire_the_callback_on_finish():
    calls: list[tuple[int, str | None]] = []
    results = OrderedResults(2, lambda i, r: calls.append((i, r.text)))
    results.finish(1, GenerationResult(request("x"), "late"))
    results.finish(0, GenerationResult(request("y"), "early"))
    assert calls == [(1, "late"), (0, "early")]
    assert [r.text for r in results.as_list()] == ["early", "late"]


class EchoBackend(Backend):
    """A backend that declares only what it must: its name, model and ``generate``."""

    name = "echo"
    model_id = "echo-1"

    def generate(self, requests, progress=None, on_result=None):
        results = OrderedResults(len(requests), on_result)
        for index, request in enumerate(requests):
            results.finish(index, GenerationResult(request, request.messages[-1][1].upper()))
        return results.as_list()


def test_a_backend_that_declares_only_generate_serves_every_caller_through_the_cache(tmp_path):
    """The contract's defaults: the cache forwards every capability, and the plan, the batch state
    and the meter work with a backend that has none of them (docs/extending.md: one module)."""
    echo = EchoBackend()
    cached = CachedBackend(echo, ResponseCache(tmp_path / "cache"))
    assert (cached.mode, cached.max_concurrency, cached.min_tokens_per_s, cached.routing) == ("sync", None, None, None)
    assert cached.schema_form_used is None and cached.concurrency_stats is None and cached.sender is echo
    cached.attach_meter(Meter())  # nothing billable: ignored
    request = ChatRequest((("user", "the gain"),), request_id="r1")
    assert open_batches(cached, [request]) == []
    plan = forecast_configuration("echo", cached, [("t/base", [request, request])], None, TokenCounter())
    assert (plan["requests"], plan["duplicates"], plan["to_send"]) == (2, 1, 1)
    assert [r.text for r in cached.generate([request])] == ["THE GAIN"]
    again = forecast_configuration("echo", cached, [("t/base", [request])], None, TokenCounter())
    assert (again["cached"], again["to_send"]) == (1, 0)


def test_the_cache_forwards_the_capabilities_of_the_backend_it_wraps(tmp_path):
    http = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", mode="batch", max_concurrency=3, api_key_env=None)
    cached = CachedBackend(http, ResponseCache(tmp_path / "cache"))
    assert (cached.mode, cached.max_concurrency, cached.sender) == ("batch", 3, http)
    meter = Meter()
    cached.attach_meter(meter)
    assert http.meter is meter


def test_no_caller_reaches_inside_a_backend_or_probes_it_for_a_capability():
    """Every capability is part of :class:`Backend`: no ``getattr(x, "backend", x)`` through the
    cache, no ``hasattr``/``getattr`` probe of one (they were copied across five modules)."""
    capabilities = (
        "backend|mode|max_concurrency|min_tokens_per_s|meter|routing|schema_form_used|concurrency_stats|batch_dir"
    )
    probe = re.compile(rf"""(getattr|hasattr)\([^,()]+,\s*["']({capabilities})["']""")
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in sorted((REPO_ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if probe.search(line)
    ]
    assert not found, "\n".join(found)
    assert probe.search('inner = getattr(backend, "backend", backend)')
