"""Turn a model's raw answer into predicted spans, tolerating the ways LLMs break JSON.

The prompts ask for a JSON array of strings (timex/eventx), an object with ``reasoning_steps``
and ``spans`` (abductive), or an object with ``timex`` and ``eventx`` lists (comp). Models wrap
that in code fences or prose, use single quotes or Python literals, leave trailing commas, or
stop mid-answer at the token limit. The parser looks for the answer in the whole text, then in
fenced blocks, then in every bracketed segment (the last one first: models tend to reason
before the final answer), repairs what it can, and closes a truncated answer after its last
complete item. It never raises on model output: an unusable answer is ``ok=False`` with the
reason in ``error`` and no predictions, which the run counts as a parse failure.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

TASKS = ("timex", "eventx", "comp")
LABELS = {"timex": "TIMEX", "eventx": "EVENT"}

_GENERIC_LIST_KEYS = (
    "spans", "predictions", "prediction", "answer", "answers", "final_answer", "final_spans",
    "selected_spans", "selected", "extracted", "extractions", "entities", "results", "result",
    "output", "items", "list",
)
_TASK_LIST_KEYS = {
    "timex": ("timex", "timexes", "timex3", "time_expressions", "temporal_expressions", "times", "expressions"),
    "eventx": ("eventx", "events", "event", "event_triggers", "triggers", "event_spans"),
}
_REASONING_KEYS = ("reasoning_steps", "reasoning", "steps", "rationale", "explanation", "thoughts")
_LABEL_ALIASES = {"timex": "TIMEX", "timex3": "TIMEX", "time": "TIMEX", "event": "EVENT", "eventx": "EVENT"}

_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w-]*)(\s*:)")
_MAX_SEGMENTS = 200
_MAX_SALVAGE_CUTS = 30
_MAX_SALVAGE_OPENINGS = 5


@dataclass
class ParsedAnswer:
    """What the parser recovered.

    Attributes:
        predictions: ``list[str]`` for timex/eventx; ``[{"text", "label"}]`` for comp.
        reasoning_steps: the abductive reasoning, when the answer had it.
        ok: False when no answer could be recovered (then ``predictions == []``).
        error: why parsing failed; None when ``ok``.
    """

    predictions: list = field(default_factory=list)
    reasoning_steps: list[str] | None = None
    ok: bool = True
    error: str | None = None


def parse_answer(raw: str | None, task: str, abductive: bool) -> ParsedAnswer:
    """Parse one raw model answer; never raises on model output.

    Raises:
        ValueError: ``task`` is not one of timex, eventx, comp (a caller bug, not model output).
    """
    if task not in TASKS:
        raise ValueError(f"parse_answer: unknown task {task!r}; expected one of {TASKS}")
    try:
        return _parse(raw, task, abductive)
    except Exception as exc:  # defensive: a parser bug must not end a run
        return ParsedAnswer([], None, False, f"parser error: {type(exc).__name__}: {exc}")


def _parse(raw: str | None, task: str, abductive: bool) -> ParsedAnswer:
    if raw is None:
        return ParsedAnswer([], None, False, "no output (generation failed)")
    text = _THINK.sub("", raw).strip()
    if not text:
        return ParsedAnswer([], None, False, "empty output")
    expected = dict if (abductive or task == "comp") else list
    complete = list(_complete_values(text))
    salvaged = list(_salvaged_values(text))
    for values, shape in ((complete, expected), (salvaged, expected), (complete, None), (salvaged, None)):
        for value in values:
            if shape is not None and not isinstance(value, shape):
                continue
            answer = _interpret(value, task)
            if answer is not None:
                return answer
    if not complete and not salvaged:
        return ParsedAnswer([], None, False, "no JSON value found")
    kinds = sorted({type(v).__name__ for v in complete + salvaged})
    return ParsedAnswer([], None, False, f"JSON found ({', '.join(kinds)}) but no {task} answer in it")


# ----- finding candidate values ----------------------------------------------------------------


def _complete_values(text: str) -> Iterator[Any]:
    """Decoded values in order of preference: whole text, fenced blocks, bracketed segments."""
    seen: set[str] = set()
    sources = [text] + [m.group(1).strip() for m in _FENCE.finditer(text)][::-1]
    segments = [text[start:end] for start, end in _top_level_segments(text)][::-1]
    for source in sources + segments:
        if source in seen:
            continue
        seen.add(source)
        value = _decode(source)
        if value is not _FAILED:
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


def _salvaged_values(text: str) -> Iterator[Any]:
    """Values recovered from an answer cut off mid-way (token limit): closed after the last
    complete item."""
    openings = [i for i, c in enumerate(text) if c in "[{" and _matching_end(text, i) is None]
    for opening in openings[:_MAX_SALVAGE_OPENINGS]:
        value = _close_after_last_item(text[opening:])
        if value is not _FAILED:
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
        value = _decode(fragment[:end].rstrip().rstrip(",") + closing)
        if value is not _FAILED:
            return value
    return _FAILED


# ----- decoding one candidate ---------------------------------------------------------------------

_FAILED = object()


def _decode(source: str) -> Any:
    """JSON, then repaired JSON (single quotes, trailing commas, bare keys, Python literals),
    then a Python literal, then the same with typographic quotes straightened."""
    source = source.strip()
    if not source or source[0] not in "[{":
        return _FAILED
    for candidate in (source, _straighten_quotes(source)):
        try:
            return json.loads(candidate, strict=False)
        except ValueError:
            pass
        try:
            return json.loads(_repair(candidate), strict=False)
        except ValueError:
            pass
        try:
            return _literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return _FAILED


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
            body = source[position + 1:end]
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


# ----- interpreting a decoded value -----------------------------------------------------------------


def _interpret(value: Any, task: str) -> ParsedAnswer | None:
    """The answer in ``value``, or None when it does not look like one."""
    if task == "comp":
        predictions = _comp_predictions(value)
    else:
        predictions = _span_list(_find_list(value, _TASK_LIST_KEYS[task] + _GENERIC_LIST_KEYS))
    if predictions is None:
        return None
    return ParsedAnswer(predictions, _reasoning_steps(value), True, None)


def _normalize_key(key: Any) -> str:
    return re.sub(r"[\s-]+", "_", str(key).strip().lower())


def _lookup(mapping: dict, keys: tuple[str, ...]) -> Any:
    normalized = {_normalize_key(k): v for k, v in mapping.items()}
    for key in keys:
        if key in normalized:
            return normalized[key]
    return None


def _find_list(value: Any, keys: tuple[str, ...], depth: int = 0) -> list | None:
    """The list itself, or the list an object holds under a known key (one level of nesting)."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and depth > 0:
        decoded = _decode(value)
        return decoded if isinstance(decoded, list) else None
    if not isinstance(value, dict) or depth > 2:
        return None
    found = _lookup(value, keys)
    if found is not None:
        return _find_list(found, keys, depth + 1)
    lists = [v for k, v in value.items() if isinstance(v, list) and _normalize_key(k) not in _REASONING_KEYS]
    return lists[0] if len(lists) == 1 else None


def _span_list(items: list | None) -> list[str] | None:
    """Stripped, deduplicated strings; None when a non-empty list holds no string at all."""
    if items is None:
        return None
    strings = [item.strip() for item in items if isinstance(item, str)]
    if items and not strings:
        return None
    return list(dict.fromkeys(s for s in strings if s))


def _comp_predictions(value: Any) -> list[dict] | None:
    """``[{"text", "label"}]`` from ``{"timex": [...], "eventx": [...]}`` or labelled items."""
    if isinstance(value, list):
        labelled = [_labelled_item(item) for item in value]
        labelled = [item for item in labelled if item is not None]
        return _dedupe_labelled(labelled) if labelled or not value else None
    if not isinstance(value, dict):
        return None
    timex = _find_list(value, _TASK_LIST_KEYS["timex"]) if _lookup(value, _TASK_LIST_KEYS["timex"]) is not None else None
    eventx = _find_list(value, _TASK_LIST_KEYS["eventx"]) if _lookup(value, _TASK_LIST_KEYS["eventx"]) is not None else None
    if timex is None and eventx is None:
        inner = _lookup(value, _GENERIC_LIST_KEYS)
        return _comp_predictions(inner) if isinstance(inner, (dict, list)) else None
    predictions = [{"text": s, "label": "TIMEX"} for s in _span_list(timex or []) or []]
    predictions += [{"text": s, "label": "EVENT"} for s in _span_list(eventx or []) or []]
    return _dedupe_labelled(predictions)


def _labelled_item(item: Any) -> dict | None:
    if not isinstance(item, dict):
        return None
    text, label = item.get("text"), _LABEL_ALIASES.get(str(item.get("label", "")).strip().lower())
    if not isinstance(text, str) or not text.strip() or label is None:
        return None
    return {"text": text.strip(), "label": label}


def _dedupe_labelled(items: list[dict]) -> list[dict]:
    seen: dict[tuple[str, str], dict] = {}
    for item in items:
        seen.setdefault((item["text"], item["label"]), item)
    return list(seen.values())


def _reasoning_steps(value: Any) -> list[str] | None:
    if not isinstance(value, dict):
        return None
    steps = _lookup(value, _REASONING_KEYS)
    if isinstance(steps, str):
        return [steps.strip()] if steps.strip() else []
    if isinstance(steps, list):
        return [s if isinstance(s, str) else json.dumps(s) for s in steps if s is not None]
    return None
