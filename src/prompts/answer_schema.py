"""Answer formats, their JSON schemas, and when a request carries one.

Two answer-format sets, selectable per run (``answer_format``):

``compact`` (the project's original formats)
    - timex / eventx, not abductive: a JSON array of strings, ``["last week", "Friday"]``.
    - timex / eventx, abductive: one object ``{"reasoning_steps": [...], "spans": [...]}``.
    - comp, not abductive: one object ``{"timex": [...], "eventx": [...]}``.
    - comp, abductive: one object ``{"reasoning_steps": [...], "timex": [...], "eventx": [...]}``.

``study`` (the study's formats)
    - timex / eventx, not abductive: a JSON array of strings, no duplicates, in order of
      appearance (the same shape as ``compact``).
    - comp, not abductive: one object ``{"time_expressions": [...], "events": [...]}`` (the
      study's abductive key names, without the text and the reasoning).
    - abductive: a JSON list of objects, one per input text, each
      ``{"text": <the input>, <list key(s)>: [...], "reasoning_steps": [...]}`` where the list
      key is ``"time_expressions"`` (timex), ``"events"`` (eventx) or both (comp).

Every list holds strings. ``answer_schema`` gives the JSON schema of a format; it describes
exactly the answers :func:`src.prompts.parsing.parse_answer` reports as ``well_formed`` (no
``uniqueItems`` and no ``pattern``, so llama.cpp's json-schema-to-grammar converter takes
it; duplicates are therefore allowed by the schema and removed by the parser).
:func:`schema_text` is its canonical text for ``ChatRequest.response_schema`` and
:func:`request_schema` the policy of which requests carry one.

The keys of a format come from the gold labels of :mod:`src.study` through
:data:`LABEL_KEYS`, so a new task is a new label combination, not new code here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from src.data.text import word_offsets
from src.study import TASK_LABELS, TASK_ORDER, strategy_parts

ANSWER_FORMATS: tuple[str, ...] = ("compact", "study")
PROMPT_FORMS: tuple[str, ...] = ("chat", "completion")

#: The key that holds a label's spans in an object answer, per format.
LABEL_KEYS: dict[str, dict[str, str]] = {
    "compact": {"TIMEX": "timex", "EVENT": "eventx"},
    "study": {"TIMEX": "time_expressions", "EVENT": "events"},
}
#: Single-label abductive answers in the compact format keep their spans under this key.
COMPACT_SPANS_KEY = "spans"
REASONING_KEY = "reasoning_steps"
#: The study's abductive objects repeat the input text under this key.
TEXT_KEY = "text"


@dataclass(frozen=True)
class AnswerShape:
    """The shape of a well-formed answer.

    Attributes:
        container: ``"array"`` (a JSON array of strings), ``"object"`` (one object) or
            ``"objects"`` (a JSON list of objects, at least one).
        keys: the object's keys in the order the model should write them (empty for
            ``"array"``); every key holds an array of strings except ``TEXT_KEY``.
        label_keys: ``{key: label}`` for the keys that hold predicted spans.
    """

    container: str
    keys: tuple[str, ...] = ()
    label_keys: tuple[tuple[str, str], ...] = ()

    @property
    def span_keys(self) -> dict[str, str]:
        """``{key: label}`` of the span lists, in key order."""
        return dict(self.label_keys)


def check_format(answer_format: str) -> None:
    """Raise ValueError for an answer format outside :data:`ANSWER_FORMATS`."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"unknown answer format {answer_format!r} (expected one of {', '.join(ANSWER_FORMATS)})")


def check_prompt_form(prompt_form: str) -> None:
    """Raise ValueError for a prompt form outside :data:`PROMPT_FORMS`."""
    if prompt_form not in PROMPT_FORMS:
        raise ValueError(f"unknown prompt form {prompt_form!r} (expected one of {', '.join(PROMPT_FORMS)})")


def _check_task(task: str) -> None:
    if task not in TASK_LABELS:
        raise ValueError(f"unknown task {task!r} (expected one of {', '.join(TASK_ORDER)})")


def answer_shape(task: str, abductive: bool, answer_format: str = "compact") -> AnswerShape:
    """The shape of a well-formed answer for a task, reasoning type and format."""
    _check_task(task)
    check_format(answer_format)
    labels = TASK_LABELS[task]
    if answer_format == "compact":
        if len(labels) == 1 and not abductive:
            return AnswerShape("array")
        if len(labels) == 1:
            keys = (REASONING_KEY, COMPACT_SPANS_KEY)
            return AnswerShape("object", keys, ((COMPACT_SPANS_KEY, labels[0]),))
        label_keys = tuple((LABEL_KEYS["compact"][label], label) for label in labels)
        keys = ((REASONING_KEY,) if abductive else ()) + tuple(key for key, _ in label_keys)
        return AnswerShape("object", keys, label_keys)
    label_keys = tuple((LABEL_KEYS["study"][label], label) for label in labels)
    if not abductive:
        if len(labels) == 1:
            return AnswerShape("array")
        return AnswerShape("object", tuple(key for key, _ in label_keys), label_keys)
    keys = (TEXT_KEY,) + tuple(key for key, _ in label_keys) + (REASONING_KEY,)
    return AnswerShape("objects", keys, label_keys)


def final_span_list(task: str, abductive: bool, answer_format: str = "compact") -> str | None:
    """The path (:mod:`src.backends.repeats`) of the span list that ends a well-formed answer:
    ``$`` for an array answer, ``$.<key>`` when an object's last key holds spans, None when the
    answer ends otherwise (the study's abductive objects end with their reasoning steps)."""
    shape = answer_shape(task, abductive, answer_format)
    if shape.container == "array":
        return "$"
    if shape.container == "object" and shape.keys[-1] in shape.span_keys:
        return f"$.{shape.keys[-1]}"
    return None


_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "minItems": 0}


def _object_schema(keys: tuple[str, ...]) -> dict:
    properties = {key: ({"type": "string"} if key == TEXT_KEY else dict(_STRINGS)) for key in keys}
    return {"type": "object", "properties": properties, "required": list(keys), "additionalProperties": False}


def answer_schema(task: str, abductive: bool, answer_format: str = "compact") -> dict:
    """The JSON schema of a well-formed answer (a fresh dict; safe to modify).

    Arrays of strings have ``minItems`` 0; objects list every key as required, in writing
    order, with ``additionalProperties`` false; the study's abductive list has ``minItems`` 1.
    """
    shape = answer_shape(task, abductive, answer_format)
    if shape.container == "array":
        return {"type": "array", "items": {"type": "string"}, "minItems": 0}
    if shape.container == "object":
        return _object_schema(shape.keys)
    return {"type": "array", "items": _object_schema(shape.keys), "minItems": 1}


def schema_text(schema: dict) -> str:
    """Canonical compact JSON of a schema for ``ChatRequest.response_schema``.

    Keys are sorted everywhere except inside ``properties``, which keep their declared
    order: constrained decoders (llama.cpp's json-schema-to-grammar, llguidance, OpenAI
    structured outputs) make the model write properties in the order the schema lists them,
    and the reasoning must come before the spans it selects. The text is still a pure
    function of the schema dict built here, so equal requests give equal cache keys.
    """
    return json.dumps(_canonical(schema), separators=(",", ":"), ensure_ascii=False)


def _canonical(value: Any, in_properties: bool = False) -> Any:
    if isinstance(value, dict):
        items = value.items() if in_properties else sorted(value.items())
        return {key: _canonical(inner, key == "properties" and not in_properties) for key, inner in items}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _is_abductive(strategy: Any) -> bool:
    if isinstance(strategy, str):
        return strategy_parts(strategy)["abductive"]
    return bool(strategy.abductive)


#: Inputs longer than this (whole documents) get no enum: an enum of every word n-gram would
#: make the grammar larger than the prompt. Their span strings are bounded by length instead.
SPAN_ENUM_MAX_WORDS = 120
#: The longest span (in words) an input-restricted answer may name.
SPAN_ENUM_NGRAM = 6
#: The longest span string (characters) of a whole-document answer (gold: timex <= 32, eventx <= 17).
DOCUMENT_SPAN_MAX_CHARS = 48
_UNSAFE_IN_ENUM = re.compile(r'["\\\x00-\x1f]')
#: Input-restricted answers are also bounded, so that a small model's greedy loops (the same
#: span again and again, reasoning that never ends) stop inside the token budget: at most this
#: many spans per list, by the list's label (more than 99.8% of the training sentences have
#: fewer: timex <= 4, eventx <= 11; documents keep unbounded lists, they hold up to 222 events).
#: comp's two lists take their own label's bound: with 12 for both, 202 of 280 comp answers of
#: the default profile looped in their first (timex) list up to the 12th item ...
SPAN_MAX_ITEMS = {"TIMEX": 5, "EVENT": 12}
#: ... and at most two reasoning steps of at most 40 characters each (measured with the 135M
#: model, strategy A, 48 tokens: parse failures on eventx t2c / base / comp 10 / 7.5 / 5% with
#: 60 characters, 7.5 / 5 / 2.5% with 40; the rest are answers cut inside their first span).
#: Documents get the same reasoning bound: unbounded, A+I looped in its steps on 16 of 40.
REASONING_MAX_STEPS = 2
REASONING_MAX_CHARS = 40


def input_spans(text: str, max_words: int = SPAN_ENUM_NGRAM) -> list[str]:
    """Every contiguous run of 1..``max_words`` words of ``text``, as written, in order, unique."""

    offsets = word_offsets(text)
    seen: dict[str, None] = {}
    for i in range(len(offsets)):
        for j in range(i, min(i + max_words, len(offsets))):
            span = text[offsets[i][0] : offsets[j][1]]
            if not _UNSAFE_IN_ENUM.search(span):  # quotes and backslashes break llama.cpp's grammar literals
                seen.setdefault(span, None)
    return list(seen)


def span_list_bounds(task: str, abductive: bool, answer_format: str = "compact") -> dict[str | None, int]:
    """``{list key: maxItems}`` of an input-restricted answer (key None: a top-level array)."""
    shape = answer_shape(task, abductive, answer_format)
    if shape.container == "array":
        return {None: SPAN_MAX_ITEMS[TASK_LABELS[task][0]]}
    return {key: SPAN_MAX_ITEMS[label] for key, label in shape.span_keys.items()}


def restrict_to_input(schema: dict, text: str, max_items: Mapping[str | None, int] | None = None) -> dict:
    """The schema with every span string limited to a word n-gram of the input (an ``enum``).

    A small model then cannot invent or misspell a span: it can only choose among the
    input's own word runs, which is what a span extractor's answer must be anyway. With
    ``max_items`` (``{list key: bound}``, :func:`span_list_bounds`), every span list holds at
    most its bound and the reasoning steps are
    bounded too (:data:`REASONING_MAX_STEPS` of :data:`REASONING_MAX_CHARS`), so every
    answer can end within its token budget. Inputs longer than :data:`SPAN_ENUM_MAX_WORDS`
    words get no enum and no list bound; with ``max_items`` their span strings are at most
    :data:`DOCUMENT_SPAN_MAX_CHARS` long and their reasoning is bounded as for sentences.
    """

    spans = input_spans(text)
    document = not spans or len(word_offsets(text)) > SPAN_ENUM_MAX_WORDS
    if document and max_items is None:
        return schema

    def span_list(node: dict, key: str | None) -> dict:
        if document:
            return {**node, "items": {"type": "string", "maxLength": DOCUMENT_SPAN_MAX_CHARS}}
        bound = {} if max_items is None else {"maxItems": max_items[key]}
        return {**node, "items": {"type": "string", "enum": spans}, **bound}

    def visit(node: Any, key: str | None) -> Any:
        if isinstance(node, dict):
            if node.get("type") == "array" and node.get("items") == {"type": "string"}:
                if key == REASONING_KEY:
                    if max_items is None:
                        return node
                    items = {"type": "string", "maxLength": REASONING_MAX_CHARS}
                    return {**node, "items": items, "maxItems": REASONING_MAX_STEPS}
                return span_list(node, key)
            return {k: visit(v, k if k not in ("properties", "items") else key) for k, v in node.items()}
        return node

    return visit(schema, None)


def request_schema(
    task: str,
    strategy: Any,
    answer_format: str = "compact",
    constrained: bool = False,
    prompt_form: str = "chat",
    input_text: str | None = None,
) -> str | None:
    """The ``response_schema`` text a request carries, or None.

    Policy:
        - ``constrained=False``: never a schema (free decoding; the parser copes).
        - ``study`` format: the schema for non-abductive strategies only, never for abductive
          ones (the study constrained the plain answers and let the reasoning run free).
        - ``compact`` format: the schema for every strategy. The ``completion`` prompt form
          follows the same rule: every completion answer is one JSON value.

    Args:
        task: timex, eventx or comp.
        strategy: a :class:`~src.prompts.strategies.Strategy` or a strategy name.
        answer_format: ``compact`` or ``study``.
        constrained: whether the run constrains decoding at all.
        prompt_form: ``chat`` or ``completion``.
        input_text: when given, span strings are restricted to the input's word n-grams and
            the answer is bounded (:func:`restrict_to_input` with :func:`span_list_bounds`;
            ``generation.spans_from_input``).
    """
    _check_task(task)
    check_format(answer_format)
    check_prompt_form(prompt_form)
    abductive = _is_abductive(strategy)
    if not constrained:
        return None
    if answer_format == "study" and abductive:
        return None
    schema = answer_schema(task, abductive, answer_format)
    if input_text is not None:
        schema = restrict_to_input(schema, input_text, span_list_bounds(task, abductive, answer_format))
    return schema_text(schema)
