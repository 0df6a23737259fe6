"""The JSON body of one request to an OpenAI-compatible endpoint, in the server's dialect.

One place builds it, so a synchronous attempt and a Batch API line carry the same body: the
messages (or a completion prompt), the sampling settings, the response schema in the form the
server accepts, OpenRouter's routing object and cost flag, and OpenAI's ``service_tier``.
"""

from __future__ import annotations

import json
from typing import Any

from src.core.requests import ChatRequest

SCHEMA_FORMATS = ("auto", "strict", "json_schema", "json_object", "none")
FORMS = ("json_schema", "json_object", "none")  # what a request can carry, strictest first
FIRST_FORM = {"auto": "json_schema", "strict": "json_schema"}
FALLBACK = {"json_schema": "json_object", "json_object": "none"}  # auto's next form after a refusal
CHAT_ENDPOINT = "/chat/completions"
COMPLETION_ENDPOINT = "/completions"


def response_format(schema: str, kind: str = "json_schema") -> dict:
    """The ``response_format`` field carrying a JSON schema, in the server's dialect."""
    if kind == "json_object":
        return {"type": "json_object", "schema": json.loads(schema)}
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": json.loads(schema)}}


def request_body(
    model_id: str,
    request: ChatRequest,
    form: str,
    extra_body: dict[str, Any],
    request_cost: bool,
    routing: dict[str, Any] | None = None,
    service_tier: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """(endpoint path, body) of ``request`` with its schema sent in ``form`` (``none``: not sent)."""
    body = dict(extra_body)
    if request_cost:
        body.setdefault("usage", {"include": True})
    if routing:
        body["provider"] = dict(routing)
    if service_tier:
        body["service_tier"] = service_tier
    body.update(model=model_id, max_tokens=request.max_tokens, temperature=request.temperature, seed=request.seed)
    if request.completion:  # the completion prompt form: plain text continued, no chat template
        endpoint = COMPLETION_ENDPOINT
        body["prompt"] = request.messages[0][1]
    else:
        endpoint = CHAT_ENDPOINT
        body["messages"] = request.message_dicts()
    if request.response_schema is not None and form != "none":
        body["response_format"] = response_format(request.response_schema, form)
    return endpoint, body
