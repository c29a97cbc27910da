import math

import pytest

from graders.engine.jsonout import (
    OutputInvalid,
    SchemaUnsupported,
    extract_json_object,
    validate,
    wire_schema,
)

SCORE = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["score"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 0.5}', {"score": 0.5}),
        ('  \n{"score": 0.5}\n', {"score": 0.5}),
        ('```json\n{"score": 0.5}\n```', {"score": 0.5}),
        ('```\n{"score": 0.5}\n```\nThat is my grade.', {"score": 0.5}),
        ('Here is my verdict: {"score": 0.5} -- hope it helps!', {"score": 0.5}),
        (
            '{"reason": "uses {braces} and a \\"quoted }\\" part", "score": 1}',
            {"reason": 'uses {braces} and a "quoted }" part', "score": 1},
        ),
        ('{"outer": {"inner": [1, {"deep": true}]}}', {"outer": {"inner": [1, {"deep": True}]}}),
        ('First {"score": 0.1} then {"score": 0.9}', {"score": 0.1}),
        ('I weigh {reason} first. {"score": 0.7}', {"score": 0.7}),
        ('[1, 2] {"score": 0.3}', {"score": 0.3}),
    ],
    ids=[
        "bare",
        "whitespace",
        "json-fence",
        "fence-then-prose",
        "prose-around",
        "braces-in-strings",
        "nested",
        "first-of-two",
        "skips-non-json-braces",
        "skips-array",
    ],
)
def test_extract_finds_the_first_json_object(text: str, expected: dict[str, object]) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The response is good.",
        '{"score": 0.9, "reason": "cut off',
        '{"criteria": [{"name": "a", "score": 1}, {"name": "b", "sc',
        "{'score': 0.5}",
        "[1, 2, 3]",
    ],
    ids=[
        "empty",
        "prose",
        "truncated",
        "truncated-with-complete-inner-object",
        "python-dict",
        "array-only",
    ],
)
def test_extract_returns_none_without_a_whole_object(text: str) -> None:
    assert extract_json_object(text) is None


def test_validate_returns_a_valid_object_unchanged() -> None:
    assert validate({"score": 0.25, "reason": "ok"}, SCORE) == {"score": 0.25, "reason": "ok"}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"score": 1.7}, "score: 1.7 is above the maximum 1"),
        ({"score": -0.5}, "score: -0.5 is below the minimum 0"),
        ({"reason": "fine"}, "output: missing required field score"),
        ({"score": "high"}, "score: expected a number, got a string"),
        ({"score": True}, "score: expected a number, got a boolean"),
        ({"score": math.nan}, "score: nan is not a finite number"),
        (
            {"score": 0.5, "confidence": 0.9},
            "output: unexpected field 'confidence' (allowed: score, reason)",
        ),
    ],
)
def test_validate_rejects_with_a_message_naming_field_and_rule(
    obj: dict[str, object], message: str
) -> None:
    with pytest.raises(OutputInvalid) as raised:
        validate(obj, SCORE)
    assert str(raised.value) == message


def test_clamp_flag_pulls_numbers_into_range_instead_of_rejecting() -> None:
    schema = {
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1, "x-clamp": True}},
    }
    assert validate({"score": 1.7}, schema) == {"score": 1.0}
    assert validate({"score": -3}, schema) == {"score": 0}


def test_integer_accepts_whole_floats_and_rejects_fractions() -> None:
    schema = {
        "type": "object",
        "properties": {"rank": {"type": "integer", "minimum": 1, "maximum": 5}},
    }
    assert validate({"rank": 3.0}, schema) == {"rank": 3}
    with pytest.raises(OutputInvalid, match=r"rank: expected an integer, got a number"):
        validate({"rank": 2.5}, schema)


def test_enum_boolean_and_nullable_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["pass", "fail"]},
            "pass": {"type": "boolean"},
            "note": {"type": ["string", "null"]},
        },
    }
    assert validate({"verdict": "pass", "pass": True, "note": None}, schema)["note"] is None
    with pytest.raises(OutputInvalid, match=r'verdict: "maybe" is not one of "pass", "fail"'):
        validate({"verdict": "maybe"}, schema)
    with pytest.raises(OutputInvalid, match=r"note: expected a string or null, got a number"):
        validate({"note": 3.5}, schema)


def test_arrays_of_strings_and_objects_with_item_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "quotes": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "criteria": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"score": {"type": "number", "maximum": 1}},
                    "required": ["score"],
                },
            },
        },
    }
    assert validate({"quotes": ["a"], "criteria": [{"score": 1}]}, schema) == {
        "quotes": ["a"],
        "criteria": [{"score": 1}],
    }
    with pytest.raises(OutputInvalid, match=r"quotes: 3 items, more than the maximum 2"):
        validate({"quotes": ["a", "b", "c"]}, schema)
    with pytest.raises(OutputInvalid, match=r"quotes\[1\]: expected a string, got an integer"):
        validate({"quotes": ["a", 2]}, schema)
    with pytest.raises(OutputInvalid, match=r"criteria\[1\].score: 2 is above the maximum 1"):
        validate({"criteria": [{"score": 0}, {"score": 2}]}, schema)


def test_unsupported_keyword_is_a_schema_error_not_an_output_error() -> None:
    schema = {"type": "object", "properties": {"reason": {"type": "string", "pattern": "^[a-z]+$"}}}
    with pytest.raises(SchemaUnsupported, match=r"'pattern' at reason"):
        validate({"reason": "ok"}, schema)


def test_wire_schema_drops_extension_keywords_at_every_level() -> None:
    schema = {
        "type": "object",
        "x-note": "ours",
        "properties": {
            "score": {"type": "number", "x-clamp": True},
            "tags": {"type": "array", "items": {"type": "string", "x-y": 1}},
        },
    }
    assert wire_schema(schema) == {
        "type": "object",
        "properties": {
            "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": False,
    }


def test_wire_schema_closes_every_object_that_does_not_say_otherwise() -> None:
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": ["object", "null"], "properties": {"why": {"type": "string"}}},
            "items": {"type": "array", "items": {"properties": {"id": {"type": "string"}}}},
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
        },
    }
    wire = wire_schema(schema)
    assert wire["additionalProperties"] is False
    assert wire["properties"]["verdict"]["additionalProperties"] is False
    assert wire["properties"]["items"]["items"]["additionalProperties"] is False
    # A schema that says what its extra keys hold keeps it.
    assert wire["properties"]["extra"]["additionalProperties"] == {"type": "number"}
    assert "additionalProperties" not in schema  # the caller's schema is not changed
