"""Chat requests for the llama.cpp backend tests: an inductive prompt over three short news texts."""

from __future__ import annotations

import json

from src.core.requests import ChatRequest
from src.prompts import build_messages, get_strategy
from tests.helpers.records import make_record

#: The JSON schema of a plain list of span strings, as ``response_schema`` carries it.
ARRAY_SCHEMA = json.dumps({"items": {"type": "string"}, "type": "array"}, sort_keys=True, separators=(",", ":"))
TEXTS = [
    "The company said Friday that sales fell 5% in the third quarter.",
    "He will return in two weeks.",
    "Officials met on March 3, 1998, and again last month.",
]


def strategy_requests(
    task: str = "timex", schema: str | None = ARRAY_SCHEMA, max_tokens: int = 24
) -> list[ChatRequest]:
    """One request per text of :data:`TEXTS`: strategy ``I`` with two exemplars."""
    exemplars = [
        make_record("ex1", "Prices rose on Monday.", ["Monday"], doc_id="d1"),
        make_record("ex2", "The talks lasted three days.", ["three days"], doc_id="d2"),
    ]
    strategy = get_strategy("I", k=2)
    return [
        ChatRequest(
            build_messages(strategy, task, text, exemplars),
            max_tokens=max_tokens,
            response_schema=schema,
            request_id=str(i),
        )
        for i, text in enumerate(TEXTS)
    ]
