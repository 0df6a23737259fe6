"""Backend for any OpenAI-compatible chat endpoint: OpenRouter (default), vLLM, llama.cpp server.

Requests run concurrently on one event loop, bounded by a semaphore; the ``openai`` client's own
retries are disabled so that retrying follows :mod:`src.backends.retry` (backoff with full jitter,
``Retry-After`` honoured, and a rate limit pauses every request, not only the one that hit it).
The API key is read from an environment variable named in the config and never appears in a
message, log line, repr or result (nor any 4+ character piece of it, which servers like to echo;
:mod:`src.backends.openai_keys`).

What a reply means is :mod:`src.backends.openai_reply`'s: an answer (content, a refusal, a tool
call's arguments, an event stream joined) or a fault, retried like a 5xx. A reply that stays
blank through every retry is the model's own (empty) answer only when each of those replies said
``finish_reason: stop``; otherwise the request fails with that cause. What retrying cannot heal
(a body that does not decode, a structure of the wrong types, several choices) is retried once,
and the failure names it. ``finish_reason: length`` is the model's answer cut by its budget,
except when the provider reports fewer completion tokens than ``max_tokens``: then the provider
cut it short, and it is retried. 401/403 fail at once with a message naming the key variable,
and stop the other requests of the call. When ``stop_after_same_fault`` attempts in a row (over
more than one request) fail the same way, the call stops there with one line naming the fault,
instead of retrying every instance.

Every attempt is admitted and priced by the run's :class:`~src.billing.meter.Meter`: the cap
holds attempt by attempt, and every billed attempt (also one that was then retried) is counted;
each result carries its request's :class:`~src.billing.bill.Bill`.

Every answer carries what the provider said it served (:mod:`src.backends.served`); with
``on_model_mismatch: fail`` an answer from another model, or from a provider outside the pinned
``routing`` (:mod:`src.backends.routing`), is retried and then fails instead.

How many attempts are in flight adapts to the server (:mod:`src.backends.concurrency`: halved
on a timeout, 429 or 503, grown by one after a window of successes; ``concurrency_stats``),
one attempt per request at a time, each with a timeout long enough for the answers that may
be queued ahead of it (``min_tokens_per_s``). A server that refuses the structured-output form
(400/422/500 naming ``response_format``) is not retried as a server fault: ``schema_format:
auto`` falls back to the next form once for the whole backend and resends the request (not
counted as an attempt); any other ``schema_format`` fails with one message saying so.

``mode: batch`` sends the call through the Batch API instead (:mod:`src.backends.openai_batch`),
``mode: flex`` synchronously at OpenAI's flex service tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
from tenacity import AsyncRetrying, retry_if_result
from tqdm.auto import tqdm

from src.backends.base import Backend, GenerationResult, OrderedResults, ResultCallback
from src.backends.concurrency import (
    NEUTRAL,
    OVERLOAD,
    SUCCESS,
    AdaptiveLimit,
    ConcurrencyStats,
    attempt_timeout,
)
from src.backends.openai_attempts import NEVER_HEALS_RETRIES, LoopState, Tally
from src.backends.openai_batch import BatchCall
from src.backends.openai_body import FALLBACK, FIRST_FORM, FORMS, SCHEMA_FORMATS, request_body
from src.backends.openai_faults import AuthError, answer_of, auth_message, describe, status_fault
from src.backends.openai_keys import (
    KeyHostMismatchError,
    MissingAPIKeyError,
    host_within,
    key_for,
    scrubbed,
)
from src.backends.openai_reply import (
    FormatRefused,
    NeverHeals,
    Reply,
    RetryableError,
    decoding_error,
    parse_completion,
)
from src.backends.options import OpenAIOptions
from src.backends.retry import RetryPolicy
from src.backends.routing import checked_routing
from src.billing.bill import Bill, BilledReply
from src.billing.meter import Admission, Meter
from src.core.requests import ChatRequest
from src.redact import redact_uris

__all__ = ["KeyHostMismatchError", "MissingAPIKeyError", "NEVER_HEALS_RETRIES", "OpenAIBackend", "SCHEMA_FORMATS"]

logger = logging.getLogger(__name__)

CONNECTIONS_PER_CLIENT = 8
RESEND = object()  # an attempt to send again at once, not counted (a refused schema form under auto)


class OpenAIBackend(Backend):
    """Chat completions over HTTP with bounded concurrency and retries.

    ``OpenAIBackend(model_id, options, **overrides)``: ``model_id`` is the provider's model name
    (e.g. ``qwen/qwen3-235b-a22b-2507``); ``options`` an :class:`~src.backends.options.OpenAIOptions`
    (every option, documented there, with its default), ``overrides`` replace single options
    (``timeout_s=5``). What the options mean for a request: the module docstring; a bad value is
    a :class:`~src.core.errors.ConfigError` naming ``model.options.<key>``.
    """

    name = "openai"

    def __init__(self, model_id: str, options: OpenAIOptions | None = None, **overrides: Any) -> None:
        if not model_id:
            raise ValueError("openai backend: model_id is required")
        base = (options or OpenAIOptions()).as_dict()
        self.options = OpenAIOptions.from_mapping({**base, **overrides})
        o = self.options
        self.model_id = model_id
        self.base_url = o.base_url.rstrip("/")
        self.api_key_env = o.api_key_env
        self.max_concurrency = int(o.max_concurrency)
        self.timeout_s = float(o.timeout_s)
        self.min_tokens_per_s = None if o.min_tokens_per_s is None else float(o.min_tokens_per_s)
        self.concurrency_stats: ConcurrencyStats | None = None  # set by the first generate call
        self.retry = RetryPolicy(o.max_retries, o.backoff_base_s, o.backoff_max_s)
        self.extra_headers = dict(o.extra_headers)
        self.extra_body = dict(o.extra_body)
        host = (urlsplit(self.base_url).hostname or "").lower().rstrip(".")
        self.request_cost = host_within(host, "openrouter.ai") if o.request_cost is None else o.request_cost
        self.seed = o.seed
        self.schema_format = o.schema_format
        self.schema_form = FIRST_FORM.get(o.schema_format, o.schema_format)  # the form sent now
        self.schema_forms_answered: Counter[str] = Counter()  # form -> answers to requests with a schema
        self.format_refusals = 0  # requests resent in a fallback form (auto), not counted as attempts
        self._form_settled = False  # a request with a schema has been sent and answered in the current form
        self.on_model_mismatch = o.on_model_mismatch
        self.routing = checked_routing(o.routing, "model.options.routing")
        self.mode = o.mode
        self.stop_after_same_fault = o.stop_after_same_fault
        self.batch_poll_s = float(o.batch_poll_s)
        self.batch_completion_window = o.batch_completion_window
        self.batch_max_requests = int(o.batch_max_requests)
        self.batch_rounds = int(o.batch_rounds)
        self.batch_api = o.batch_api
        self.batch_dir: Path | None = None  # where batch ids are kept (the run sets it beside the cache)
        self.meter = Meter()  # the run replaces it with one that knows the price and the cap
        self.stop_reason: str | None = None  # why the last call stopped early (budget, a repeated fault, a key)
        self.__api_key = key_for(o.api_key_env, self.base_url, host, o.require_api_key)
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(model_id={self.model_id!r}, base_url={redact_uris(self.base_url)!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, mode={self.mode!r})"
        )

    def cache_identity(self) -> dict:
        """The endpoint, extra body fields and routing: the same model id elsewhere may answer differently."""
        # Without user-info: a credential in the URL does not change the answer, and the identity
        # is written into every cache entry (unchanged for every URL without one).
        identity: dict[str, Any] = {"base_url": redact_uris(self.base_url), "extra_body": self.extra_body}
        if self.schema_format not in ("json_schema", "strict"):  # so existing cache keys stay valid
            identity["schema_format"] = self.schema_format
        if self.routing:  # likewise: only pinned runs carry it
            identity["routing"] = self.routing
        return identity

    def attach_meter(self, meter: Meter) -> None:
        self.meter = meter

    @property
    def schema_form_used(self) -> str | None:
        """The ``response_format`` form of the answers this backend received to requests with a
        schema (``json_schema``, ``json_object``, ``none``; forms joined by ``+`` when a fallback
        came mid-call); None when it sent none (everything came from the cache)."""
        if not self.schema_forms_answered:
            return None
        return "+".join(form for form in FORMS if form in self.schema_forms_answered)

    def _redact(self, text: str) -> str:
        return scrubbed(text, self.__api_key)

    @property
    def sync_mode(self) -> str:
        """The price of a request sent one by one: flex in flex mode, else the list price (also
        for the requests a batch run answers synchronously)."""
        return "flex" if self.mode == "flex" else "sync"

    def body(self, request: ChatRequest, form: str | None = None) -> tuple[str, dict[str, Any]]:
        """(endpoint path, JSON body) of ``request`` as this backend sends it."""
        tier = "flex" if self.mode == "flex" else None
        return request_body(
            self.model_id,
            request,
            self.schema_form if form is None else form,
            self.extra_body,
            self.request_cost,
            self.routing,
            tier,
        )

    def attempt_timeout(self, max_tokens: int, bound: int) -> float:
        """Seconds one attempt may take (:func:`src.backends.concurrency.attempt_timeout`)."""
        if self.min_tokens_per_s is None:
            return self.timeout_s
        return attempt_timeout(self.timeout_s, max_tokens, self.min_tokens_per_s, bound)

    def _auth_message(self, status: int) -> str:
        return auth_message(self.api_key_env, self.base_url, status)

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """Send all requests (or batch them); blocks until every one succeeded or gave up."""
        requests = list(requests)
        if not requests:
            return []
        self.stop_reason = None
        if self.mode == "batch":
            coroutine_factory = lambda: BatchCall(self, requests, progress, on_result).run()  # noqa: E731
        else:
            coroutine_factory = lambda: self._generate_all(requests, progress, on_result)  # noqa: E731
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine_factory())
        # Called from inside an event loop (a notebook): run ours on a helper thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(lambda: asyncio.run(coroutine_factory())).result()

    async def _generate_all(
        self, requests: list[ChatRequest], progress: str | None, on_result: ResultCallback | None
    ) -> list[GenerationResult]:
        results = OrderedResults(len(requests), on_result)
        failures = 0
        bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)
        try:
            async with self.session() as state:
                tasks = [asyncio.ensure_future(self._indexed(i, request, state)) for i, request in enumerate(requests)]
                try:
                    for next_done in asyncio.as_completed(tasks):
                        index, result = await next_done
                        results.finish(index, result)
                        failures += result.text is None
                        bar.update(1)
                        if failures:
                            bar.set_postfix(failed=failures, refresh=False)
                finally:
                    for task in tasks:
                        task.cancel()
        finally:
            bar.close()
        return results.as_list()

    @contextlib.asynccontextmanager
    async def session(self):
        """The clients and shared state of one call (also the batch path's synchronous fallback)."""
        # Several small clients instead of one big one: httpcore's pool scans every connection
        # for every active request on each event, which costs more CPU than the requests
        # themselves at a few dozen connections; pools of CONNECTIONS_PER_CLIENT keep it cheap.
        sizes = [CONNECTIONS_PER_CLIENT] * (self.max_concurrency // CONNECTIONS_PER_CLIENT)
        if self.max_concurrency % CONNECTIONS_PER_CLIENT:
            sizes.append(self.max_concurrency % CONNECTIONS_PER_CLIENT)
        clients = [self.client(size) for size in sizes]
        limit = AdaptiveLimit(self.max_concurrency, self.concurrency_stats)  # goes on where the last call ended
        self.concurrency_stats = limit.stats
        state = LoopState(clients, sizes, random.Random(self.seed), limit, self.stop_after_same_fault)
        async with contextlib.AsyncExitStack() as stack:
            for client in clients:
                await stack.enter_async_context(client)
            try:
                yield state
            finally:
                self.stop_reason = self.stop_reason or state.stop_error

    def client(self, connections: int) -> openai.AsyncOpenAI:
        """A client holding the key (which never leaves this backend otherwise)."""
        if self._tls is None:  # building one costs ~50 ms: once per backend, not per client
            self._tls = httpx.create_ssl_context()
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return openai.AsyncOpenAI(
            api_key=self.__api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=None,  # each attempt's own limit (asyncio.timeout in _attempt) applies
            default_headers=self.extra_headers or None,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=None, verify=self._tls),
        )

    async def _indexed(self, index, request, state) -> tuple[int, GenerationResult]:
        return index, await self.generate_one(request, state)

    async def generate_one(self, request: ChatRequest, state: LoopState) -> GenerationResult:
        """The first request with a schema goes alone, so that a server refusing the form
        refuses it once, not once per request in flight; the rest follow in the settled form."""
        if request.response_schema is None or self.schema_form == "none" or self._form_settled:
            return await self._attempts(request, state)
        async with state.form_probe:
            if self._form_settled:
                return await self._attempts(request, state)
            try:
                return await self._attempts(request, state)
            finally:
                self._form_settled = True  # answered, fell back, or failed: the others go on at once

    async def _attempts(self, request: ChatRequest, state: LoopState) -> GenerationResult:
        """Attempts with retries (tenacity, waiting as :attr:`retry` says); returns a failed result
        instead of raising.

        One attempt at a time: a timed-out attempt is cancelled (its connection closed) before
        the next starts. Each attempt is admitted by the meter first (the cap) and priced after.
        """
        tally = Tally(request)
        retrying = AsyncRetrying(
            retry=retry_if_result(lambda outcome: outcome is None),
            stop=lambda _: self._exhausted(tally),
            wait=self.retry.wait(state.rng, lambda _: tally.retry_after),
            before_sleep=lambda retry_state: self._before_retry(request, state, tally, retry_state.upcoming_sleep),
            retry_error_callback=lambda _: tally.give_up(),
            sleep=asyncio.sleep,
        )
        return await retrying(self._one_attempt, request, state, tally)

    def _exhausted(self, tally: Tally) -> bool:
        return tally.retries == self.retry.max_retries or tally.never_heals > NEVER_HEALS_RETRIES

    async def _one_attempt(self, request: ChatRequest, state: LoopState, tally: Tally) -> GenerationResult | None:
        """One attempt, sent again at once in the next schema form while one is refused (RESEND);
        None: retry it."""
        while True:
            await state.wait_for_rate_limit()
            outcome = await self._try(request, state, tally)
            if outcome is not RESEND:
                break
        if outcome is None and state.stop_error and not self._exhausted(tally):
            return tally.failed(state.stop_error)
        return outcome

    def _before_retry(self, request: ChatRequest, state: LoopState, tally: Tally, delay: float) -> None:
        tally.retries += 1
        if tally.rate_limited:
            state.pause_until(time.monotonic() + delay)
        logger.info(
            "request %r: %s; retry %d/%d in %.2fs",
            request.request_id,
            tally.last_error,
            tally.retries,
            self.retry.max_retries,
            delay,
        )

    async def _admitted(self, request: ChatRequest, state: LoopState, first: bool) -> Admission | None:
        """The meter's admission of the next attempt, waiting for attempts in flight to settle when
        it does not fit; None when the cap leaves no room (the call stops) or the call stopped."""
        while not state.stop_error:
            admission = self.meter.admit(request, first, self.sync_mode)
            if admission is not None:
                return admission
            if self.meter.in_flight == 0:
                if await asyncio.to_thread(self.meter.extend_for, request, first, self.sync_mode):
                    continue
                state.stop(self.meter.exhausted(request, self.sync_mode))
                return None
            state.settled.clear()
            await state.settled.wait()
        return None

    def _settle(self, admission: Admission, billed: BilledReply | None, state: LoopState) -> Bill:
        bill = self.meter.settle(admission, billed)
        state.settled.set()
        return bill

    async def _try(self, request: ChatRequest, state: LoopState, tally: Tally):
        """One attempt: a result (answer or final failure), RESEND, or None (retry: the tally knows why).
        It is admitted by the meter once it holds a connection, right before it is sent."""
        async with state.limit.slot() as ticket, state.slot() as client:
            admission = await self._admitted(request, state, first=tally.sent == 0)
            if admission is None:  # the call stopped (or the cap is reached) while this attempt waited
                return tally.failed(state.stop_error or "not sent")
            started = time.perf_counter()
            form = self.schema_form
            outcome = NEUTRAL  # what the attempt says about the server's load
            try:
                reply = await self._attempt(request, client, form, state.limit.limit)
            except FormatRefused as exc:
                self.meter.release(admission)  # refused before any generation: not billed, not counted
                state.settled.set()
                if self._fall_back(exc):
                    return RESEND  # resent in the next form at once: the instance is not to blame
                state.stop(self._redact(str(exc)))
                return tally.failed(state.stop_error)
            except RetryableError as exc:
                outcome = OVERLOAD if exc.overload else NEUTRAL
                tally.fault(exc, self._settle(admission, exc.billed, state), self._redact(str(exc)))
                tally.latency = time.perf_counter() - started
                if not exc.overload:
                    state.note_fault(exc.kind, request.request_id)
                return None
            except AuthError as exc:
                tally.bill.add(self._settle(admission, None, state))
                tally.sent += 1
                state.stop(str(exc))
                return tally.failed(state.stop_error)
            except Exception as exc:  # a permanent failure of this request only
                tally.bill.add(self._settle(admission, None, state))
                tally.sent += 1
                message = self._redact(describe(exc))
                logger.warning("request %r failed: %s", request.request_id, message)
                status = getattr(exc, "status_code", None)  # a 404 for every request stops the call early
                state.note_fault(f"HTTP {status}" if status else type(exc).__name__, request.request_id)
                return tally.failed(message)
            finally:
                if outcome == OVERLOAD:
                    state.limit.record(ticket, OVERLOAD)
            state.limit.record(ticket, SUCCESS)
            state.note_answer()
            if request.response_schema is not None:
                self.schema_forms_answered[form] += 1
            tally.bill.add(self._settle(admission, reply.billed, state))
            tally.sent += 1
            return tally.answered(reply, time.perf_counter() - started)

    def _fall_back(self, refusal: FormatRefused) -> bool:
        """Under ``auto``, move past the refused form (once for the backend); False: fail instead."""
        if self.schema_format != "auto":
            return False
        if refusal.form == self.schema_form:  # the first refusal of this form moves on; the others just resend
            self.schema_form = FALLBACK[refusal.form]
            logger.warning(
                "schema_format auto: %s; sending %s from now on", self._redact(str(refusal)), self.schema_form
            )
        self.format_refusals += 1
        return True

    async def _attempt(self, request: ChatRequest, client: openai.AsyncOpenAI, form: str, bound: int) -> Reply:
        """One request with the schema in ``form``, ``bound`` requests at most in flight: the
        answer, or raises RetryableError / FormatRefused / AuthError."""
        endpoint, body = self.body(request, form)
        sends_format = "response_format" in body
        try:
            async with asyncio.timeout(self.attempt_timeout(request.max_tokens, bound)):
                # The client's generic post, not the typed chat.completions.create: the typed
                # path spends a third of the client's CPU re-validating a body built right here,
                # which caps throughput at high concurrency (benchmarks/bench_http.py). The raw
                # response, because a 200 is only an answer once parse_completion says so.
                response = await client.post(endpoint, body=body, cast_to=httpx.Response)
        except openai.APIStatusError as exc:
            raise self._status_fault(exc, form, sends_format) from None
        except (openai.APIConnectionError, TimeoutError) as exc:  # includes APITimeoutError
            undecodable = decoding_error(exc)
            if undecodable is not None:
                raise NeverHeals(
                    f"response body could not be decoded: {undecodable}", kind="undecodable body"
                ) from None
            timed_out = isinstance(exc, (TimeoutError, openai.APITimeoutError))
            raise RetryableError(describe(exc) or "timeout", overload=timed_out, kind=type(exc).__name__) from None
        return self.answer_of(parse_completion(response, request.completion), request)

    def answer_of(self, reply: Reply, request: ChatRequest) -> Reply:
        """The reply as the answer it is, or the fault it is (shared with the batch path)."""
        return answer_of(reply, request, self.model_id, self.routing, self.on_model_mismatch)

    def _status_fault(self, exc: openai.APIStatusError, form: str, sends_format: bool) -> Exception:
        return status_fault(exc, form, sends_format, self.schema_format, self._auth_message)
