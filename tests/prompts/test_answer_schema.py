"""Answer schemas: they describe exactly the answers the parser calls well-formed, gold answers
from the real train split validate, and the request policy sends them where the study did."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from src.data.schema import read_records
from src.prompts import (
    STRATEGY_NAMES,
    get_strategy,
    gold_answer,
    gold_value,
    target_spans,
)
from src.prompts.answer_schema import (
    ANSWER_FORMATS,
    answer_schema,
    answer_shape,
    request_schema,
    schema_text,
)
from src.prompts.parsing import parse_answer
from src.study import TASK_ORDER as TASKS
from tests.helpers.schema_check import is_valid, schema_errors

CASES = [(task, name, fmt) for task in TASKS for name in STRATEGY_NAMES for fmt in ANSWER_FORMATS]
SHAPES = sorted({(task, abductive, fmt) for task in TASKS for abductive in (False, True) for fmt in ANSWER_FORMATS})


def _abductive(name: str) -> bool:
    return get_strategy(name).abductive


def _walk(schema):
    yield schema
    for value in schema.values():
        if isinstance(value, dict):
            yield from _walk(value)


@pytest.mark.parametrize("task, abductive, fmt", SHAPES)
def test_schemas_stay_in_the_grammar_friendly_subset(task, abductive, fmt):
    schema = answer_schema(task, abductive, fmt)
    for node in _walk(schema):
        assert "uniqueItems" not in node and "pattern" not in node
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
        if node.get("type") == "array" and node.get("items", {}).get("type") == "string":
            assert node["minItems"] == 0
    schema_errors([], schema)  # raises for a keyword outside the validator's subset


def test_the_formats_shapes():
    assert answer_schema("timex", False, "compact") == {"type": "array", "items": {"type": "string"}, "minItems": 0}
    assert answer_schema("timex", False, "study") == answer_schema("timex", False, "compact")
    assert list(answer_schema("eventx", True, "compact")["properties"]) == ["reasoning_steps", "spans"]
    assert list(answer_schema("comp", False, "compact")["properties"]) == ["timex", "eventx"]
    assert list(answer_schema("comp", True, "compact")["properties"]) == ["reasoning_steps", "timex", "eventx"]
    assert list(answer_schema("comp", False, "study")["properties"]) == ["time_expressions", "events"]
    study_a = answer_schema("timex", True, "study")
    assert study_a["type"] == "array" and study_a["minItems"] == 1
    assert list(study_a["items"]["properties"]) == ["text", "time_expressions", "reasoning_steps"]
    assert study_a["items"]["properties"]["text"] == {"type": "string"}
    assert list(answer_schema("eventx", True, "study")["items"]["properties"]) == ["text", "events", "reasoning_steps"]
    assert list(answer_schema("comp", True, "study")["items"]["properties"]) == [
        "text",
        "time_expressions",
        "events",
        "reasoning_steps",
    ]
    with pytest.raises(ValueError, match="answer format"):
        answer_schema("timex", False, "verbose")
    with pytest.raises(ValueError, match="unknown task"):
        answer_schema("dates", False, "compact")


@pytest.mark.parametrize("task, abductive, fmt", SHAPES)
def test_schema_text_is_canonical_and_keeps_property_order(task, abductive, fmt):
    schema = answer_schema(task, abductive, fmt)
    text = schema_text(schema)
    assert json.loads(text) == schema
    assert " " not in text.replace('"type"', "")  # compact separators
    assert schema_text(json.loads(text)) == text
    # keys sorted outside "properties", declared (writing) order inside
    decoded = json.loads(text)
    node = decoded["items"] if decoded["type"] == "array" and decoded["items"]["type"] == "object" else decoded
    assert list(decoded) == sorted(decoded)
    if "properties" in node:
        assert list(node["properties"]) == list(answer_shape(task, abductive, fmt).keys)


@pytest.mark.parametrize("task, name, fmt", CASES)
def test_request_policy(task, name, fmt):
    abductive = _abductive(name)
    schema = schema_text(answer_schema(task, abductive, fmt))
    assert request_schema(task, name, fmt, constrained=False) is None
    constrained = request_schema(task, get_strategy(name), fmt, constrained=True)
    if fmt == "study":
        assert constrained == (None if abductive else schema)
    else:
        assert constrained == schema
    # every completion answer, comp's included, is one JSON value: the same policy as chat
    assert request_schema(task, name, fmt, constrained=True, prompt_form="completion") == constrained


# ----- the schema and the parser agree on what is well-formed ---------------------------------------

_SPAN = st.text(alphabet=st.sampled_from(list("ab Z9'é,.-:")), max_size=8)
_LEAF = st.one_of(
    st.lists(_SPAN, max_size=3),
    st.lists(st.one_of(_SPAN, st.integers(0, 9), st.none()), min_size=1, max_size=3),
    _SPAN,
    st.none(),
    st.integers(0, 3),
)


def _exact_object(keys: tuple[str, ...]):
    return st.fixed_dictionaries({key: (_SPAN if key == "text" else st.lists(_SPAN, max_size=3)) for key in keys})


def _near_object(keys: tuple[str, ...]):
    """Objects with some of the format's keys (plus strangers), with right and wrong values."""
    extra = ("spans", "answer", "timex", "events", "note")
    return st.dictionaries(
        st.sampled_from(tuple(dict.fromkeys(keys + extra))),
        st.one_of(st.lists(_SPAN, max_size=3), _LEAF),
        max_size=len(keys) + 1,
    ) | _exact_object(keys)


def _near_values(task, abductive, fmt):
    shape = answer_shape(task, abductive, fmt)
    keys = shape.keys or ("spans",)
    obj = _near_object(keys)
    return st.one_of(
        st.lists(_SPAN, max_size=4),
        st.lists(st.one_of(_SPAN, st.integers(0, 5)), min_size=1, max_size=3),
        obj,
        st.lists(obj, max_size=3),
        st.lists(_exact_object(keys), min_size=1, max_size=3),
    )


def _expected_predictions(value, task, abductive, fmt):
    shape = answer_shape(task, abductive, fmt)
    if shape.container == "array":
        return list(dict.fromkeys(s.strip() for s in value if s.strip()))
    objects = value if shape.container == "objects" else [value]
    if len(shape.span_keys) == 1:
        (key,) = shape.span_keys
        return list(dict.fromkeys(s.strip() for obj in objects for s in obj[key] if s.strip()))
    items = [
        (s.strip(), label) for obj in objects for key, label in shape.span_keys.items() for s in obj[key] if s.strip()
    ]
    return [{"text": text, "label": label} for text, label in dict.fromkeys(items)]


@pytest.mark.parametrize("task, abductive, fmt", SHAPES)
def test_well_formed_means_schema_valid(task, abductive, fmt):
    schema = answer_schema(task, abductive, fmt)
    seen = {True: 0, False: 0}

    @settings(max_examples=120, deadline=None, database=None, derandomize=True)
    @given(value=_near_values(task, abductive, fmt), indent=st.sampled_from([None, 2]), fenced=st.booleans())
    def check(value, indent, fenced):
        raw = json.dumps(value, indent=indent, ensure_ascii=False)
        if fenced:
            raw = "```json\n" + raw + "\n```"
        parsed = parse_answer(raw, task, abductive, answer_format=fmt)
        valid = is_valid(value, schema)
        seen[valid] += 1
        assert parsed.well_formed is valid, (raw, parsed)
        if valid:
            assert parsed.ok and parsed.error is None
            assert parsed.predictions == _expected_predictions(value, task, abductive, fmt)

    check()
    assert seen[True] > 0 and seen[False] > 0


@pytest.mark.parametrize("task, abductive, fmt", SHAPES)
def test_repaired_or_embedded_answers_are_not_well_formed(task, abductive, fmt):
    record_text = "Sales rose last week."
    from tests.helpers.records import make_record

    record = make_record("r", record_text, [("rose", "EVENT"), ("last week", "TIMEX")], doc_id="d")
    good = gold_answer(record, task, abductive, fmt)
    assert parse_answer(good, task, abductive, answer_format=fmt).well_formed
    for raw in (
        "Answer: " + good,
        good.replace('"', "'"),
        good[:-1] + ",]" if good.endswith("]") else good[:-1] + ",}",
    ):
        parsed = parse_answer(raw, task, abductive, answer_format=fmt)
        assert parsed.ok and not parsed.well_formed, raw


# ----- gold answers of real train records -----------------------------------------------------------


@pytest.mark.parametrize("task, abductive, fmt", SHAPES)
def test_gold_answers_of_train_records_validate_and_parse_back(task, abductive, fmt, prepared_data):
    schema = answer_schema(task, abductive, fmt)
    records = read_records(prepared_data / task / "train.jsonl")[:300]
    assert len(records) == 300
    for record in records:
        value = gold_value(record, task, abductive, fmt)
        assert is_valid(value, schema), (record.id, schema_errors(value, schema))
        raw = gold_answer(record, task, abductive, fmt)
        assert json.loads(raw) == value
        parsed = parse_answer(raw, task, abductive, answer_format=fmt)
        assert parsed.ok and parsed.well_formed, (record.id, parsed)
        spans = target_spans(record, task)
        if task == "comp":
            expected = list(
                dict.fromkeys((s.text, s.label) for label in ("TIMEX", "EVENT") for s in spans if s.label == label)
            )
            assert [(p["text"], p["label"]) for p in parsed.predictions] == [
                (t.strip(), label) for t, label in expected if t.strip()
            ]
        else:
            assert parsed.predictions == list(dict.fromkeys(s.text.strip() for s in spans if s.text.strip()))
        assert (parsed.reasoning_steps is not None) is abductive


def test_spans_restricted_to_the_inputs_word_ngrams():
    from src.prompts.answer_schema import input_spans, restrict_to_input

    text = 'Sales rose "sharply" last week.'
    spans = input_spans(text, 2)
    assert spans == ["Sales", "Sales rose", "rose", "sharply", "last", "last week", "week", "week.", "."]
    schema = restrict_to_input(answer_schema("timex", True, "compact"), text)
    props = schema["properties"]
    assert (
        props["spans"]["items"]["enum"][:2] == ["Sales", "Sales rose"]
        and "last week" in props["spans"]["items"]["enum"]
    )
    assert all('"' not in s for s in props["spans"]["items"]["enum"]), "quotes break llama.cpp grammar literals"
    assert "enum" not in props["reasoning_steps"]["items"], "reasoning stays free text"
    assert restrict_to_input(answer_schema("timex", False), "word " * 200) == answer_schema("timex", False)


def test_input_restricted_answers_are_bounded_so_a_loop_ends_inside_the_budget():
    import json

    from src.prompts.answer_schema import REASONING_MAX_CHARS, REASONING_MAX_STEPS, SPAN_MAX_ITEMS
    from src.study import TASK_LABELS

    text = "The talks resumed on Tuesday after the strike began last week."
    for task in ("timex", "eventx", "comp"):
        for name in ("I", "A"):
            schema = json.loads(request_schema(task, name, "compact", True, "completion", input_text=text))
            arrays = [node for node in _walk(schema) if node.get("type") == "array"]
            spans = [a for a in arrays if "enum" in a["items"]]
            bounds = [a["maxItems"] for a in spans]
            assert bounds == {"timex": [5], "eventx": [12], "comp": [5, 12]}[task]
            assert bounds == [SPAN_MAX_ITEMS[label] for label in TASK_LABELS[task]]
            reasoning = [a for a in arrays if "enum" not in a["items"]]
            assert len(reasoning) == (name == "A")
            assert all(
                a["maxItems"] == REASONING_MAX_STEPS and a["items"]["maxLength"] == REASONING_MAX_CHARS
                for a in reasoning
            )
    # unrestricted requests (API models, documents) keep the format's own schema
    plain = json.loads(request_schema("eventx", "A", "compact", True, "completion"))
    assert not any("maxItems" in node or "maxLength" in node for node in _walk(plain))


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_document_answers_get_no_enum_but_bounded_strings_and_reasoning():
    """Whole documents are too long for an n-gram enum; unbounded, the 135M model looped in
    its reasoning steps on 16 of 40 len documents (A+I), so they are bounded as for sentences."""
    import json

    from src.prompts.answer_schema import (
        DOCUMENT_SPAN_MAX_CHARS,
        REASONING_MAX_CHARS,
        REASONING_MAX_STEPS,
        SPAN_ENUM_MAX_WORDS,
    )

    document = " ".join(["The talks resumed on Tuesday ."] * (SPAN_ENUM_MAX_WORDS // 5))
    schema = json.loads(request_schema("timex", "A+I", "compact", True, "completion", input_text=document))
    props = schema["properties"]
    assert props["spans"]["items"] == {"type": "string", "maxLength": DOCUMENT_SPAN_MAX_CHARS}
    assert "maxItems" not in props["spans"], "documents hold up to 222 events: no list bound"
    assert props["reasoning_steps"]["maxItems"] == REASONING_MAX_STEPS
    assert props["reasoning_steps"]["items"]["maxLength"] == REASONING_MAX_CHARS
    plain = json.loads(request_schema("eventx", "I", "compact", True, "completion", input_text=document))
    assert plain["items"] == {"type": "string", "maxLength": DOCUMENT_SPAN_MAX_CHARS}
