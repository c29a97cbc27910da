"""Judge output: find the JSON object in what a model wrote, then hold it to the step's schema.

Models wrap JSON in code fences, put prose around it, or stop mid-object when they run out of
tokens. Extraction is lenient about the wrapping and strict about the object: it never completes a
truncated object and never reaches inside one, so a cut-off answer is a failure, not a score.

Validation covers the part of JSON Schema that judge steps use (listed in `_KEYWORDS`), plus two
extensions: `"x-clamp": true` on a number, which pulls an out-of-range value to the nearest
bound instead of rejecting it, and `"x-grid": true`, which marks an enum as a decoding hint for
servers that ignore minimum/maximum (any number in range is still accepted). Any other keyword
raises `SchemaUnsupported`, so a schema never looks stricter than what is actually checked.
"""

import json
import math
from typing import Any

# Keywords that constrain nothing: allowed anywhere, never checked.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "minimum",
        "maximum",
        "enum",
        "items",
        "minItems",
        "maxItems",
    }
)
_JSON_TYPES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "null": "null",
}


class OutputInvalid(ValueError):
    """The judge's JSON does not satisfy the schema; the message names the field and the rule."""


class SchemaUnsupported(ValueError):
    """The schema uses a keyword this validator does not check: a step definition bug."""


def extract_json_object(text: str) -> dict[str, Any] | None:
    """Return the first balanced {...} in `text` that parses as a JSON object, or None.

    Braces inside JSON strings do not count. A candidate that is balanced but not JSON (prose
    such as "{reason}") is skipped whole; an unbalanced one ends the search, because anything
    found inside a truncated object would be a fragment, not the answer.
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        # Fast path: the usual reply is the object alone.
        whole = _loads_object(stripped)
        if whole is not None:
            return whole
    start = text.find("{")
    while start != -1:
        end = _matching_brace_end(text, start)
        if end is None:
            return None
        candidate = _loads_object(text[start:end])
        if candidate is not None:
            return candidate
        start = text.find("{", end)
    return None


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _matching_brace_end(text: str, start: int) -> int | None:
    """Index just past the brace closing the one at `start`, or None if the text ends first."""
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def validate(obj: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Check `obj` against `schema` and return it, with x-clamp numbers pulled into range.

    Raises OutputInvalid with a message a person can act on, e.g.
    "score: 1.7 is above the maximum 1".
    """
    checked = _check(obj, schema, "")
    if not isinstance(checked, dict):
        raise OutputInvalid(f"output: expected an object, got {_describe(checked)}")
    return checked


def wire_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as sent to a provider: our "x-" extension keywords removed at every level,
    because strict structured-output modes reject keywords they do not know, and
    "additionalProperties": false on every object schema that does not say otherwise. Strict
    modes require it, and a grammar-constrained server (llama.cpp) that is not told lets a
    model add keys until it runs out of tokens: a 270M model gave invalid JSON on 20 of 20
    calls that way."""
    wire = {
        key: _without_extensions(value) for key, value in schema.items() if not _is_extension(key)
    }
    if _is_object_schema(wire):
        wire.setdefault("additionalProperties", False)
    return wire


def _is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or (kind is None and "properties" in schema)
    )


def _without_extensions(value: Any) -> Any:
    if isinstance(value, dict):
        return wire_schema(value)
    if isinstance(value, list):
        return [_without_extensions(item) for item in value]
    return value


def _is_extension(key: str) -> bool:
    return key.startswith("x-")


def _grid_accepts(value: Any, schema: dict[str, Any]) -> bool:
    """An `x-grid` enum steers decoding; the range, checked below, is the rule."""
    return schema.get("x-grid") is True and _is_number(value)


def _check(value: Any, schema: dict[str, Any], path: str) -> Any:
    _reject_unsupported(schema, path)
    if "type" in schema:
        value = _check_type(value, schema["type"], path)
    if "enum" in schema and value not in schema["enum"] and not _grid_accepts(value, schema):
        allowed = ", ".join(json.dumps(option) for option in schema["enum"])
        raise OutputInvalid(f"{_label(path)}: {json.dumps(value)} is not one of {allowed}")
    if _is_number(value):
        return _check_range(value, schema, path)
    if isinstance(value, dict):
        return _check_object(value, schema, path)
    if isinstance(value, list):
        return _check_array(value, schema, path)
    return value


def _reject_unsupported(schema: dict[str, Any], path: str) -> None:
    for key in schema:
        if key not in _KEYWORDS and key not in _ANNOTATIONS and not _is_extension(key):
            raise SchemaUnsupported(f"schema keyword {key!r} at {_label(path)} is not supported")


def _check_type(value: Any, expected: str | list[str], path: str) -> Any:
    """Return `value` if it has one of the expected types; a whole float counts as an integer."""
    names = [expected] if isinstance(expected, str) else expected
    for name in names:
        if name not in _JSON_TYPES:
            raise SchemaUnsupported(f"schema type {name!r} at {_label(path)} is not supported")
        if _has_type(value, name):
            if name == "integer" and isinstance(value, float):
                return int(value)
            return value
    wanted = " or ".join(_JSON_TYPES[name] for name in names)
    raise OutputInvalid(f"{_label(path)}: expected {wanted}, got {_describe(value)}")


def _has_type(value: Any, name: str) -> bool:
    match name:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "number":
            return _is_number(value)
        case _:  # integer
            if isinstance(value, float):
                return value.is_integer()
            return _is_number(value)


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python but not a number in JSON.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_range(value: float, schema: dict[str, Any], path: str) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise OutputInvalid(f"{_label(path)}: {value} is not a finite number")
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    clamp = schema.get("x-clamp") is True
    if minimum is not None and value < minimum:
        if not clamp:
            raise OutputInvalid(f"{_label(path)}: {value} is below the minimum {minimum}")
        return type(value)(minimum)
    if maximum is not None and value > maximum:
        if not clamp:
            raise OutputInvalid(f"{_label(path)}: {value} is above the maximum {maximum}")
        return type(value)(maximum)
    return value


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in value]
    if missing:
        raise OutputInvalid(f"{_label(path)}: missing required field {', '.join(missing)}")
    additional = schema.get("additionalProperties", True)
    checked: dict[str, Any] = {}
    for name, item in value.items():
        item_path = f"{path}.{name}" if path else name
        if name in properties:
            checked[name] = _check(item, properties[name], item_path)
        elif additional is False:
            allowed = ", ".join(properties) or "none"
            raise OutputInvalid(f"{_label(path)}: unexpected field {name!r} (allowed: {allowed})")
        elif isinstance(additional, dict):
            checked[name] = _check(item, additional, item_path)
        else:
            checked[name] = item
    return checked


def _check_array(value: list[Any], schema: dict[str, Any], path: str) -> list[Any]:
    min_items, max_items = schema.get("minItems"), schema.get("maxItems")
    if min_items is not None and len(value) < min_items:
        raise OutputInvalid(
            f"{_label(path)}: {len(value)} items, fewer than the minimum {min_items}"
        )
    if max_items is not None and len(value) > max_items:
        raise OutputInvalid(
            f"{_label(path)}: {len(value)} items, more than the maximum {max_items}"
        )
    items = schema.get("items")
    if items is None:
        return value
    return [_check(item, items, f"{path}[{index}]") for index, item in enumerate(value)]


def _label(path: str) -> str:
    return path or "output"


def _describe(value: Any) -> str:
    for name in ("null", "boolean", "object", "array", "string", "integer", "number"):
        if _has_type(value, name):
            return _JSON_TYPES[name]
    return type(value).__name__
