"""What a 200 from an OpenAI-compatible server means: an answer, or the fault it really is.

The backend (:mod:`src.backends.openai_backend`) sends and retries; this module reads a reply.
Every form a reply can take has one meaning here:

* ``message.content`` (a string, or a list of text parts, joined): the answer;
* ``message.refusal`` with no content: the model's answer, a refusal (kept, never retried);
* no content but one ``tool_calls`` entry (or a legacy ``function_call``): the answer is its
  ``arguments`` (providers that implement structured outputs with tool calling put it there);
  several tool calls are a fault named as such, and so is text beside a tool call;
* a chat choice with ``text`` instead of a message: the answer;
* a body sent as Server-Sent Events although no stream was asked for: the chunks joined;
* only ``reasoning`` and no content: a fault naming it (the budget went to reasoning);
* more choices than the one asked for, null content, no choices, a body that is not JSON
  (HTML), an ``error`` object: faults, retried and then named, never an answer.

Its exceptions say how a fault is retried: :class:`RetryableError` like a 5xx,
:class:`NotAnAnswer` likewise but with the blank answer kept in case it is the model's own,
and :class:`NeverHeals` at most once (a structure of the wrong types, a reply that repeating
the request gives again). A fault raised after the reply was found to be a completion object
carries ``billed`` (:class:`~src.billing.bill.BilledReply`): the provider billed it although
it is no answer; ``kind`` names the fault for the run's early stop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from src.backends.served import served_info
from src.billing.bill import BilledReply
from src.billing.reported import reported_usage

FAILED_FINISH_REASONS = frozenset({"error", "content_filter"})  # the provider says this is no answer
REASONING_FIELDS = ("reasoning", "reasoning_content")


class RetryableError(Exception):
    """A transient failure; ``retry_after`` is the server's requested wait, if any.

    ``overload``: the server is saturated (a timeout, 429 or 503), so fewer requests should
    be in flight (:mod:`src.backends.concurrency`). ``kind``: the fault's name without
    instance details (what the early stop compares); ``billed``: the reply was billed.
    """

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        rate_limited: bool = False,
        overload: bool = False,
        kind: str | None = None,
        billed: BilledReply | None = None,
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        self.overload = overload or rate_limited
        self.kind = kind or message
        self.billed = billed


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

    ``answer`` keeps a blank reply that said ``stop``: if every retry says the same, it is the
    model's own empty answer.
    """

    def __init__(self, message: str, answer: Reply | None = None, billed: BilledReply | None = None):
        super().__init__(message, kind=message, billed=billed)
        self.answer = answer


@dataclass
class Reply:
    """A 200 read as an answer: its text, how it ended, what it cost and who served it.

    ``refusal``: the model's refusal text (``text`` is then empty); ``source``: where the answer
    was read (``content``, ``parts``, ``tool_calls``, ``function_call``, ``text``, ``refusal``;
    ``+stream`` when the body came as Server-Sent Events).
    """

    text: str
    finish_reason: str | None
    usage: dict
    served: dict
    refusal: str | None = None
    source: str = "content"
    billed: BilledReply = field(default_factory=lambda: BilledReply({}))


def read_payload(response: httpx.Response) -> tuple[Any, bool]:
    """(the decoded body, whether it came as Server-Sent Events); RetryableError when neither."""
    content = response.content
    kind = response.headers.get("content-type", "no content type")
    if "text/event-stream" in kind or content.lstrip().startswith(b"data:"):
        try:
            return stream_payload(content), True
        except ValueError as error:
            raise RetryableError(
                f"HTTP {response.status_code} event-stream body could not be read ({error})", kind="bad stream body"
            ) from None
    try:
        return json.loads(content), False
    except ValueError:
        raise RetryableError(
            f"HTTP {response.status_code} body is not valid JSON ({kind}, {len(content)} bytes)",
            kind=f"body is not JSON ({kind.split(';')[0]})",
        ) from None


def stream_payload(raw: bytes) -> dict:
    """A completion object joined from an event stream's ``chat.completion.chunk`` objects."""
    chunks = []
    for line in raw.decode("utf-8").splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        chunks.append(json.loads(data))
    if not chunks:
        raise ValueError("no data events")
    payload: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise ValueError(f"an event is a JSON {type(chunk).__name__}")
        if chunk.get("error"):
            return {"error": chunk["error"]}
        for name in ("id", "model", "provider", "system_fingerprint", "created"):
            if chunk.get(name) is not None:
                payload.setdefault(name, chunk[name])
        if isinstance(chunk.get("usage"), dict):
            payload["usage"] = chunk["usage"]
        for piece in chunk.get("choices") or []:
            _merge_chunk(choices.setdefault(int(piece.get("index", 0)), {"message": {}}), piece)
    payload["choices"] = [choices[index] for index in sorted(choices)]
    return payload


def _merge_chunk(choice: dict[str, Any], piece: dict[str, Any]) -> None:
    """Add one chunk's delta (or completion text) to the choice being joined."""
    if piece.get("finish_reason") is not None:
        choice["finish_reason"] = piece["finish_reason"]
    if isinstance(piece.get("text"), str):
        choice["text"] = choice.get("text", "") + piece["text"]
    delta = piece.get("delta") or {}
    message = choice["message"]
    for name in ("content", "refusal", *REASONING_FIELDS):
        if isinstance(delta.get(name), str):
            message[name] = (message.get(name) or "") + delta[name]
    for call in delta.get("tool_calls") or []:
        calls = message.setdefault("tool_calls", [])
        index = int(call.get("index", len(calls)))
        while len(calls) <= index:
            calls.append({"type": "function", "function": {"name": "", "arguments": ""}})
        function = call.get("function") or {}
        calls[index]["function"]["name"] += function.get("name") or ""
        calls[index]["function"]["arguments"] += function.get("arguments") or ""
    message.setdefault("content", None)


def parse_completion(response: httpx.Response, plain_text: bool = False) -> Reply:
    """The :class:`Reply` of a 200, or the fault it is (see the module docstring).

    ``plain_text``: a ``/completions`` answer, whose choice holds ``text`` instead of a message.
    """
    payload, streamed = read_payload(response)
    return reply_of(payload, plain_text, streamed)


def reply_of(payload: Any, plain_text: bool = False, streamed: bool = False) -> Reply:
    """The :class:`Reply` of a decoded completion body (a synchronous reply's, or a Batch API
    output line's ``response.body``), or the fault it is."""
    if not isinstance(payload, dict):
        raise NeverHeals(f"response is a JSON {type(payload).__name__}, not an object", kind="response not an object")
    if payload.get("error"):
        raise RetryableError(
            f"provider error in a 200 response: {error_text(payload['error'])}", kind="error object in a 200"
        )
    choices = payload.get("choices")
    if choices is None and "usage" not in payload:
        raise RetryableError("response without choices", kind="response without choices")
    billed = billed_reply(payload, choices)
    if choices is not None and not isinstance(choices, list):
        raise NeverHeals(
            f"choices is a JSON {type(choices).__name__}, not a list", kind="choices not a list", billed=billed
        )
    if not choices:
        raise RetryableError("response without choices", kind="response without choices", billed=billed)
    if len(choices) > 1:
        raise NeverHeals(
            f"reply has {len(choices)} choices where 1 was asked (none is taken)", kind="several choices", billed=billed
        )
    choice = choices[0]
    if not isinstance(choice, dict):
        raise NeverHeals(
            f"choice is a JSON {type(choice).__name__}, not an object", kind="choice not an object", billed=billed
        )
    text, refusal, source = _answer_of(choice, plain_text, billed)
    finish_reason = choice.get("finish_reason")
    return Reply(
        text,
        finish_reason if isinstance(finish_reason, str) else None,
        billed.usage,
        served_info(payload),
        refusal=refusal,
        source=source + ("+stream" if streamed else ""),
        billed=billed,
    )


def _answer_of(choice: dict, plain_text: bool, billed: BilledReply) -> tuple[str, str | None, str]:
    """(text, refusal, source) of one choice, or the fault naming why it holds no answer."""
    if plain_text and isinstance(choice.get("text"), str):
        return choice["text"], None, "text"
    message = choice.get("message")
    if message is None:
        if isinstance(choice.get("text"), str):
            return choice["text"], None, "text"
        raise RetryableError("choice without message", kind="choice without message", billed=billed)
    if not isinstance(message, dict):
        raise NeverHeals(
            f"message is a JSON {type(message).__name__}, not an object", kind="message not an object", billed=billed
        )
    content = message.get("content")
    if content is not None:
        text = content if isinstance(content, str) else joined_text_parts(content, billed)
        if text.strip():
            _no_call_beside(message, billed)
            return text, None, "content" if isinstance(content, str) else "parts"
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return "", refusal, "refusal"
    called = _called_answer(message, billed)
    if called is not None:
        return called
    if content is not None:
        return text, None, "content"  # blank: the backend decides whether it is the model's own
    reasoning = next((message[name] for name in REASONING_FIELDS if isinstance(message.get(name), str)), "")
    if reasoning.strip():
        raise NeverHeals(
            f"no answer, only reasoning ({len(reasoning)} characters, finish_reason {choice.get('finish_reason')!r}): "
            "the token budget went to reasoning",
            kind="only reasoning, no answer",
            billed=billed,
        )
    what = "null content" if "content" in message else "message without content"
    raise RetryableError(what, kind=what, billed=billed)


def _no_call_beside(message: dict, billed: BilledReply) -> None:
    """Text and a tool (or function) call in one reply: which one is the answer cannot be told, so
    neither is taken (never the call dropped silently)."""
    calls = message.get("tool_calls")
    count = len(calls) if isinstance(calls, list) else 0
    count += isinstance(message.get("function_call"), dict)
    if count:
        raise NeverHeals(
            f"the reply holds text and {count} tool call(s) (none is taken: which is the answer is ambiguous)",
            kind="text and tool calls",
            billed=billed,
        )


def _called_answer(message: dict, billed: BilledReply) -> tuple[str, None, str] | None:
    """The answer a provider put in a tool call or function call, else None."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        arguments = [((call or {}).get("function") or {}).get("arguments") for call in calls if isinstance(call, dict)]
        if len(calls) > 1:
            raise NeverHeals(
                f"the answer is split over {len(calls)} tool calls (none is taken)",
                kind="several tool calls",
                billed=billed,
            )
        if not isinstance(arguments[0] if arguments else None, str):
            raise NeverHeals("a tool call without string arguments", kind="tool call without arguments", billed=billed)
        return arguments[0], None, "tool_calls"
    function_call = message.get("function_call")
    if isinstance(function_call, dict) and isinstance(function_call.get("arguments"), str):
        return function_call["arguments"], None, "function_call"
    return None


def generated_text(choices: Any) -> str:
    """Everything the reply generated, in any place (to count its tokens when usage is missing)."""
    if not isinstance(choices, list):
        return ""
    pieces: list[str] = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            pieces.append(choice["text"])
        message = choice.get("message")
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces += [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        for name in ("refusal", *REASONING_FIELDS):
            if isinstance(message.get(name), str):
                pieces.append(message[name])
        for call in message.get("tool_calls") or []:
            arguments = ((call or {}).get("function") or {}).get("arguments") if isinstance(call, dict) else None
            if isinstance(arguments, str):
                pieces.append(arguments)
    return "".join(str(piece) for piece in pieces)


def joined_text_parts(content: Any, billed: BilledReply | None = None) -> str:
    """The text of content given as a list of parts; other shapes never heal."""
    if not isinstance(content, list):
        raise NeverHeals(
            f"content is a JSON {type(content).__name__}, not a string or a list of parts",
            kind="content of the wrong type",
            billed=billed,
        )
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if content and not texts:
        kinds = sorted({str(part.get("type")) if isinstance(part, dict) else type(part).__name__ for part in content})
        raise NeverHeals(
            f"content is a list of parts without text (types {kinds})", kind="parts without text", billed=billed
        )
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


def billed_reply(payload: dict, choices: Any) -> BilledReply:
    """What the reply bills: its checked usage (odd figures named, never raised), what it generated, its tier."""
    reported = reported_usage(payload.get("usage"))
    tier = payload.get("service_tier")
    return BilledReply(
        reported.usage, generated_text(choices), tier if isinstance(tier, str) else None, odd=reported.odd
    )
