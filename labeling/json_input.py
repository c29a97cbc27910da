"""Parsing JSON that arrives from outside (import lines, API bodies, uploaded bundles) with a
bound on nesting.

Python's json module recurses once per level, so a body of 100,000 "[" raises RecursionError,
which no caller expects (a 500); and a value a few hundred levels deep parses, then may crash
the code that walks it. No record of FORMATS.md needs more than a dozen levels, so anything
deeper than MAX_JSON_DEPTH is refused with an error that says so. Text with at most
MAX_JSON_DEPTH opening brackets cannot nest deeper, so most input costs two counts and no walk.
"""

import json
from typing import Any

MAX_JSON_DEPTH = 100
_CONTAINERS = (dict, list)


class JsonTooDeep(ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH levels."""

    def __init__(self) -> None:
        super().__init__(f"nesting deeper than {MAX_JSON_DEPTH} levels")


def json_parse(data: str | bytes, **options: Any) -> Any:
    """`json.loads(data, **options)` for untrusted input: also raises JsonTooDeep, a ValueError
    as json.JSONDecodeError is, instead of RecursionError or a value too deep to use."""
    try:
        value = json.loads(data, **options)
    except RecursionError:
        raise JsonTooDeep from None
    if _openings(data) > MAX_JSON_DEPTH:
        json_depth_check(value)
    return value


def _openings(data: str | bytes) -> int:
    if isinstance(data, bytes):
        return data.count(b"[") + data.count(b"{")
    return data.count("[") + data.count("{")


def json_depth_check(value: Any) -> None:
    """Raise JsonTooDeep if `value`, parsed JSON, nests deeper than MAX_JSON_DEPTH ("[]" is one
    level). Walks level by level, without recursion."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise JsonTooDeep
        level = [
            item
            for container in level
            for item in (container.values() if type(container) is dict else container)
            if type(item) in _CONTAINERS  # exact types: json.loads makes no subclasses
        ]
