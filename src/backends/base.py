"""Types shared by every generation backend: requests, results and the Backend protocol.

Requests are frozen and hashable so that callers can deduplicate them and the response cache
can key on them; results carry enough (usage, latency, error) for the run to report cost and
failures without knowing which backend produced them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tqdm.auto import tqdm

from src.backends.repeats import path_key
from src.billing.bill import Bill

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to generate.

    Attributes:
        messages: ``((role, content), ...)``; a tuple so the request is hashable.
        max_tokens: upper bound on generated tokens.
        temperature: 0 means greedy / deterministic (the only cacheable setting).
        seed: sent to providers that accept one; seeds sampling in local backends.
        request_id: the caller's label (e.g. the instance id); not part of the cache key.
        response_schema: canonical JSON text of a JSON schema the answer must follow (a
            string so the request stays hashable); backends that can constrain decoding
            (llama.cpp grammar, ``response_format: json_schema``) do, others ignore it.
            Part of the cache key.
        completion: True when ``messages`` is one user message to be continued as plain
            text (no chat template): the completion-style prompt form for small models.
            Part of the cache key.
        stop_at_repeat: the path of the answer's final list (``$`` or ``$.key``): the answer
            ends at the first item that repeats an earlier one of that list, closed before it
            (:mod:`src.backends.repeats`; every backend honours it). Part of the cache key.
    """

    messages: tuple[tuple[str, str], ...]
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    request_id: str = ""
    response_schema: str | None = None
    completion: bool = False
    stop_at_repeat: str | None = None

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError(f"ChatRequest {self.request_id!r}: messages must not be empty")
        for position, message in enumerate(self.messages):
            if len(message) != 2 or not all(isinstance(part, str) for part in message):
                raise ValueError(
                    f"ChatRequest {self.request_id!r}: message {position} must be a (role, content) "
                    f"pair of strings, got {message!r}"
                )
            if message[0] not in ROLES:
                raise ValueError(
                    f"ChatRequest {self.request_id!r}: message {position} has role {message[0]!r}, "
                    f"expected one of {ROLES}"
                )
        if self.max_tokens < 1:
            raise ValueError(f"ChatRequest {self.request_id!r}: max_tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"ChatRequest {self.request_id!r}: temperature must be >= 0")
        if self.completion and (len(self.messages) != 1 or self.messages[0][0] != "user"):
            raise ValueError(f"ChatRequest {self.request_id!r}: a completion request is one user message")
        if self.stop_at_repeat is not None:
            try:
                path_key(self.stop_at_repeat)
            except ValueError as error:
                raise ValueError(f"ChatRequest {self.request_id!r}: {error}") from None

    @property
    def deterministic(self) -> bool:
        """True for greedy decoding, whose answer can be reused from the cache."""
        return self.temperature == 0

    def message_dicts(self) -> list[dict[str, str]]:
        """The messages in the ``[{"role", "content"}]`` form chat APIs and templates expect."""
        return [{"role": role, "content": content} for role, content in self.messages]


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


@runtime_checkable
class Backend(Protocol):
    """A text generator: local model or remote endpoint.

    ``generate`` returns results in the order of ``requests`` and never raises for a single
    failed request (that result has ``text=None`` and ``error`` set). When ``on_result`` is
    given, it is called for each request as soon as its result exists, so the response cache
    can persist finished work before the whole call returns (resume after a crash).
    """

    name: str
    model_id: str

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]: ...

    def cache_identity(self) -> dict:
        """Everything besides the request that determines the answer (for the cache key)."""
        ...


class LocalBackend:
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
