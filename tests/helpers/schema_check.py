"""A validator for the JSON-schema subset ``src.prompts.answer_schema`` uses.

``jsonschema`` is not a dependency of the project; when it is installed the tests use it,
otherwise this small validator of exactly the keywords the answer schemas contain (type
object/array/string, properties, required, additionalProperties false, items, minItems).
Any other keyword is an error, so a schema that grows past the subset fails loudly.
"""

from __future__ import annotations

from typing import Any

_KNOWN = {"type", "properties", "required", "additionalProperties", "items", "minItems"}
_TYPES = {"object": dict, "array": list, "string": str}


def schema_errors(value: Any, schema: dict, where: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it validates)."""
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"{where}: schema keyword(s) outside the subset: {sorted(unknown)}")
    kind = _TYPES[schema["type"]]
    if not isinstance(value, kind) or isinstance(value, bool):
        return [f"{where}: expected {schema['type']}, got {type(value).__name__}"]
    errors: list[str] = []
    if kind is dict:
        properties = schema.get("properties", {})
        errors += [f"{where}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        if schema.get("additionalProperties", True) is False:
            errors += [f"{where}: unexpected {key!r}" for key in value if key not in properties]
        for key, inner in properties.items():
            if key in value:
                errors += schema_errors(value[key], inner, f"{where}.{key}")
    if kind is list:
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for index, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{where}[{index}]")
    return errors


def is_valid(value: Any, schema: dict) -> bool:
    """True when ``value`` validates; uses ``jsonschema`` as well when it is installed."""
    ours = not schema_errors(value, schema)
    try:
        import jsonschema
    except ImportError:
        return ours
    theirs = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert ours == theirs, (value, schema)
    return theirs
