"""What a 200 from an OpenAI-compatible server means: an answer, or the fault it really is.

The backend (:mod:`src.backends.openai_backend`) sends and retries; this module reads a reply.
Its exceptions say how a fault is retried: :class:`RetryableError` like a 5xx (missing
pieces, a body that is not JSON, an ``error`` object), :class:`NotAnAnswer` likewise but with
the blank answer kept in case it is the model's own, and :class:`NeverHeals` at most once (a
body that does not decode, a JSON structure of the wrong types).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from src.backends.served import served_info

FAILED_FINISH_REASONS = frozenset({"error", "content_filter"})  # the provider says this is no answer


class RetryableError(Exception):
    """A transient failure; ``retry_after`` is the server's requested wait, if any.

    ``overload``: the server is saturated (a timeout, 429 or 503), so fewer requests should
    be in flight (:mod:`src.backends.concurrency`).
    """

    def __init__(
        self, message: str, retry_after: float | None = None, rate_limited: bool = False, overload: bool = False
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        self.overload = overload or rate_limited


class FormatRefused(Exception):
    """The server refused the ``response_format`` form ``form`` (400/422/500 naming it).

    Not a server fault: resending the same body cannot help, so it is never retried as one.
    """

    def __init__(self, message: str, form: str):
        super().__init__(message)
        self.form = form


#: Words of a refusal that names the structured-output field (llama.cpp's server answers
#: ``HTTP 500 ... Input should be 'text' or 'json_object'``; vLLM and others 400/422).
FORMAT_WORDS = ("response_format", "json_schema", "json_object")
FORMAT_REFUSAL_STATUS = frozenset({400, 422, 500})


def is_format_refusal(status: int, body: str) -> bool:
    """True when an error of ``status`` with ``body`` refuses the response_format sent."""
    lowered = body.lower()
    return status in FORMAT_REFUSAL_STATUS and any(word in lowered for word in FORMAT_WORDS)


class NeverHeals(RetryableError):
    """A reply that repeating the request will not fix: retried NEVER_HEALS_RETRIES times only."""


class NotAnAnswer(RetryableError):
    """A well-formed reply with no usable answer: blank text, or finish_reason error/content_filter.

    ``answer`` keeps a blank reply that said ``stop`` (text, finish_reason, usage, served): if
    every retry says the same, it is the model's own empty answer.
    """

    def __init__(self, message: str, answer: tuple | None = None):
        super().__init__(message)
        self.answer = answer


def parse_completion(response: httpx.Response, plain_text: bool = False) -> tuple[str, str | None, dict, dict]:
    """(text, finish_reason, usage, served) of a 200, or RetryableError naming what is wrong.

    ``plain_text``: a ``/completions`` answer, whose choice holds ``text`` instead of a message.
    Content given as a list of parts (``[{"type": "text", "text": ...}]``) is joined. A JSON
    structure of the wrong types is :class:`NeverHeals`; missing pieces (no choices, no
    message, null content) are transient, as providers send them under load.
    """
    try:
        payload = json.loads(response.content)
    except ValueError:
        kind = response.headers.get("content-type", "no content type")
        raise RetryableError(
            f"HTTP {response.status_code} body is not valid JSON ({kind}, {len(response.content)} bytes)"
        ) from None
    if not isinstance(payload, dict):
        raise NeverHeals(f"response is a JSON {type(payload).__name__}, not an object")
    if payload.get("error"):
        raise RetryableError(f"provider error in a 200 response: {error_text(payload['error'])}")
    choices = payload.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise NeverHeals(f"choices is a JSON {type(choices).__name__}, not a list")
    if not choices:
        raise RetryableError("response without choices")
    if not isinstance(choices[0], dict):
        raise NeverHeals(f"choice is a JSON {type(choices[0]).__name__}, not an object")
    choice = choices[0]
    message = {"content": choice.get("text")} if plain_text and "text" in choice else choice.get("message")
    if message is None:
        raise RetryableError("choice without message")
    if not isinstance(message, dict):
        raise NeverHeals(f"message is a JSON {type(message).__name__}, not an object")
    content = message.get("content")
    if content is None:
        raise RetryableError("null content" if "content" in message else "message without content")
    text = content if isinstance(content, str) else joined_text_parts(content)
    finish_reason = choice.get("finish_reason")
    finish_reason = finish_reason if isinstance(finish_reason, str) else None
    return text, finish_reason, usage_dict(payload), served_info(payload)


def joined_text_parts(content: Any) -> str:
    """The text of content given as a list of parts; other shapes never heal."""
    if not isinstance(content, list):
        raise NeverHeals(f"content is a JSON {type(content).__name__}, not a string or a list of parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if content and not texts:
        kinds = sorted({str(part.get("type")) if isinstance(part, dict) else type(part).__name__ for part in content})
        raise NeverHeals(f"content is a list of parts without text (types {kinds})")
    return "".join(texts)


def decoding_error(exc: BaseException) -> str | None:
    """The body-decoding failure (bad gzip, unknown encoding) behind a client error, if any."""
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, httpx.DecodingError):
            return f"{type(cause).__name__}: {cause}"
        cause = cause.__cause__ or cause.__context__
    return None


def error_text(error: Any) -> str:
    """A provider's error object in one short line (redacted by the caller)."""
    text = (error.get("message") or json.dumps(error)) if isinstance(error, dict) else str(error)
    return str(text)[:300]


def usage_dict(payload: dict) -> dict:
    """Token counts and, where reported (OpenRouter), the cost in credits."""
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return {}
    result = {"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens")}
    if usage.get("cost") is not None:
        result["cost"] = float(usage["cost"])
    return result
