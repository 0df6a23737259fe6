"""Turn a model's raw answer into predicted spans, tolerating the ways LLMs break JSON.

The prompts ask for a JSON array of strings (timex/eventx), an object with ``reasoning_steps``
and ``spans`` (abductive), or an object with ``timex`` and ``eventx`` lists (comp). Models wrap
that in code fences or prose, use single quotes or Python literals, leave trailing commas, or
stop mid-answer at the token limit. The parser looks for the answer in the whole text, then in
fenced blocks, then in every bracketed segment (the last one first: models tend to reason
before the final answer), repairs what it can, and closes a truncated answer after its last
complete item (finding and repairing values is :mod:`src.prompts.lenient_json`'s job; this module
decides which value is the answer and reads the spans out of it). It never raises on model output: an unusable answer is ``ok=False`` with the
reason in ``error`` and no predictions, which the run counts as a parse failure.

Both answer-format sets of :mod:`src.prompts.answer_schema` are read whatever
``answer_format`` says; the format decides which shape is preferred when a text holds
several candidates and what ``well_formed`` means: the whole answer (``<think>`` blocks
removed, optionally inside one code fence) is strict JSON of exactly the format's shape,
i.e. it validates against ``answer_schema(task, abductive, answer_format)``. The study's
abductive answer (a list of objects) predicts the union of the objects' span lists,
de-duplicated in order, with their reasoning steps concatenated. With
``prompt_form="completion"`` the raw text is the model's continuation of the answer cue:
it is cut where the model starts a new ``Text:`` of its own.

A value counts as an answer only when its span lists hold strings: a list of numbers, a
span list that is a bare word, or an object whose span key holds something else is not an
answer, so a garbled answer is never turned into an empty prediction marked ``ok``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from src.study import TASK_LABELS, TASK_ORDER, TASKS

from .answer_schema import (
    TEXT_KEY,
    AnswerShape,
    answer_shape,
    check_format,
    check_prompt_form,
)
from .lenient_json import FAILED, complete_values, decode, salvaged_values, strict_json

_GENERIC_LIST_KEYS = (
    "spans",
    "predictions",
    "prediction",
    "answer",
    "answers",
    "final_answer",
    "final_spans",
    "selected_spans",
    "selected",
    "extracted",
    "extractions",
    "entities",
    "results",
    "result",
    "output",
    "items",
    "list",
)
#: Keys under which a label's spans are looked for (normalised: lower case, ``_`` for spaces).
_LABEL_LIST_KEYS = {
    "TIMEX": ("timex", "timexes", "timex3", "time_expressions", "temporal_expressions", "times", "expressions"),
    "EVENT": ("eventx", "events", "event", "event_triggers", "triggers", "event_spans"),
}
_TASK_LIST_KEYS = {name: _LABEL_LIST_KEYS[task.single_label] for name, task in TASKS.items() if task.single_label}
_REASONING_KEYS = ("reasoning_steps", "reasoning", "steps", "rationale", "explanation", "thoughts")
_LABEL_ALIASES = {"timex": "TIMEX", "timex3": "TIMEX", "time": "TIMEX", "event": "EVENT", "eventx": "EVENT"}

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


@dataclass
class ParsedAnswer:
    """What the parser recovered.

    Attributes:
        predictions: ``list[str]`` for timex/eventx; ``[{"text", "label"}]`` for comp.
        reasoning_steps: the abductive reasoning, when the answer had it (also kept for an
            answer cut off after its reasoning, which is a failure).
        ok: False when no answer could be recovered (then ``predictions == []``).
        error: why parsing failed; None when ``ok``.
        well_formed: the whole answer is strict JSON of exactly the requested format (it
            validates against the format's schema); False for answers the parser had to
            find, repair or complete, and for failures.
    """

    predictions: list = field(default_factory=list)
    reasoning_steps: list[str] | None = None
    ok: bool = True
    error: str | None = None
    well_formed: bool = False


#: The prefix of the error the catch-all reports: a parser bug, never an answer's fault.
PARSER_ERROR = "parser error"


def parse_answer(
    raw: str | None,
    task: str,
    abductive: bool,
    answer_format: str = "compact",
    prompt_form: str = "chat",
) -> ParsedAnswer:
    """Parse one raw model answer; never raises on model output.

    Args:
        raw: the generated text (None when generation failed).
        task: timex, eventx or comp.
        abductive: whether the strategy asked for the structured abductive answer.
        answer_format: ``compact`` or ``study``: the shape preferred and checked for
            ``well_formed`` (both are read either way).
        prompt_form: ``chat``, or ``completion`` when ``raw`` continues the answer cue.

    Raises:
        ValueError: an unknown task, answer format or prompt form (a caller bug, not model output).
    """
    if task not in TASKS:
        raise ValueError(f"parse_answer: unknown task {task!r}; expected one of {TASK_ORDER}")
    check_format(answer_format)
    check_prompt_form(prompt_form)
    try:
        return _parse(raw, task, abductive, answer_format, prompt_form)
    except Exception as exc:  # defensive: a parser bug must not end a run
        return ParsedAnswer([], None, False, f"{PARSER_ERROR}: {type(exc).__name__}: {exc}")


def _parse(raw: str | None, task: str, abductive: bool, answer_format: str, prompt_form: str) -> ParsedAnswer:
    if raw is None:
        return ParsedAnswer([], None, False, "no output (generation failed)")
    text = _THINK.sub("", raw).strip()
    if prompt_form == "completion":
        text = _cut_continuation(text)
    if not text:
        return ParsedAnswer([], None, False, "empty output")
    shape = answer_shape(task, abductive, answer_format)
    answer = _parse_json(text, task, _shape_test(shape))
    if answer.ok:
        answer.well_formed = _well_formed(text, shape)
    return answer


def _parse_json(text: str, task: str, expected: Callable[[Any], bool]) -> ParsedAnswer:
    complete = list(complete_values(text))
    salvaged = list(salvaged_values(text))
    for values, preferred in ((complete, True), (salvaged, True), (complete, False), (salvaged, False)):
        if not preferred and values is complete:
            cut = _cut_before_spans(salvaged, task)
            if cut is not None:
                return cut
        for value in values:
            if preferred and not expected(value):
                continue
            answer = _interpret(value, task)
            if answer is None:
                continue
            if values is salvaged and not answer.predictions and not _has_empty_list(value):
                continue  # a cut-off answer with nothing left in it is not an empty answer
            return answer
    if not complete and not salvaged:
        return ParsedAnswer([], None, False, "no JSON value found")
    kinds = sorted({type(v).__name__ for v in complete + salvaged})
    return ParsedAnswer([], None, False, f"JSON found ({', '.join(kinds)}) but no {task} answer in it")


def _has_empty_list(value: Any) -> bool:
    if isinstance(value, list):
        return not value or any(_has_empty_list(item) for item in value)
    if isinstance(value, dict):
        return any(_has_empty_list(item) for item in value.values())
    return False


def _cut_before_spans(salvaged: list, task: str) -> ParsedAnswer | None:
    """A structured answer cut off (token limit) after its reasoning but before its spans.

    Its reasoning steps must not be read as spans by the fallback passes (a bare list
    inside the cut object would otherwise be taken for the answer): it is a failure.
    """
    for value in salvaged:
        objects = value if isinstance(value, list) else [value]
        dicts = [item for item in objects if isinstance(item, dict)]
        steps = [_reasoning_steps(item) for item in dicts]
        if dicts and any(step is not None for step in steps) and _interpret(value, task) is None:
            kept = [s for group in steps if group for s in group]
            return ParsedAnswer([], kept or None, False, "answer cut off after its reasoning, before the spans")
    return None


def _shape_test(shape: AnswerShape) -> Callable[[Any], bool]:
    """The preferred kind of value: a list, an object, or a list of objects."""
    if shape.container == "array":
        return lambda value: isinstance(value, list)
    if shape.container == "object":
        return lambda value: isinstance(value, dict)
    return lambda value: isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


# ----- well-formedness: exactly the format's shape (what answer_schema describes) -------------------


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _conforms_object(value: Any, keys: tuple[str, ...]) -> bool:
    if not isinstance(value, dict) or set(value) != set(keys):
        return False
    return all(isinstance(value[key], str) if key == TEXT_KEY else _is_strings(value[key]) for key in keys)


def conforms(value: Any, shape: AnswerShape) -> bool:
    """Whether a decoded value has exactly the shape (the parser's own check, not the schema's)."""
    if shape.container == "array":
        return _is_strings(value)
    if shape.container == "object":
        return _conforms_object(value, shape.keys)
    return isinstance(value, list) and len(value) >= 1 and all(_conforms_object(v, shape.keys) for v in value)


def _well_formed(text: str, shape: AnswerShape) -> bool:
    value = strict_json(text)
    return value is not FAILED and conforms(value, shape)


# ----- the completion prompt form ----------------------------------------------------------------

#: Where a completion continues past its answer into a new example of its own.
_NEXT_EXAMPLE = re.compile(r"\n[ \t]*(?:Text[ \t]*:|Now annotate this text)")


def _cut_continuation(text: str) -> str:
    return _NEXT_EXAMPLE.split(text, maxsplit=1)[0].strip()


# ----- interpreting a decoded value -----------------------------------------------------------------


def _interpret(value: Any, task: str) -> ParsedAnswer | None:
    """The answer in ``value``, or None when it does not look like one."""
    objects = _answer_objects(value, task)
    if objects is not None:
        return objects
    return _interpret_one(value, task)


def _interpret_one(value: Any, task: str) -> ParsedAnswer | None:
    if len(TASK_LABELS[task]) > 1:
        predictions = _labelled_predictions(value, TASK_LABELS[task])
    else:
        predictions = _span_list(_find_list(value, _TASK_LIST_KEYS[task] + _GENERIC_LIST_KEYS))
    if predictions is None:
        return None
    return ParsedAnswer(predictions, _reasoning_steps(value), True, None)


def _answer_objects(value: Any, task: str) -> ParsedAnswer | None:
    """The study's abductive answer: a list of objects, each with its span list(s).

    Predictions are the union over the objects (de-duplicated in order), reasoning steps
    concatenated. None unless every item is an object and at least one holds an answer.
    """
    if not isinstance(value, list) or not value or not all(isinstance(item, dict) for item in value):
        return None
    if any(_labelled_item(item) is not None for item in value):
        return None  # comp's labelled items, read by _labelled_predictions
    answers = [_interpret_one(item, task) for item in value]
    answers = [answer for answer in answers if answer is not None]
    if not answers:
        return None
    predictions: list = [p for answer in answers for p in answer.predictions]
    if len(TASK_LABELS[task]) > 1:
        predictions = _dedupe_labelled(predictions)
    else:
        predictions = list(dict.fromkeys(predictions))
    steps = [answer.reasoning_steps for answer in answers if answer.reasoning_steps is not None]
    return ParsedAnswer(predictions, [s for group in steps for s in group] if steps else None, True, None)


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
        decoded = decode(value)
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


def _labelled_predictions(value: Any, labels: tuple[str, ...], depth: int = 0) -> list[dict] | None:
    """``[{"text", "label"}]`` from an object with one span list per label (``{"timex": [...],
    "eventx": [...]}``, ``{"time_expressions": [...], "events": [...]}``) or labelled items.

    None when it is not such an answer, also when a label's key is present but does not hold
    a list of strings (a garbled answer is not an empty one).
    """
    if isinstance(value, list):
        labelled = [_labelled_item(item) for item in value]
        labelled = [item for item in labelled if item is not None and item["label"] in labels]
        return _dedupe_labelled(labelled) if labelled or not value else None
    if not isinstance(value, dict) or depth > 2:
        return None
    found: dict[str, list[str]] = {}
    for label in labels:
        keys = _LABEL_LIST_KEYS[label]
        raw = _lookup(value, keys)
        if raw is None:
            continue
        spans = _span_list(_find_list(raw, keys, 1))
        if spans is None:
            return None
        found[label] = spans
    if not found:
        inner = _lookup(value, _GENERIC_LIST_KEYS)
        return _labelled_predictions(inner, labels, depth + 1) if isinstance(inner, (dict, list)) else None
    predictions = [{"text": s, "label": label} for label in labels for s in found.get(label, [])]
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
