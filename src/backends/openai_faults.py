"""What an attempt's outcome means: an HTTP error status (a rejected key, a refused schema form,
a retryable fault, or this request's permanent failure) and a parsed reply (the answer it is, or
the fault it is). Shared by the synchronous path and the Batch API path."""

from __future__ import annotations

from collections.abc import Callable

import openai

from src.backends.concurrency import OVERLOAD_STATUS
from src.backends.openai_reply import (
    FAILED_FINISH_REASONS,
    FormatRefused,
    NotAnAnswer,
    Reply,
    RetryableError,
    is_format_refusal,
)
from src.backends.repeats import cut_at_repeat
from src.backends.retry import is_auth_status, is_retryable_status, parse_retry_after
from src.backends.served import OFF_PIN, is_mismatch, off_pin_reason
from src.core.requests import ChatRequest
from src.redact import redact_uris


class AuthError(Exception):
    """The server rejected the credential (401/403): retrying cannot help."""


def auth_message(api_key_env: str | None, base_url: str, status: int) -> str:
    """The server's body is left out: it often quotes the rejected key."""
    variable = api_key_env or "api_key_env (no key was sent)"
    return f"authentication failed: check {variable} (HTTP {status} from {redact_uris(base_url)})"


def refusal_message(schema_format: str, form: str, exc: openai.APIStatusError) -> str:
    message = f"the server refused response_format {form} ({describe(exc)})"
    if schema_format == "auto":
        return message
    return f"{message}; set model.options.schema_format=auto to fall back to json_object, then none"


def status_fault(
    exc: openai.APIStatusError,
    form: str,
    sends_format: bool,
    schema_format: str,
    auth: Callable[[int], str],
) -> Exception:
    """What an HTTP error status means: a rejected key (``auth`` words it), a refused schema form,
    a retryable fault, or (any other 4xx) the permanent failure of this request."""
    if is_auth_status(exc.status_code):
        return AuthError(auth(exc.status_code))
    if sends_format and is_format_refusal(exc.status_code, body_text(exc)):
        return FormatRefused(refusal_message(schema_format, form, exc), form)
    if not is_retryable_status(exc.status_code):
        return exc
    headers = exc.response.headers
    retry_after = parse_retry_after(headers.get("retry-after"))
    if retry_after is None and headers.get("retry-after-ms"):
        milliseconds = parse_retry_after(headers.get("retry-after-ms"))
        retry_after = None if milliseconds is None else milliseconds / 1000
    return RetryableError(
        describe(exc),
        retry_after,
        rate_limited=exc.status_code == 429,
        overload=exc.status_code in OVERLOAD_STATUS,
        kind=f"HTTP {exc.status_code}",
    )


def answer_of(reply: Reply, request: ChatRequest, model_id: str, routing: dict | None, on_model_mismatch: str) -> Reply:
    """The reply as the answer it is (a refusal is one), or raises the fault it is: blank or a
    failed finish reason, a length cut the provider made, another model, provider or quantization
    (under ``on_model_mismatch: fail``; under ``warn`` such an answer is kept, marked
    ``served.off_pin`` and never cached). Every form of reply passes the served-model check."""
    _check_pin(reply, model_id, routing, on_model_mismatch)
    if reply.refusal is not None:  # the model's answer, whatever the finish reason says
        if reply.finish_reason in FAILED_FINISH_REASONS:
            reply.finish_reason = "refusal"
        return reply
    if not reply.text.strip() or reply.finish_reason in FAILED_FINISH_REASONS:
        blank_stop = reply if not reply.text.strip() and reply.finish_reason == "stop" else None
        what = "blank answer" if not reply.text.strip() else "answer"
        raise NotAnAnswer(f"{what} with finish_reason {reply.finish_reason!r}", blank_stop, reply.billed)
    generated = reply.usage.get("completion_tokens")
    if reply.finish_reason == "length" and isinstance(generated, int) and generated < request.max_tokens:
        # A real cut-off spends the whole budget; one far short of it is the provider's fault.
        raise RetryableError(
            f"finish_reason 'length' after {generated} of max_tokens {request.max_tokens} tokens",
            kind="cut short by the provider",
            billed=reply.billed,
        )
    # The server cannot stop at a repeated item, so the same answer is cut from its text.
    text, cut = cut_at_repeat(reply.text, request.stop_at_repeat)
    reply.text, reply.finish_reason = text, "stop" if cut else reply.finish_reason
    if reply.source != "content":
        reply.served = {**reply.served, "answer_from": reply.source}
    return reply


def _check_pin(reply: Reply, model_id: str, routing: dict | None, on_model_mismatch: str) -> None:
    """Raise (``fail``) or mark (``warn``: ``served.off_pin``) a reply from another model, provider
    or quantization than the pinned ones."""
    why = off_pin_reason(model_id, routing, reply.served)
    if why is None:
        return
    if on_model_mismatch == "fail":
        kind = "served by another model" if is_mismatch(model_id, reply.served) else "served off the pinned routing"
        raise RetryableError(f"{why} (on_model_mismatch: fail)", kind=kind, billed=reply.billed)
    reply.served = {**reply.served, OFF_PIN: why}


def body_text(exc: openai.APIStatusError) -> str:
    """The error response's body (and the client's message), for recognising a form refusal."""
    try:
        text = exc.response.text
    except Exception:  # a body that was never read
        text = ""
    return f"{exc.message} {text}"


def describe(exc: BaseException) -> str:
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
