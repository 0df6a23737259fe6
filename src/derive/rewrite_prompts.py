"""The ``adv_p`` prompts: one chat request per attempt asking for one edit kind, and the one
answer format accepted back (``{"rewritten": "..."}``, also sent as the response schema).

The wording, the examples and the request ids are part of the response cache key: changing a
character here changes every cached generation.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from src.core.requests import ChatRequest
from src.data.schema import Record
from src.data.text import words
from src.derive.alignment import AlignmentError

EDIT_KINDS = ("lexical", "char_noise", "structural")

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rewritten": {"type": "string"}},
    "required": ["rewritten"],
    "additionalProperties": False,
}
RESPONSE_SCHEMA_TEXT = json.dumps(RESPONSE_SCHEMA, sort_keys=True, separators=(",", ":"))

SYSTEM_PROMPT = (
    "You rewrite sentences to test information extraction systems. The rewrite must mean the same "
    "as the original. Answer with JSON only."
)

# One short example per edit kind: (instruction, sentence, keep, rewritten)
KIND_PROMPTS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "lexical": (
        "Replace two or three words with synonyms. Keep all the other words, in the same order. "
        "Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "Officials stated on Monday that the old bridge would open again after repairs.",
    ),
    "char_noise": (
        "Add typos to two or three words: swap, drop or double one letter inside each. "
        "Keep all the other words exactly. Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "Officials siad on Monday that the old brigde would reopen after repairs.",
    ),
    "structural": (
        "Reorder the sentence: move one phrase to the front or to the end, or turn active into "
        "passive. Keep every word and every detail. Do not shorten the sentence.",
        "Officials said on Monday that the old bridge would reopen after repairs.",
        ("Monday",),
        "On Monday, officials said that the old bridge would reopen after repairs.",
    ),
}


def _task_message(instruction: str, sentence: str, keep: Sequence[str]) -> str:
    targets = ", ".join(json.dumps(s, ensure_ascii=False) for s in keep)
    return (
        f"{instruction}\nCopy these expressions exactly, in the same order: {targets}\n"
        f'Answer as {{"rewritten": "..."}}.\nSentence: {sentence}'
    )


def instance_kinds(record_id: str, seed: int, kinds: Sequence[str] = EDIT_KINDS) -> list[str]:
    """The kinds an instance tries, attempt by attempt: a seeded first kind, then the others in turn."""
    first = random.Random(f"{seed}:{record_id}:edit_kind").randrange(len(kinds))
    return [kinds[(first + i) % len(kinds)] for i in range(len(kinds))]


def rewrite_request(record: Record, attempt: int, seed: int, kind: str) -> ChatRequest:
    """The chat request for one attempt: the kind's instruction and example, then the sentence.

    An attempt that repeats a kind (``attempt >= len(EDIT_KINDS)``) says its number, which
    changes the prompt and so the cache key (greedy decoding would repeat the answer otherwise).
    """
    instruction, ex_sentence, ex_keep, ex_rewrite = KIND_PROMPTS[kind]
    keep = [span.text for span in sorted(record.spans)]
    user = _task_message(instruction, record.text, keep)
    if attempt >= len(EDIT_KINDS):
        user = f"Attempt {attempt + 1}: write a different rewrite than before.\n{user}"
    messages = (
        ("system", SYSTEM_PROMPT),
        ("user", _task_message(instruction, ex_sentence, ex_keep)),
        ("assistant", json.dumps({"rewritten": ex_rewrite}, ensure_ascii=False)),
        ("user", user),
    )
    n_words = len(words(record.text))
    max_tokens = min(1024, -(-(48 + 3 * n_words) // 32) * 32)  # rounded up: fewer batch groups
    return ChatRequest(
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        seed=seed,
        request_id=f"{record.id}#attempt{attempt + 1}:{kind}",
        response_schema=RESPONSE_SCHEMA_TEXT,
    )


def parse_rewrite(raw: str | None) -> str:
    """The rewritten sentence from an answer that is exactly ``{"rewritten": "<string>"}``.

    Surrounding whitespace is allowed; anything else (prose, code fences, other keys, a
    non-string value, broken JSON) raises ``AlignmentError("format")``.
    """
    try:
        value = json.loads((raw or "").strip())
    except json.JSONDecodeError as exc:
        raise AlignmentError("format", f"not JSON: {exc.msg}") from None
    if not isinstance(value, dict) or set(value) != {"rewritten"} or not isinstance(value["rewritten"], str):
        raise AlignmentError("format", 'expected {"rewritten": "<string>"}')
    return value["rewritten"].strip()
