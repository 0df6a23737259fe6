"""The generate scaffolding every local backend shares (src/backends/base.py)."""

from __future__ import annotations

import pytest

from src.backends.base import ChatRequest, GenerationResult, LocalBackend, OrderedResults


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
