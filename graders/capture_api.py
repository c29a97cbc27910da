"""The bulk capture endpoint: production logs (or a trainer's CaptureTarget,
graders/engine/capture_client.py) sent as JSON Lines, stored as captured groups all or
nothing (graders/capture.py).

    POST /api/p/<slug>/capture     Content-Type: application/x-ndjson (or application/jsonl)

Lines are FORMATS.md's task and response records; a response line may add `run`, `step`,
`reward` and `group`. A token with the `capture` scope is needed. Answers: 200 with what was
stored; 400 with every bad line and field, nothing stored; 413 past CAPTURE_MAX_BYTES."""

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from graders.capture import capture_log_store
from graders.models import TokenScope
from graders.reward_api import _token_api
from labeling.import_jobs import rejection_payload
from labeling.imports import ImportRejected


class CaptureLogTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The capture log is larger than {limit} bytes (CAPTURE_MAX_BYTES); send it in parts."
        )


class CaptureLogParser(BaseParser):
    """The body as bytes, refused past CAPTURE_MAX_BYTES before it is read (Content-Length)
    or while it is (a body without one)."""

    media_type = "application/x-ndjson"

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        limit = int(settings.CAPTURE_MAX_BYTES)
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise CaptureLogTooLarge(limit)
        body: bytes = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise CaptureLogTooLarge(limit)
        return body


class JsonlCaptureLogParser(CaptureLogParser):
    media_type = "application/jsonl"


@_token_api(TokenScope.CAPTURE, parsers=(CaptureLogParser, JsonlCaptureLogParser))
def capture_log(request: Request, slug: str) -> Response:
    token = request.auth
    try:
        report = capture_log_store(project=token.project, token=token, body=request.data)
    except ImportRejected as exc:
        return Response(rejection_payload(exc), status=status.HTTP_400_BAD_REQUEST)
    return Response(report.as_json())
