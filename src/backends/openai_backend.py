"""Backend for any OpenAI-compatible chat endpoint: OpenRouter (default), vLLM, llama.cpp server.

Requests run concurrently on one event loop, bounded by a semaphore; the ``openai`` client's own
retries are disabled so that retrying follows :mod:`src.backends.retry` (backoff with full jitter,
``Retry-After`` honoured, and a rate limit pauses every request, not only the one that hit it).
The API key is read from an environment variable named in the config and never appears in a
message, log line, repr or result (nor any 4+ character piece of it, which servers like to echo).

A response is an answer only when its first choice has text (a string, or a list of text parts,
which is joined) that is not blank, and the provider did not end it with ``finish_reason``
``error`` or ``content_filter``. Null or missing content, a choice without a message, no
choices, a body that is not JSON (truncated, HTML), a 200 carrying an ``error`` object and a
blank or errored answer are transient failures, retried like a 5xx. A reply that stays blank
through every retry is the model's own (empty) answer only when each of those replies said
``finish_reason: stop``; otherwise the request fails with that cause. What retrying cannot heal
(a body that does not decode, a JSON structure of the wrong types) is retried once, and the
failure names it. ``finish_reason: length`` is the model's answer cut by its budget, except
when the provider reports fewer completion tokens than ``max_tokens``: then the provider cut it
short, and it is retried. 401/403 fail at once with a message naming the key variable, and stop the
other requests of the call.

Every answer carries what the provider said it served (:mod:`src.backends.served`); with
``on_model_mismatch: fail`` an answer from another model is retried and then fails instead.

How many attempts are in flight adapts to the server (:mod:`src.backends.concurrency`: halved
on a timeout, 429 or 503, grown by one after a window of successes; ``concurrency_stats``),
one attempt per request at a time, each with a timeout long enough for the answers that may
be queued ahead of it (``min_tokens_per_s``). A server that refuses the structured-output form
(400/422/500 naming ``response_format``) is not retried as a server fault: ``schema_format:
auto`` falls back to the next form once for the whole backend and resends the request (not
counted as an attempt); any other ``schema_format`` fails with one message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import random
import ssl
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
from tqdm.auto import tqdm

from src.backends.base import ChatRequest, GenerationResult, OrderedResults, ResultCallback
from src.backends.concurrency import (
    NEUTRAL,
    OVERLOAD,
    OVERLOAD_STATUS,
    SUCCESS,
    AdaptiveLimit,
    ConcurrencyStats,
    attempt_timeout,
)
from src.backends.openai_reply import (
    FAILED_FINISH_REASONS,
    FormatRefused,
    NeverHeals,
    NotAnAnswer,
    RetryableError,
    decoding_error,
    is_format_refusal,
    parse_completion,
)
from src.backends.repeats import cut_at_repeat
from src.backends.retry import (
    RetryPolicy,
    is_auth_status,
    is_retryable_status,
    parse_retry_after,
)
from src.backends.served import ON_MISMATCH, is_mismatch
from src.redact import redact_uris, without_userinfo

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_API_KEY_ENV = "OPENROUTER_API_KEY"
PROVIDER_KEY_HOSTS = {"OPENROUTER_API_KEY": "openrouter.ai", "OPENAI_API_KEY": "api.openai.com"}
MIN_SECRET_PIECE = 4  # shortest prefix/suffix of the key scrubbed from messages
CONNECTIONS_PER_CLIENT = 8
PLACEHOLDER_KEY = "EMPTY"  # what local servers (vLLM, llama.cpp) accept when they check no key
NEVER_HEALS_RETRIES = 1  # retries of a fault that repeating cannot fix (undecodable body, wrong types)


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold the API key is unset or empty."""


class KeyHostMismatchError(ValueError):
    """A provider's key variable was pointed at another host."""


class _AuthError(Exception):
    """The server rejected the credential (401/403): retrying cannot help."""


class OpenAIBackend:
    """Chat completions over HTTP with bounded concurrency and retries.

    Args:
        model_id: the provider's model name, e.g. ``qwen/qwen3-235b-a22b-2507``.
        base_url: endpoint root (``.../v1``).
        api_key_env: name of the environment variable holding the key (see "Which key goes
            where"); None or empty = no key.
        require_api_key: None = required unless ``base_url`` is a loopback address.
        max_concurrency: most requests in flight at once (the start of the adaptive bound).
        timeout_s: limit on one attempt (the least one; see ``min_tokens_per_s``).
        min_tokens_per_s: the slowest generation speed to wait for: an attempt may take
            ``max(timeout_s, bound * max_tokens / min_tokens_per_s)`` seconds, one slow answer
            for every request that may be queued ahead of it; None = ``timeout_s`` alone.
        max_retries, backoff_base_s, backoff_max_s: see :class:`RetryPolicy`.
        extra_headers: sent with every request (e.g. OpenRouter's ``HTTP-Referer``).
        extra_body: extra JSON fields (e.g. OpenRouter ``provider`` routing); part of the cache key.
        request_cost: ask for ``usage.cost`` with OpenRouter's ``usage: {include: true}`` (now
            documented as always on and the flag as a no-op; sent for deployments that still
            need it); None = only when the host is openrouter.ai, as other servers may reject
            the field. ``usage.cost`` is recorded whenever a response carries it.
        seed: seeds the retry jitter (not the model; each request carries its own seed).
        on_model_mismatch: ``warn`` keeps an answer whose served ``model`` is another model
            (the run counts and reports it); ``fail`` retries it and then fails the request, so
            nothing from another model is cached. Not part of the cache key.
        schema_format: how a request's JSON schema is sent: ``json_schema`` (OpenAI's
            structured outputs, accepted by vLLM and OpenRouter; ``strict`` is the same form,
            named for runs that must fail rather than fall back), ``json_object`` (llama.cpp's
            Python server: ``{"type": "json_object", "schema": ...}``), ``none`` (not sent;
            the answer is parsed as it comes), or ``auto``: ``json_schema``, then
            ``json_object``, then ``none``, moving on once for the whole backend when the
            server refuses a form (``schema_form_used`` says which answered). Part of the
            cache key (``auto`` as ``auto``: the same endpoint always settles on the same form).

    Which key goes where: a provider's own variable (``OPENROUTER_API_KEY`` -> openrouter.ai,
    ``OPENAI_API_KEY`` -> api.openai.com, see ``PROVIDER_KEY_HOSTS``) is only ever sent to
    that host or its subdomains. Overriding ``base_url`` of such a model sends a loopback
    server the placeholder key instead, and any other host is refused
    (:class:`KeyHostMismatchError`) until ``api_key_env`` names a variable of its own (or is
    null). A variable that is not a provider's (``VLLM_API_KEY``, a test's) is the explicit
    choice of whoever wrote the config and goes to whatever ``base_url`` says.
    """

    name = "openai"

    def __init__(
        self,
        model_id: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        require_api_key: bool | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        min_tokens_per_s: float | None = None,
        max_retries: int = 6,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        extra_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
        request_cost: bool | None = None,
        seed: int = 0,
        schema_format: str = "json_schema",
        on_model_mismatch: str = "warn",
    ) -> None:
        if not model_id:
            raise ValueError("openai backend: model_id is required")
        if max_concurrency < 1:
            raise ValueError(f"openai backend: max_concurrency must be >= 1, got {max_concurrency}")
        if timeout_s <= 0:
            raise ValueError(f"openai backend: timeout_s must be > 0, got {timeout_s}")
        if min_tokens_per_s is not None and min_tokens_per_s <= 0:
            raise ValueError(f"openai backend: min_tokens_per_s must be > 0 or null, got {min_tokens_per_s}")
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.min_tokens_per_s = None if min_tokens_per_s is None else float(min_tokens_per_s)
        self.concurrency_stats: ConcurrencyStats | None = None  # set by the first generate call
        self.retry = RetryPolicy(max_retries, backoff_base_s, backoff_max_s)
        self.extra_headers = dict(extra_headers or {})
        self.extra_body = dict(extra_body or {})
        host = (urlsplit(self.base_url).hostname or "").lower().rstrip(".")
        self.request_cost = _host_within(host, "openrouter.ai") if request_cost is None else request_cost
        self.seed = seed
        if schema_format not in SCHEMA_FORMATS:
            raise ValueError(f"openai backend: schema_format must be one of {SCHEMA_FORMATS}, got {schema_format!r}")
        self.schema_format = schema_format
        self.schema_form = FIRST_FORM.get(schema_format, schema_format)  # the form sent now
        self.schema_forms_answered: Counter[str] = Counter()  # form -> answers to requests with a schema
        self.format_refusals = 0  # requests resent in a fallback form (auto), not counted as attempts
        self._form_settled = False  # a request with a schema has been sent and answered in the current form
        if on_model_mismatch not in ON_MISMATCH:
            raise ValueError(
                f"openai backend: on_model_mismatch must be one of {ON_MISMATCH}, got {on_model_mismatch!r}"
            )
        self.on_model_mismatch = on_model_mismatch
        self.__api_key = self._key_for(host, require_api_key)
        self._tls: ssl.SSLContext | None = None

    def _key_for(self, host: str, require_api_key: bool | None) -> str:
        """The key this host may receive (class docstring: "Which key goes where")."""
        provider_host = PROVIDER_KEY_HOSTS.get(self.api_key_env or "")
        if provider_host and not _host_within(host, provider_host):
            if is_loopback(host) and not require_api_key:
                return PLACEHOLDER_KEY
            raise KeyHostMismatchError(
                f"openai backend: refusing to send {self.api_key_env} to {host or self.base_url}: that "
                f"key belongs to {provider_host}; set api_key_env to the variable holding this "
                f"server's own key (or null for a server that needs none)"
            )
        needs_key = not is_loopback(host) if require_api_key is None else require_api_key
        return self._read_key(needs_key)

    def _read_key(self, needs_key: bool) -> str:
        key = os.environ.get(self.api_key_env, "").strip() if self.api_key_env else ""
        if key:
            return key
        if needs_key:
            raise MissingAPIKeyError(
                f"openai backend: no API key for {without_userinfo(self.base_url)}: set the environment variable "
                f"{self.api_key_env or '(api_key_env is empty)'} (or point base_url at a local "
                f"server such as vLLM on localhost, which needs no key)"
            )
        return PLACEHOLDER_KEY

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(model_id={self.model_id!r}, base_url={without_userinfo(self.base_url)!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency})"
        )

    def cache_identity(self) -> dict:
        """The endpoint and extra body fields: the same model id elsewhere may answer differently."""
        # Without user-info: a credential in the URL does not change the answer, and the identity
        # is written into every cache entry (unchanged for every URL without one).
        identity = {"base_url": without_userinfo(self.base_url), "extra_body": self.extra_body}
        if self.schema_format not in ("json_schema", "strict"):  # so existing cache keys stay valid
            identity["schema_format"] = self.schema_format
        return identity

    @property
    def schema_form_used(self) -> str | None:
        """The ``response_format`` form of the answers this backend received to requests with a
        schema (``json_schema``, ``json_object``, ``none``; forms joined by ``+`` when a fallback
        came mid-call); None when it sent none (everything came from the cache)."""
        if not self.schema_forms_answered:
            return None
        return "+".join(form for form in FORMS if form in self.schema_forms_answered)

    def _redact(self, text: str) -> str:
        """``text`` without the key or any prefix/suffix of it of MIN_SECRET_PIECE+ characters."""
        text = redact_uris(text)
        key = self.__api_key
        if not key or key == PLACEHOLDER_KEY:
            return text
        for length in range(len(key), MIN_SECRET_PIECE - 1, -1):
            text = text.replace(key[:length], "***").replace(key[-length:], "***")
        return text

    def attempt_timeout(self, max_tokens: int, bound: int) -> float:
        """Seconds one attempt may take (:func:`src.backends.concurrency.attempt_timeout`)."""
        if self.min_tokens_per_s is None:
            return self.timeout_s
        return attempt_timeout(self.timeout_s, max_tokens, self.min_tokens_per_s, bound)

    def _refusal_message(self, form: str, exc: openai.APIStatusError) -> str:
        message = f"the server refused response_format {form} ({_describe(exc)})"
        if self.schema_format == "auto":
            return message
        return f"{message}; set model.options.schema_format=auto to fall back to json_object, then none"

    def _auth_message(self, status: int) -> str:
        """The server's body is left out: it often quotes the rejected key."""
        variable = self.api_key_env or "api_key_env (no key was sent)"
        return f"authentication failed: check {variable} (HTTP {status} from {without_userinfo(self.base_url)})"

    def generate(
        self, requests: Sequence[ChatRequest], progress: str | None = None, on_result: ResultCallback | None = None
    ) -> list[GenerationResult]:
        """Send all requests concurrently; blocks until every one succeeded or gave up."""
        requests = list(requests)
        if not requests:
            return []
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
        # Several small clients instead of one big one: httpcore's pool scans every connection
        # for every active request on each event, which costs more CPU than the requests
        # themselves at a few dozen connections; pools of CONNECTIONS_PER_CLIENT keep it cheap.
        sizes = [CONNECTIONS_PER_CLIENT] * (self.max_concurrency // CONNECTIONS_PER_CLIENT)
        if self.max_concurrency % CONNECTIONS_PER_CLIENT:
            sizes.append(self.max_concurrency % CONNECTIONS_PER_CLIENT)
        clients = [self._client(size) for size in sizes]
        limit = AdaptiveLimit(self.max_concurrency, self.concurrency_stats)  # goes on where the last call ended
        self.concurrency_stats = limit.stats
        state = _LoopState(clients, sizes, random.Random(self.seed), limit)
        results = OrderedResults(len(requests), on_result)
        failures = 0
        bar = tqdm(total=len(requests), desc=progress, unit="req", disable=progress is None)
        try:
            async with contextlib.AsyncExitStack() as stack:
                for client in clients:
                    await stack.enter_async_context(client)
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

    def _client(self, connections: int) -> openai.AsyncOpenAI:
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
        return index, await self._generate_one(request, state)

    async def _generate_one(self, request: ChatRequest, state: _LoopState) -> GenerationResult:
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

    async def _attempts(self, request: ChatRequest, state: _LoopState) -> GenerationResult:
        """Attempts with retries; returns a failed result instead of raising.

        One attempt at a time: a timed-out attempt is cancelled (its connection closed) before
        the next starts. A form refusal under ``auto`` resends at once in the fallback form,
        without counting an attempt.
        """
        last_error = ""
        never_heals = 0  # replies that retrying cannot fix, seen so far
        blank_answers: list[tuple | None] = []  # per not-an-answer reply: its blank "stop" answer or None
        last_not_answer: NotAnAnswer | None = None
        attempts = 0
        attempt = 0  # retries so far
        while True:
            await state.wait_for_rate_limit()
            async with state.limit.slot() as ticket, state.slot() as client:
                if state.stop_error:  # the server rejected the key or the form: do not keep sending
                    return GenerationResult(request, None, error=state.stop_error)
                started = time.perf_counter()
                form = self.schema_form
                outcome = NEUTRAL  # what the attempt says about the server's load
                try:
                    text, finish_reason, usage, served = await self._attempt(request, client, form, state.limit.limit)
                    state.limit.record(ticket, SUCCESS)
                    if request.response_schema is not None:
                        self.schema_forms_answered[form] += 1
                    return GenerationResult(
                        request,
                        text,
                        usage=usage,
                        latency_s=time.perf_counter() - started,
                        finish_reason=finish_reason,
                        served=served,
                        attempts=attempts + 1,
                    )
                except FormatRefused as exc:
                    if self._fall_back(exc):
                        continue  # resent in the next form at once: the instance is not to blame
                    state.stop_error = state.stop_error or self._redact(str(exc))
                    logger.error("request %r failed: %s", request.request_id, state.stop_error)
                    return GenerationResult(request, None, error=state.stop_error)
                except RetryableError as exc:
                    attempts += 1
                    outcome = OVERLOAD if exc.overload else NEUTRAL
                    last_error = self._redact(str(exc))
                    retry_after, rate_limited = exc.retry_after, exc.rate_limited
                    last_not_answer = exc if isinstance(exc, NotAnAnswer) else None
                    if last_not_answer is not None:
                        blank_answers.append(exc.answer)
                    never_heals += isinstance(exc, NeverHeals)
                    latency = time.perf_counter() - started
                except _AuthError as exc:
                    state.stop_error = state.stop_error or str(exc)
                    logger.warning("request %r failed: %s", request.request_id, state.stop_error)
                    return GenerationResult(request, None, error=state.stop_error)
                except Exception as exc:  # a permanent failure of this request only
                    message = self._redact(_describe(exc))
                    logger.warning("request %r failed: %s", request.request_id, message)
                    return GenerationResult(request, None, error=message)
                finally:
                    if outcome == OVERLOAD:
                        state.limit.record(ticket, OVERLOAD)
            if attempt == self.retry.max_retries or never_heals > NEVER_HEALS_RETRIES:
                break
            delay = self.retry.delay(attempt, state.rng, retry_after)
            attempt += 1
            if rate_limited:
                state.pause_until(time.monotonic() + delay)
            logger.info(
                "request %r: %s; retry %d/%d in %.2fs",
                request.request_id,
                last_error,
                attempt,
                self.retry.max_retries,
                delay,
            )
            await asyncio.sleep(delay)
        if last_not_answer is not None and all(answer is not None for answer in blank_answers):
            # Blank every time it answered, and "stop" every time: the model's own empty answer.
            text, finish_reason, usage, served = last_not_answer.answer
            return GenerationResult(
                request,
                text,
                usage=usage,
                latency_s=latency,
                finish_reason=finish_reason,
                served=served,
                attempts=attempts,
            )
        healing = "; retrying does not heal this" if never_heals > NEVER_HEALS_RETRIES else ""
        message = f"gave up after {attempts} attempts: {last_error}{healing}"
        logger.warning("request %r %s", request.request_id, message)
        return GenerationResult(request, None, error=message, attempts=attempts)

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

    async def _attempt(
        self, request: ChatRequest, client: openai.AsyncOpenAI, form: str, bound: int
    ) -> tuple[str, str | None, dict, dict]:
        """One request with the schema in ``form``, ``bound`` requests at most in flight:
        (text, finish_reason, usage, served), or raises RetryableError / FormatRefused / _AuthError."""
        body = dict(self.extra_body)
        if self.request_cost:
            body.setdefault("usage", {"include": True})
        body.update(
            model=self.model_id, max_tokens=request.max_tokens, temperature=request.temperature, seed=request.seed
        )
        if request.completion:  # the completion prompt form: plain text continued, no chat template
            endpoint = "/completions"
            body["prompt"] = request.messages[0][1]
        else:
            endpoint = "/chat/completions"
            body["messages"] = request.message_dicts()
        sends_format = request.response_schema is not None and form != "none"
        if sends_format:
            body["response_format"] = response_format(request.response_schema, form)
        try:
            async with asyncio.timeout(self.attempt_timeout(request.max_tokens, bound)):
                # The client's generic post, not the typed chat.completions.create: the typed
                # path spends a third of the client's CPU re-validating a body built right here,
                # which caps throughput at high concurrency (benchmarks/bench_http.py). The raw
                # response, because a 200 is only an answer once parse_completion says so.
                response = await client.post(endpoint, body=body, cast_to=httpx.Response)
        except openai.APIStatusError as exc:
            if is_auth_status(exc.status_code):
                raise _AuthError(self._auth_message(exc.status_code)) from None
            if sends_format and is_format_refusal(exc.status_code, _body_text(exc)):
                raise FormatRefused(self._refusal_message(form, exc), form) from None
            if not is_retryable_status(exc.status_code):
                raise
            headers = exc.response.headers
            retry_after = parse_retry_after(headers.get("retry-after"))
            if retry_after is None and headers.get("retry-after-ms"):
                milliseconds = parse_retry_after(headers.get("retry-after-ms"))
                retry_after = None if milliseconds is None else milliseconds / 1000
            overload = exc.status_code in OVERLOAD_STATUS
            raise RetryableError(
                _describe(exc), retry_after, rate_limited=exc.status_code == 429, overload=overload
            ) from None
        except (openai.APIConnectionError, TimeoutError) as exc:  # includes APITimeoutError
            undecodable = decoding_error(exc)
            if undecodable is not None:
                raise NeverHeals(f"response body could not be decoded: {undecodable}") from None
            timed_out = isinstance(exc, (TimeoutError, openai.APITimeoutError))
            raise RetryableError(_describe(exc) or "timeout", overload=timed_out) from None
        text, finish_reason, usage, served = parse_completion(response, request.completion)
        if not text.strip() or finish_reason in FAILED_FINISH_REASONS:
            blank_stop = (text, finish_reason, usage, served) if not text.strip() and finish_reason == "stop" else None
            what = "blank answer" if not text.strip() else "answer"
            raise NotAnAnswer(f"{what} with finish_reason {finish_reason!r}", blank_stop)
        generated = usage.get("completion_tokens")
        if finish_reason == "length" and isinstance(generated, int) and generated < request.max_tokens:
            # A real cut-off spends the whole budget; one far short of it is the provider's fault.
            raise RetryableError(f"finish_reason 'length' after {generated} of max_tokens {request.max_tokens} tokens")
        if self.on_model_mismatch == "fail" and is_mismatch(self.model_id, served):
            raise RetryableError(f"served model {served['model']!r} is not {self.model_id!r} (on_model_mismatch: fail)")
        # The server cannot stop at a repeated item, so the same answer is cut from its text.
        text, cut = cut_at_repeat(text, request.stop_at_repeat)
        return text, "stop" if cut else finish_reason, usage, served


class _LoopState:
    """Per-call shared state: the adaptive bound, the connection slots, jitter source and a
    global rate-limit pause.

    Each slot is a client with a free connection (``max_concurrency`` in all); the adaptive
    bound (``limit``) decides how many of them are in use.
    """

    def __init__(
        self, clients: list[openai.AsyncOpenAI], sizes: list[int], rng: random.Random, limit: AdaptiveLimit
    ) -> None:
        self._free: asyncio.Queue[openai.AsyncOpenAI] = asyncio.Queue()
        for client, size in zip(clients, sizes):
            for _ in range(size):
                self._free.put_nowait(client)
        self.rng = rng
        self.limit = limit
        self.form_probe = asyncio.Lock()  # held by the request that tries the schema form first
        self._not_before = 0.0
        # set by the first 401/403 or refused response_format (not under auto); fails the rest at once
        self.stop_error: str | None = None

    @contextlib.asynccontextmanager
    async def slot(self):
        client = await self._free.get()
        try:
            yield client
        finally:
            self._free.put_nowait(client)

    def pause_until(self, moment: float) -> None:
        self._not_before = max(self._not_before, moment)

    async def wait_for_rate_limit(self) -> None:
        while (remaining := self._not_before - time.monotonic()) > 0:
            await asyncio.sleep(remaining)


SCHEMA_FORMATS = ("auto", "strict", "json_schema", "json_object", "none")
FORMS = ("json_schema", "json_object", "none")  # what a request can carry, strictest first
FIRST_FORM = {"auto": "json_schema", "strict": "json_schema"}
FALLBACK = {"json_schema": "json_object", "json_object": "none"}  # auto's next form after a refusal


def response_format(schema: str, kind: str = "json_schema") -> dict:
    """The ``response_format`` field carrying a JSON schema, in the server's dialect."""
    if kind == "json_object":
        return {"type": "json_object", "schema": json.loads(schema)}
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": json.loads(schema)}}


def _body_text(exc: openai.APIStatusError) -> str:
    """The error response's body (and the client's message), for recognising a form refusal."""
    try:
        text = exc.response.text
    except Exception:  # a body that was never read
        text = ""
    return f"{exc.message} {text}"


def is_loopback(host: str) -> bool:
    """True for localhost names and every loopback or unspecified address (127.0.0.0/8, ::1)."""
    host = host.lower().rstrip(".").strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _host_within(host: str, domain: str) -> bool:
    """``host`` is ``domain`` or one of its subdomains (not merely a name ending in it)."""
    return host == domain or host.endswith("." + domain)


def _describe(exc: BaseException) -> str:
    """A one-line description: status code and message, never headers (which carry the key)."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    if isinstance(exc, openai.APITimeoutError) or isinstance(exc, TimeoutError):
        return f"timeout: {type(exc).__name__}"
    cause = exc.__cause__
    if isinstance(exc, openai.APIConnectionError) and cause is not None and str(cause):
        # "Connection error." alone hides the real cause (reset, refused, protocol error).
        return f"{type(exc).__name__}: {exc} ({type(cause).__name__}: {cause})"
    return f"{type(exc).__name__}: {exc}"
