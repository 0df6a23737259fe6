"""SchemaCursor: the text an object schema fixes, and list budgets (no model needed)."""

from __future__ import annotations

import json

import pytest

from src.backends.forced import SchemaCursor, object_keys
from src.prompts.answer_schema import answer_schema, request_schema, schema_text


def _cursor(budget: int | None = None) -> SchemaCursor:
    return SchemaCursor(["reasoning_steps", "spans"], {"reasoning_steps": budget} if budget else None)


def _feed(cursor: SchemaCursor, pieces: list[str]) -> list[str]:
    """What the cursor forces after each piece (the forced text is fed back, as the backend does)."""
    forced = []
    for piece in pieces:
        cursor.feed(piece)
        text = cursor.forced()
        if text:
            cursor.feed(text, tokens=2)
        forced.append(text)
    return forced


def test_object_keys_only_for_objects_whose_keys_are_all_required():
    assert object_keys(request_schema("timex", "A", "compact", True)) == ["reasoning_steps", "spans"]
    assert object_keys(request_schema("comp", "I", "compact", True)) == ["timex", "eventx"]
    assert object_keys(request_schema("timex", "I", "compact", True)) is None  # an array
    assert object_keys(None) is None
    optional = answer_schema("comp", False)
    optional["required"] = ["timex"]
    assert object_keys(schema_text(optional)) is None
    loose = answer_schema("comp", False)
    del loose["additionalProperties"]
    assert object_keys(json.dumps(loose)) is None


def test_the_fixed_text_is_forced_after_the_models_first_token_of_it():
    cursor = _cursor()
    forced = _feed(cursor, [" ", '{"', ' ["', "Friday", '"]', ",", ' ["', "Friday", '"]'])
    assert forced == ["", 'reasoning_steps":', "", "", "", ' "spans":', "", "", ""]
    assert cursor.complete_but_closing


def test_nothing_is_forced_where_the_model_goes_its_own_way():
    cursor = _cursor()
    assert _feed(cursor, ['{"', "reason", 'ing_steps" :']) == ['reasoning_steps":', "", ""]
    cursor = _cursor()
    assert _feed(cursor, ['{"reasoning_steps":', " []", ',"']) == ["", "", ""]  # not ', "'
    assert not cursor.complete_but_closing


@pytest.mark.parametrize(
    ("pieces", "budget", "closing"),
    [
        (['{"reasoning_steps":', ' ["', "1", ".", " 2", "."], 4, '"]'),  # inside a step
        (['{"reasoning_steps":', ' ["', "a", '",', ' "', "b"], 4, '"]'),  # inside the second step
        (['{"reasoning_steps":', ' ["', "abc", '"'], 2, "]"),  # after a complete step
    ],
)
def test_a_list_that_has_spent_its_budget_is_closed(pieces, budget, closing):
    """The token that opens the list is not counted; every token inside it is."""
    cursor = SchemaCursor(["reasoning_steps", "spans"], {"reasoning_steps": budget}, prefill=False)
    forced = _feed(cursor, pieces)
    assert forced[-1] == closing and not any(forced[:-1])
    assert not cursor.complete_but_closing  # prefill off: the model writes the rest itself


def test_after_a_comma_the_budget_waits_for_the_next_item_to_open():
    cursor = SchemaCursor(["reasoning_steps", "spans"], {"reasoning_steps": 2}, prefill=False)
    assert _feed(cursor, ['{"reasoning_steps":', ' ["', "a", '",']) == ["", "", "", ""]
    assert _feed(cursor, [' "']) == ['"]']


def test_budgets_apply_only_to_their_list():
    cursor = SchemaCursor(["reasoning_steps", "spans"], {"reasoning_steps": 50})
    forced = _feed(cursor, ['{"', " []", ",", ' ["', *["a"] * 60])
    assert forced[:3] == ['reasoning_steps":', "", ' "spans":']
    assert not any(forced[3:])  # the spans list has no budget
