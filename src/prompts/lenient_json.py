"""Find JSON values in a model's text and decode them leniently: the parser's repair engine.

Models wrap an answer in prose or code fences, use single quotes, Python literals, bare
keys or trailing commas, and stop mid-answer at the token limit. This module knows
nothing about answers: it yields the decodable values of a text in order of preference
(:func:`complete_values`), the values of a text cut off mid-way, closed after their last
complete item (:func:`salvaged_values`), and decodes one candidate, repairing what it can
(:func:`decode`). :mod:`src.prompts.parsing` decides which value is the answer.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Iterator
from typing import Any

#: What :func:`decode` and :func:`strict_json` return for text that is no value.
FAILED = object()

_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w-]*)(\s*:)")
_MAX_SEGMENTS = 200
_MAX_SALVAGE_CUTS = 30
_MAX_SALVAGE_OPENINGS = 5


def strict_json(text: str) -> Any:
    """The value of ``text`` as strict JSON, or of its one code fence; ``FAILED`` otherwise."""
    candidates = [text]
    fences = list(_FENCE.finditer(text))
    if len(fences) == 1 and fences[0].start() == 0 and fences[0].end() == len(text):
        candidates.append(fences[0].group(1).strip())
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return FAILED


def complete_values(text: str) -> Iterator[Any]:
    """Decoded values in order of preference: whole text, fenced blocks, bracketed segments."""
    seen: set[str] = set()
    sources = [text] + [m.group(1).strip() for m in _FENCE.finditer(text)][::-1]
    segments = [text[start:end] for start, end in _top_level_segments(text)][::-1]
    for source in sources + segments:
        if source in seen:
            continue
        seen.add(source)
        value = decode(source)
        if value is not FAILED:
            yield value


def _top_level_segments(text: str) -> list[tuple[int, int]]:
    """(start, end) of balanced ``[...]``/``{...}`` segments not nested in another one."""
    segments, position = [], 0
    while position < len(text) and len(segments) < _MAX_SEGMENTS:
        if text[position] in "[{":
            end = _matching_end(text, position)
            if end is not None:
                segments.append((position, end))
                position = end
                continue
        position += 1
    return segments


def _matching_end(text: str, start: int) -> int | None:
    """Index after the bracket closing the one at ``start``, skipping quoted strings."""
    closers = {"[": "]", "{": "}"}
    stack: list[str] = []
    quote: str | None = None
    position = start
    while position < len(text):
        char = text[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            if char == '"' or _opens_single_quoted(text, position):
                quote = char
        elif char in closers:
            stack.append(closers[char])
        elif char in "]}":
            if not stack or stack.pop() != char:
                return None
            if not stack:
                return position + 1
        position += 1
    return None


def _opens_single_quoted(text: str, position: int) -> bool:
    """A ``'`` starts a string only after a delimiter (so "it's" in prose is an apostrophe)."""
    before = text[:position].rstrip()
    return not before or before[-1] in "[{,:("


def salvaged_values(text: str) -> Iterator[Any]:
    """Values recovered from an answer cut off mid-way (token limit): closed after the last
    complete item."""
    openings = [i for i, c in enumerate(text) if c in "[{" and _matching_end(text, i) is None]
    for opening in openings[:_MAX_SALVAGE_OPENINGS]:
        value = _close_after_last_item(text[opening:])
        if value is not FAILED:
            yield value
            return


def _close_after_last_item(fragment: str) -> Any:
    """Decode ``fragment`` cut after its last complete string or bracket, brackets closed."""
    closers = {"[": "]", "{": "}"}
    stack: list[str] = []
    quote: str | None = None
    cuts: list[tuple[int, str]] = []  # (end of fragment prefix, closing brackets it needs)
    position = 0
    while position < len(fragment):
        char = fragment[position]
        if quote:
            if char == "\\":
                position += 1
            elif char == quote:
                quote = None
                cuts.append((position + 1, "".join(reversed(stack))))
        elif char in "\"'":
            if char == '"' or _opens_single_quoted(fragment, position):
                quote = char
        elif char in closers:
            stack.append(closers[char])
        elif char in "]}":
            if stack:
                stack.pop()
            cuts.append((position + 1, "".join(reversed(stack))))
        position += 1
    for end, closing in reversed(cuts[-_MAX_SALVAGE_CUTS:]):
        if not closing:
            continue
        value = decode(fragment[:end].rstrip().rstrip(",") + closing)
        if value is not FAILED:
            return value
    return FAILED


# ----- decoding one candidate ---------------------------------------------------------------------


def decode(source: str) -> Any:
    """JSON, then repaired JSON (single quotes, trailing commas, bare keys, Python literals),
    then a Python literal, then the same with typographic quotes straightened."""
    source = source.strip()
    if not source or source[0] not in "[{":
        return FAILED
    for candidate in (source, _straighten_quotes(source)):
        try:
            return json.loads(candidate, strict=False)
        except (ValueError, RecursionError):
            pass
        try:
            return json.loads(_repair(candidate), strict=False)
        except (ValueError, RecursionError):
            pass
        try:
            return _literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return FAILED


def _literal_eval(source: str) -> Any:
    """``ast.literal_eval`` without the warnings Python emits for odd escapes in model text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(source)


def _straighten_quotes(text: str) -> str:
    return text.translate(str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}))


def _repair(source: str) -> str:
    """Rewrite Python-ish or sloppy JSON as JSON: strings re-quoted, fixes applied outside them."""
    out: list[str] = []
    outside: list[str] = []
    position = 0

    def flush() -> None:
        chunk = "".join(outside)
        chunk = _BARE_KEY.sub(lambda m: f'{m.group(1)}"{m.group(2)}"{m.group(3)}', chunk)
        chunk = re.sub(r"\b(True|False|None)\b", lambda m: _PY_LITERALS[m.group(1)], chunk)
        chunk = re.sub(r",(\s*[\]}])", r"\1", chunk)
        out.append(chunk)
        outside.clear()

    while position < len(source):
        char = source[position]
        if char in "\"'" and (char == '"' or _opens_single_quoted(source, position)):
            end = position + 1
            while end < len(source) and source[end] != char:
                end += 2 if source[end] == "\\" else 1
            body = source[position + 1 : end]
            flush()
            out.append(json.dumps(_unescape(body, char)))
            position = end + 1
            continue
        outside.append(char)
        position += 1
    flush()
    return "".join(out)


def _unescape(body: str, quote: str) -> str:
    try:
        value = _literal_eval(quote + body + quote)
        return value if isinstance(value, str) else body
    except (ValueError, SyntaxError):
        return body.replace("\\" + quote, quote)
