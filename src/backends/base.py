"""Types shared by every generation backend: results and the Backend contract.

Results carry enough (usage, latency, error) for the run to report cost and failures without
knowing which backend produced them (the requests they answer are :mod:`src.core.requests`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from src.billing.bill import Bill
from src.core.requests import ChatRequest


@dataclass
class GenerationResult:
    """The outcome of one request.

    Attributes:
        request: the request this answers.
        text: the generated text; None when the request failed after its retries.
        error: why it failed (never contains secrets); None on success.
        usage: ``prompt_tokens``, ``completion_tokens`` and ``cost`` when the provider reports it.
        latency_s: wall time of the successful attempt (or batch, for local backends).
        cached: True when the answer came from the response cache, not the model.
        finish_reason: why generation stopped (``stop``, ``length`` when the token budget
            cut the answer), as the backend reports it; None when unknown.
        served: what the provider said answered (``model``, ``system_fingerprint``,
            ``provider``; :mod:`src.backends.served`); empty for local backends.
        attempts: requests sent to the model for this answer, retries included (billed
            attempts: the run's usage counts them); 0 for a cached answer.
        refusal: the model's refusal (``message.refusal``): its answer, with ``text`` empty.
        bill: what the attempts of this request cost (:class:`~src.billing.bill.Bill`), every
            billed attempt counted; None where the backend has no bill (a local model, the cache).
    """

    request: ChatRequest
    text: str | None
    error: str | None = None
    usage: dict = field(default_factory=dict)
    latency_s: float = 0.0
    cached: bool = False
    finish_reason: str | None = None
    served: dict = field(default_factory=dict)
    attempts: int = 1
    refusal: str | None = None
    bill: Bill | None = None

    @property
    def ok(self) -> bool:
        """True when the request produced text."""
        return self.text is not None and self.error is None

    @property
    def empty(self) -> bool:
        """True for an answer that is empty or only whitespace (the model's own, after retries);
        a refusal is not empty, it is a refusal."""
        return self.ok and not self.text.strip() and self.refusal is None


ResultCallback = Callable[[int, GenerationResult], None]
"""Called as ``on_result(index, result)`` as soon as the request at ``index`` is done."""


class OrderedResults:
    """Results kept in request order; ``on_result`` fires the moment each one is set, so the
    response cache can persist finished work before the whole call returns."""

    def __init__(self, size: int, on_result: ResultCallback | None = None) -> None:
        self._results: list[GenerationResult | None] = [None] * size
        self._on_result = on_result

    def finish(self, index: int, result: GenerationResult) -> None:
        self._results[index] = result
        if self._on_result is not None:
            self._on_result(index, result)

    def as_list(self) -> list[GenerationResult]:
        missing = [index for index, result in enumerate(self._results) if result is None]
        if missing:
            raise RuntimeError(f"backend returned no result for request positions {missing[:10]}")
        return self._results  # type: ignore[return-value]


def encode_within_context(
    requests: Sequence[ChatRequest],
    encode: Callable[[ChatRequest], list[int]],
    context_length: int | None,
    context_name: str,
    results: OrderedResults,
) -> dict[int, list[int]]:
    """Prompt tokens of every request that fits the context (prompt + ``max_tokens``).

    A request whose prompt cannot be rendered (a template that rejects the conversation) or
    does not fit fails alone, with a result that says why; the others go on.
    """
    encoded: dict[int, list[int]] = {}
    for index, request in enumerate(requests):
        try:
            tokens = encode(request)
        except Exception as exc:
            results.finish(index, GenerationResult(request, None, error=f"prompt: {type(exc).__name__}: {exc}"))
            continue
        if context_length and len(tokens) + request.max_tokens > context_length:
            error = (
                f"prompt of {len(tokens)} tokens + max_tokens {request.max_tokens} exceeds the "
                f"context length {context_length} of {context_name}"
            )
            results.finish(index, GenerationResult(request, None, error=error))
        else:
            encoded[index] = tokens
    return encoded


class Backend:
    """A text generator: local model or remote endpoint, and everything a caller may ask of one.

    ``generate`` returns results in the order of ``requests`` and never raises for a single
    failed request (that result has ``text=None`` and ``error`` set). When ``on_result`` is
    given, it is called for each request as soon as its result exists, so the response cache
    can persist finished work before the whole call returns (resume after a crash).

    The class attributes are the capabilities of a backend that has none of them (a local model):
    a backend that has one overrides it, and a wrapper (:class:`~src.backends.cache.CachedBackend`)
    forwards every one, so no caller looks inside a wrapper or probes for an attribute.
    """

    name: str
    model_id: str
    #: how attempts go out: ``sync``, ``flex`` or ``batch`` (the Batch API)
    mode: str = "sync"
    #: requests in flight at most (None: the backend does not send concurrently over HTTP)
    max_concurrency: int | None = None
    #: the slowest generation the plan assumes, tokens per second (None: not stated)
    min_tokens_per_s: float | None = None
    #: the provider pin (OpenRouter ``provider`` routing), None when unpinned
    routing: dict | None = None
    #: the structured-output form the answers came in (``schema_format: auto``), None when none was sent
    schema_form_used: str | None = None
    #: where a batch-sending backend keeps the ids of its batches in flight (None: its default)
    batch_dir: Path | None = None
    #: how adaptive concurrency moved during the last call (:class:`~src.backends.concurrency.ConcurrencyStats`)
    concurrency_stats: Any = None

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        raise NotImplementedError

    def cache_identity(self) -> dict:
        """Everything besides the request and the model id that determines the answer (for the
        cache key): every real backend names its weights or endpoint; nothing by default."""
        return {}

    def attach_meter(self, meter: Any) -> None:
        """Admit and price every attempt with ``meter`` (:class:`~src.billing.meter.Meter`): the
        run's, which knows the price and the cap. A backend that sends nothing billable ignores it."""

    @property
    def sender(self) -> Backend:
        """The backend that sends the requests: itself, or the one a wrapper wraps (its batch
        state and request bodies are that backend's)."""
        return self


class LocalBackend(Backend):
    """The ``generate`` of in-process backends: load on first use, encode every request (those
    that cannot be rendered or do not fit fail alone), then let the subclass generate the rest.

    Subclasses define ``load()``, ``encode(request)``, ``context_length()`` (None: unbounded),
    ``context_name`` (for the error message) and ``_generate_encoded``.
    """

    context_name = "the backend"

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """Results in request order (see :class:`Backend`); nothing is loaded for no requests."""
        if not (requests := list(requests)):
            return []
        self.load()
        results = OrderedResults(len(requests), on_result)
        encoded = encode_within_context(requests, self.encode, self.context_length(), self.context_name, results)
        bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)
        bar.update(len(requests) - len(encoded))
        try:
            if encoded:
                self._generate_encoded(requests, encoded, results, bar)
        finally:
            bar.close()
        return results.as_list()

    def load(self) -> None:
        raise NotImplementedError

    def encode(self, request: ChatRequest) -> list[int]:
        raise NotImplementedError

    def context_length(self) -> int | None:
        raise NotImplementedError

    def _generate_encoded(
        self, requests: list[ChatRequest], encoded: dict[int, list[int]], results: OrderedResults, bar: tqdm
    ) -> None:
        """Generate ``requests[i]`` from ``encoded[i]`` for every key, calling ``results.finish``
        and ``bar.update`` as each is done."""
        raise NotImplementedError
