"""One cached answer: its key, its checksum and whether it can be used (the format of
:mod:`src.backends.cache`'s entry files and of :mod:`src.backends.stage_answers`' files).

An entry is a JSON object: ``fields`` (everything that determined the answer: the key is the
sha256 of their canonical JSON), ``text``, ``usage``, ``finish_reason``, ``served``, ``refusal``
where the model refused, and on this machine's cache also ``latency_s``, ``created`` and
``checksum`` (the sha256 of the rest). :func:`entry_problem` says why an entry cannot be used.
"""

from __future__ import annotations

import json
from pathlib import Path

from src.core.digest import digest
from src.core.requests import ChatRequest

CACHE_FORMAT = 1
NOT_ANSWER_FINISH_REASONS = frozenset({"error", "content_filter"})


def cache_key_fields(backend_name: str, model_id: str, identity: dict, request: ChatRequest) -> dict:
    """Everything that determines the answer; ``request_id`` is deliberately absent.

    The schema, the completion form and the repeat stop are added only when set, so that the keys of plain
    chat requests (and the answers already cached under them) stay what they were.
    """
    fields = {
        "format": CACHE_FORMAT,
        "backend": backend_name,
        "model_id": model_id,
        "backend_options": identity,
        "messages": [list(message) for message in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": float(request.temperature),
        "seed": request.seed,
    }
    if request.response_schema is not None:
        fields["response_schema"] = request.response_schema
    if request.completion:
        fields["completion"] = True
    if request.stop_at_repeat is not None:
        fields["stop_at_repeat"] = request.stop_at_repeat
    return fields


def canonical_json(value: object) -> str:
    """Key order, spacing and unicode fixed, so equal content always hashes equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cache_key(fields: dict) -> str:
    """sha256 hex digest of the canonical JSON of ``fields``."""
    return digest(canonical_json(fields))


def entry_checksum(entry: dict) -> str:
    """sha256 of the canonical JSON of ``entry`` without its ``checksum`` field."""
    content = {name: value for name, value in entry.items() if name != "checksum"}
    return digest(canonical_json(content))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def entry_problem(entry: object) -> str | None:
    """Why ``entry`` (a parsed cache file) cannot be used as an answer; None when it can."""
    if not isinstance(entry, dict):
        return f"it is a JSON {type(entry).__name__}, not an object"
    if not isinstance(entry.get("text"), str):
        return "it holds no answer text"
    if not isinstance(entry.get("fields"), dict):
        return "its request fields are missing"
    checks = {
        "usage": lambda v: v is None or (isinstance(v, dict) and all(x is None or _is_number(x) for x in v.values())),
        "latency_s": lambda v: v is None or _is_number(v),
        "finish_reason": lambda v: v is None or isinstance(v, str),
        "served": lambda v: v is None or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
        "refusal": lambda v: v is None or isinstance(v, str),
        "created": lambda v: v is None or _is_number(v),
        "checksum": lambda v: v is None or isinstance(v, str),
    }
    for name, valid in checks.items():
        if not valid(entry.get(name)):
            return f"field {name!r} has the wrong type ({type(entry.get(name)).__name__})"
    if entry.get("checksum") is not None and entry["checksum"] != entry_checksum(entry):
        return "its checksum does not match its content (the entry was edited)"
    if entry.get("finish_reason") in NOT_ANSWER_FINISH_REASONS:
        return f"finish_reason {entry['finish_reason']!r} is no answer"
    return None


def read_entry(path: Path) -> tuple[dict | None, str | None]:
    """(entry, None) for a usable entry file, else (None, why not); FileNotFoundError propagates."""
    try:
        with open(path, encoding="utf-8") as handle:
            entry = json.load(handle)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        return None, f"unreadable: {exc}"
    problem = entry_problem(entry)
    return (None, problem) if problem else (entry, None)
