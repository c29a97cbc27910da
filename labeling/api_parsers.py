"""The API's request parsers."""

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json as drf_json

from labeling.json_input import json_parse


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser (strict: no NaN or Infinity) with json_parse's bound on nesting, so a
    deep body is a 400 naming the problem rather than a RecursionError."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding) if stream is not None else ""
            return json_parse(text, parse_constant=drf_json.strict_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
