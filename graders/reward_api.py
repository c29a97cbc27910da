"""The HTTP reward API: training jobs send a group of responses to a task and get rewards.

Two shapes, one grading path:

- `POST /api/p/<slug>/graders/<id>/reward` (or `.../graders/selected/<kind>/reward`, the
  project's selected grader of a kind): a task (a stored task's id, or the task itself) and up
  to MAX_RESPONSES responses; returns one reward per response, with per-criterion detail on
  request.
- `POST /api/p/<slug>/graders/<id>/get_reward` (and `.../selected/<kind>/get_reward`):
  OpenRLHF's remote reward model protocol, {"query", "prompts", "labels"} in and
  {"rewards", ...} out, with the same semantics as the OpenRLHF adapter of the Python runtime
  (graders/engine/trainers/).
- `.../graders/alias/<name>/reward` and `.../alias/<name>/get_reward`: the version an alias
  points at now (graders/aliases.py), so a promotion reaches the trainer's next request.

Every answer names the grader version's content hash, in the body ("grader") and in the
X-Grader-Version header, so a trainer can log which version gave each reward.

Both authenticate with a project token (graders/tokens.py) that holds the `reward` scope, and
grade as an exported bundle would (graders/reward_grading.py). What a request writes (the
judge's new answers, the usage count, the groups drawn for capture: graders/capture.py) is
written once its answer is sent. Optional `run` and `step` name the training run and step,
kept with captured groups.

Limits: the body (REWARD_API_MAX_BYTES, 413), responses per request (400), and the sizes of
every text, the same as the JSONL import's (FORMATS.md). Every error is JSON: {"detail": ...}
or field errors keyed by the field's name."""

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import Http404
from django.urls import include, path
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
)
from drf_spectacular.views import SpectacularAPIView
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import json as drf_json

from graders.aliases import ALIAS_NAME
from graders.capture import get_reward_capture, reward_capture
from graders.engine.programs import KINDS
from graders.engine.runtime import GradeResult
from graders.models import ApiToken, GraderAlias, GraderSelection, Metagrader, TokenScope
from graders.reward_gather import GATHER_PARAMETERS, GatherIn, get_reward_answer
from graders.reward_grading import (
    OPENRLHF_FAILURE_REWARD,
    RequestJudgeCache,
    reward_record,
    reward_score,
)
from graders.sql_rows import Columns
from graders.tokens import ApiTokenAuthentication, TokenRateThrottle, scope_required
from labeling.json_input import json_parse
from labeling.records import (
    MAX_DOCUMENT_TEXT,
    MAX_DOCUMENTS,
    MAX_ID,
    MAX_MESSAGES,
    MAX_PROMPT,
    MAX_RESPONSE_TEXT,
)

_log = logging.getLogger(__name__)

MAX_RESPONSES = 64  # one group: a task's rollouts in one training step
MAX_QUERIES = 1024  # an OpenRLHF batch, which holds many groups
MAX_TOOL_CALLS = 100
# Beyond this, ids cannot name a row in any database we run on; they get 404, not a crash.
MAX_ROW_ID = 2**63 - 1
# Every answer carries the grader version's content hash here too, for clients that log
# headers but not bodies.
VERSION_HEADER = "X-Grader-Version"


def reward_max_bytes() -> int:
    return int(settings.REWARD_API_MAX_BYTES)


# Errors and parsing -------------------------------------------------------------------------


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The request body is larger than {limit} bytes (REWARD_API_MAX_BYTES); send "
            "fewer responses per request."
        )


class LimitedJSONParser(BaseParser):
    """JSON with a size limit checked before anything is read (Content-Length) and while
    reading (a body without one), so an oversized body costs neither memory nor parse time.

    Not a JSONParser subclass on purpose: DRF reads the whole body into memory for those
    before parsing, and past DATA_UPLOAD_MAX_MEMORY_SIZE Django then answers with an HTML
    400 page instead of this API's JSON 413."""

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = reward_max_bytes()
        context = parser_context or {}
        request = context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(limit)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise PayloadTooLarge(limit)
        try:
            text = body.decode(context.get("encoding", settings.DEFAULT_CHARSET))
            # NaN and Infinity are not JSON; DRF's strict mode refuses them the same way.
            return json_parse(text, parse_constant=drf_json.strict_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


# Request and response shapes ------------------------------------------------------------------


class Text(serializers.CharField):
    """Text kept exactly as sent (no trimming: a response is graded as written), refusing
    what cannot be encoded as UTF-8 (lone surrogates) with an error naming the field."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("surrogate")
        return value

    default_error_messages = {"surrogate": "Not valid text: it holds an unpaired surrogate."}


@extend_schema_field(
    {
        "oneOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}],
        "description": "The call's arguments: a JSON object, or a string as some APIs send.",
    }
)
class ToolArguments(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict | str):
            raise serializers.ValidationError("Expected a JSON object or a string.")
        try:
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (ValueError, UnicodeEncodeError):
            raise serializers.ValidationError(
                "Arguments must be plain JSON: no NaN, infinity or unpaired surrogates."
            ) from None
        return value


class RunName(Text):
    """A training run's name: a string, never a number turned into one."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StepNumber(serializers.IntegerField):
    """A training step: a JSON integer (not a string, a float or a boolean), 0 or more."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(min_value=0, max_value=MAX_ROW_ID, **kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class RunStepIn(serializers.Serializer):
    """What both request shapes may say of the training that sent them (graders/capture.py)."""

    run = RunName(
        required=False,
        min_length=1,
        max_length=200,
        help_text="The training run's name, kept with the groups captured from it.",
    )
    step = StepNumber(required=False, help_text="The training step, kept with captured groups.")


class DocumentIn(serializers.Serializer):
    id = Text(required=False, min_length=1, max_length=MAX_ID)
    title = Text(required=False, allow_blank=True, max_length=500, default="")
    text = Text(allow_blank=True, max_length=MAX_DOCUMENT_TEXT)


class TaskIn(serializers.Serializer):
    prompt = Text(max_length=MAX_PROMPT)
    instructions = Text(required=False, allow_blank=True, max_length=MAX_PROMPT, default="")
    documents = serializers.ListField(
        child=DocumentIn(), required=False, max_length=MAX_DOCUMENTS, default=list
    )


class ToolCallIn(serializers.Serializer):
    id = Text(required=False, allow_null=True, max_length=MAX_ID)
    name = Text(max_length=200)
    arguments = ToolArguments(required=False, default=dict)


class MessageIn(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant", "tool"])
    content = Text(required=False, allow_null=True, allow_blank=True, max_length=MAX_RESPONSE_TEXT)
    name = Text(required=False, allow_null=True, max_length=200)
    tool_calls = serializers.ListField(
        child=ToolCallIn(), required=False, allow_null=True, max_length=MAX_TOOL_CALLS
    )
    tool_call_id = Text(required=False, allow_null=True, max_length=MAX_ID)


class ResponseIn(serializers.Serializer):
    id = Text(
        required=False,
        min_length=1,
        max_length=MAX_ID,
        help_text="Your id for the response, echoed in its result; default: its position.",
    )
    content = Text(
        required=False,
        allow_blank=True,
        max_length=MAX_RESPONSE_TEXT,
        help_text="The response as text. Give exactly one of content or messages.",
    )
    messages = serializers.ListField(
        child=MessageIn(),
        required=False,
        min_length=1,
        max_length=MAX_MESSAGES,
        help_text="The response as an agent trajectory: chat messages with tool calls.",
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if ("content" in data) == ("messages" in data):
            raise serializers.ValidationError(
                {"content": "Give exactly one of 'content' (text) or 'messages'."}
            )
        return data


class RewardIn(RunStepIn):
    task_id = Text(
        required=False,
        min_length=1,
        max_length=MAX_ID,
        help_text="A task of the project, by its id: its documents and stored rubric are used.",
    )
    task = TaskIn(required=False, help_text="The task itself, for a task the project lacks.")
    responses = serializers.ListField(child=ResponseIn(), min_length=1, max_length=MAX_RESPONSES)
    detail = serializers.BooleanField(
        default=False, help_text="Add each response's per-criterion results."
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        if ("task_id" in data) == ("task" in data):
            raise serializers.ValidationError({"task": "Give exactly one of 'task_id' or 'task'."})
        ids = [item.get("id", str(index)) for index, item in enumerate(data["responses"])]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError(
                {"responses": "Response ids must be unique within a request."}
            )
        return data


class LabelTaskIn(serializers.Serializer):
    task_id = Text(required=False, max_length=MAX_ID)
    prompt = Text(required=False, max_length=MAX_PROMPT)
    instructions = Text(required=False, allow_blank=True, max_length=MAX_PROMPT)
    documents = serializers.ListField(child=DocumentIn(), required=False, max_length=MAX_DOCUMENTS)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "maxLength": MAX_PROMPT},
            {"type": "number"},
            {
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "minLength": 1, "maxLength": MAX_ID},
                    "prompt": {"type": "string", "minLength": 1, "maxLength": MAX_PROMPT},
                    "instructions": {"type": "string", "maxLength": MAX_PROMPT},
                    "documents": {
                        "type": "array",
                        "maxItems": MAX_DOCUMENTS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "minLength": 1, "maxLength": MAX_ID},
                                "title": {"type": "string", "maxLength": 500},
                                "text": {"type": "string", "maxLength": MAX_DOCUMENT_TEXT},
                            },
                            "required": ["text"],
                        },
                    },
                },
            },
        ],
        "nullable": True,
        "description": "A task id of the project, or an object naming the task; any other "
        "label (a reference answer) is ignored: the judge never sees it.",
    }
)
class LabelField(serializers.Field):
    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            task = LabelTaskIn(data=data)
            task.is_valid(raise_exception=True)
            return dict(task.validated_data)
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            raise serializers.ValidationError("Expected a string, a number, null or an object.")
        return Text(max_length=MAX_PROMPT).run_validation(str(data))

    def to_representation(self, value: Any) -> Any:
        return value


class GetRewardIn(RunStepIn):
    query = serializers.ListField(
        child=Text(allow_blank=True, max_length=MAX_PROMPT + MAX_RESPONSE_TEXT),
        min_length=1,
        max_length=MAX_QUERIES,
        help_text="Each prompt followed by its response, as the policy's chat template wrote it.",
    )
    prompts = serializers.ListField(
        child=Text(allow_blank=True, max_length=MAX_PROMPT),
        max_length=MAX_QUERIES,
        help_text="The prompt of each query; the response is the query after it.",
    )
    labels = serializers.ListField(
        child=LabelField(allow_null=True),
        required=False,
        max_length=MAX_QUERIES,
        help_text="Per query: a task id, or an object with task_id or prompt, documents and "
        "instructions. Absent or unknown: the task is the prompt text.",
    )

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        size = len(data["query"])
        if len(data["prompts"]) != size:
            raise serializers.ValidationError(
                {"prompts": f"Expected {size} prompts, one per query; got {len(data['prompts'])}."}
            )
        labels = data.setdefault("labels", [None] * size)
        if len(labels) != size:
            raise serializers.ValidationError(
                {"labels": f"Expected {size} labels, one per query; got {len(labels)}."}
            )
        for row, (query, prompt) in enumerate(zip(data["query"], data["prompts"], strict=True)):
            if not query.startswith(prompt):
                problem = (
                    "Does not start with its prompt, so the response cannot be cut out of it. "
                    "Was the prompt truncated to fit the maximum prompt length?"
                )
                raise serializers.ValidationError({"query": {row: [problem]}})
        return data


class GraderOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    content_hash = serializers.CharField()


class CriterionOut(serializers.Serializer):
    id = serializers.CharField()
    text = serializers.CharField()
    weight = serializers.FloatField()
    passed = serializers.BooleanField(allow_null=True)
    error = serializers.CharField(allow_null=True)


class ResultOut(serializers.Serializer):
    id = serializers.CharField()
    reward = serializers.FloatField(allow_null=True)
    error = serializers.CharField(allow_null=True, help_text="Why reward is null.")
    criteria = CriterionOut(many=True, required=False, help_text="Only with detail: true.")


class RewardOut(serializers.Serializer):
    grader = GraderOut()
    rewards = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        help_text="One per response, in order; null when grading it failed.",
    )
    results = ResultOut(many=True)


class ExtraLogsOut(serializers.Serializer):
    grader_failed = serializers.ListField(
        child=serializers.FloatField(), help_text="1.0 where grading failed, else 0.0."
    )
    group_incomplete = serializers.ListField(
        child=serializers.FloatField(),
        required=False,
        help_text="With group_size only: 1.0 where the sample's group was graded before it "
        "filled (wait_s ran out).",
    )


class GetRewardOut(serializers.Serializer):
    grader = GraderOut(help_text="The grader version that answered; OpenRLHF ignores it.")
    rewards = serializers.ListField(
        child=serializers.FloatField(),
        help_text=f"One per query; a failed grade is {OPENRLHF_FAILURE_REWARD}.",
    )
    scores = serializers.ListField(child=serializers.FloatField())
    extra_logs = ExtraLogsOut()


class ErrorOut(serializers.Serializer):
    detail = serializers.CharField()


def _results_json(results: Sequence[GradeResult], detail: bool) -> list[dict[str, Any]]:
    rows = []
    for result in results:
        row: dict[str, Any] = {"id": result.response_id, "reward": result.reward}
        row["error"] = result.error
        if detail:
            row["criteria"] = [
                {
                    "id": c.criterion.id,
                    "text": c.criterion.text,
                    "weight": c.criterion.weight,
                    "passed": c.passed,
                    "error": c.error,
                }
                for c in result.grade.criteria
            ]
        rows.append(row)
    return rows


# Views --------------------------------------------------------------------------------------


def _token_api(scope: str, parsers: Sequence[type[BaseParser]] = (LimitedJSONParser,)) -> Any:
    """A POST view of the token API: project tokens only (no sessions, so no CSRF), the
    token's project and scope, its rate limit, and bodies read by `parsers` (JSON within the
    size limit unless told otherwise)."""

    def decorate(function: Any) -> Any:
        function.authentication_classes = [ApiTokenAuthentication]
        function.permission_classes = [scope_required(scope)]
        function.throttle_classes = [TokenRateThrottle]
        function.parser_classes = list(parsers)
        # drf-spectacular's schema class on the view, and where @extend_schema looks for it:
        # the project's DEFAULT_SCHEMA_CLASS stays DRF's own.
        function.schema = AutoSchema()
        view = api_view(["POST"])(function)
        view.schema = function.schema
        return view

    return decorate


# The program loads only when its parse is not cached already (_program_load).
_GRADER = Columns(Metagrader, "m", defer=["program"])


def _grader_by_id(token: ApiToken, grader_id: int) -> Metagrader:
    missing = "No such grader in this project."
    if grader_id > MAX_ROW_ID:
        raise Http404(missing)
    where = "WHERE m.id = %s AND m.project_id = %s"
    return _grader_found(token, where, [grader_id, token.project_id], missing)


def _grader_selected(token: ApiToken, kind: str) -> Metagrader:
    """The project's newest selection of `kind`, as graders.services.grader_selected reads it."""
    missing = f"No {kind} grader is selected in this project."
    if kind not in KINDS:
        raise Http404(missing)
    where = (
        f"JOIN {GraderSelection._meta.db_table} s ON s.metagrader_id = m.id"
        " WHERE s.project_id = %s AND s.kind = %s ORDER BY s.version DESC LIMIT 1"
    )
    return _grader_found(token, where, [token.project_id, kind], missing)


def _grader_aliased(token: ApiToken, name: str) -> Metagrader:
    """The version the project's alias `name` points at now (graders.aliases.alias_resolve)."""
    missing = f"No alias {name[:60]!r} in this project."
    if not ALIAS_NAME.fullmatch(name):
        raise Http404(missing)
    where = (
        f"JOIN {GraderAlias._meta.db_table} a ON a.metagrader_id = m.id"
        " WHERE a.project_id = %s AND a.name = %s"
    )
    return _grader_found(token, where, [token.project_id, name], missing)


def _grader_found(token: ApiToken, where: str, params: list[Any], missing: str) -> Metagrader:
    """The grader `where` finds, with the token's project; 404 saying `missing` if none."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_GRADER.sql} FROM {Metagrader._meta.db_table} m {where}", params)
        row = cursor.fetchone()
    if row is None:
        raise Http404(missing)
    metagrader = _GRADER.build(row)
    metagrader.project = token.project
    return metagrader


class RecordedResponse(Response):
    """A response whose bookkeeping runs once it is sent: WSGI and ASGI servers (and Django's
    test client) call close() after the last byte, so a training job does not wait for the
    writes (bench/reward_api.py: 3 to 4 ms per request). The answer has gone by then, so a
    failure there is logged; what it loses is a usage count and cache entries that a later
    request pays one judge call to make again."""

    def __init__(
        self,
        data: Any,
        record: Callable[[], None],
        capture: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(data)
        self._record = record
        self._capture = capture

    def close(self) -> None:
        try:
            self._record()
        except Exception:
            _log.exception("storing a reward request's judge answers and usage failed")
        try:
            if self._capture is not None:
                self._capture()
        except Exception:
            _log.exception("capturing a reward request's groups failed")
        finally:
            super().close()


def _reward_respond(request: Request, metagrader: Metagrader) -> Response:
    data = RewardIn(data=request.data)
    data.is_valid(raise_exception=True)
    results, answers = reward_score(metagrader=metagrader, data=data.validated_data)
    body = {
        "grader": _grader_json(metagrader),
        "rewards": [result.reward for result in results],
        "results": _results_json(results, data.validated_data["detail"]),
    }
    capture = reward_capture(
        token=request.auth, metagrader=metagrader, data=data.validated_data, rewards=body["rewards"]
    )
    return _answered(request, metagrader, body, answers, len(results), capture)


def _get_reward_respond(request: Request, metagrader: Metagrader) -> Response:
    data = GetRewardIn(data=request.data)
    data.is_valid(raise_exception=True)
    options = GatherIn(data=request.query_params)
    options.is_valid(raise_exception=True)
    answer = get_reward_answer(
        metagrader=metagrader,
        token=request.auth,
        data=data.validated_data,
        options=options.validated_data,
    )
    body = {"grader": _grader_json(metagrader), **answer.payload}
    capture = None
    if answer.graded is not None:  # the group this request graded
        group, payload = answer.graded
        capture = get_reward_capture(
            token=request.auth, metagrader=metagrader, data=group, payload=payload
        )
    rows = len(answer.payload["rewards"])
    return _answered(request, metagrader, body, answer.answers, rows, capture)


def _grader_json(metagrader: Metagrader) -> dict[str, Any]:
    return {"id": metagrader.pk, "name": metagrader.name, "content_hash": metagrader.content_hash}


def _answered(
    request: Request,
    metagrader: Metagrader,
    body: Any,
    answers: RequestJudgeCache | None,
    responses: int,
    capture: Callable[[], None] | None = None,
) -> RecordedResponse:
    """`body`, with the version's hash in VERSION_HEADER, and the request's judge answers,
    usage and captured groups written once it is sent."""
    record = partial(
        reward_record,
        answers=answers,
        metagrader=metagrader,
        token=request.auth,
        responses=responses,
    )
    response = RecordedResponse(body, record, capture)
    response[VERSION_HEADER] = metagrader.content_hash
    return response


ERRORS = {
    400: ErrorOut,  # or field errors: {"<field>": ["..."]}, nested for nested fields
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    415: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
    504: ErrorOut,
}
ERROR_RESPONSES: dict[int | str, Any] = {
    400: OpenApiTypes.OBJECT,
    **{code: shape for code, shape in ERRORS.items() if code != 400},
}
KIND_PARAMETER = OpenApiParameter(
    "kind", OpenApiTypes.STR, OpenApiParameter.PATH, enum=list(KINDS),
    description="The kind of the project's selected grader to use.",
)  # fmt: skip
ALIAS_PARAMETER = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=f"^{ALIAS_NAME.pattern}$",
    description="An alias of the project (production, staging, ...): the grader version it "
    "points at now.",
)  # fmt: skip
VERSION_PARAMETER = OpenApiParameter(
    VERSION_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, response=[200],
    description="The content hash of the grader version that answered, as in grader.content_hash.",
)  # fmt: skip
REWARD_EXAMPLE = OpenApiExample(
    "A stored task",
    value={
        "task_id": "t1",
        "responses": [
            {"id": "r1", "content": "The cap is 10% of the price (clause 4)."},
            {"id": "r2", "content": "There is no cap."},
        ],
    },
    request_only=True,
)
REWARD_DOC = (
    "Grade a group of responses to one task. Scalar and rubric graders reward each response "
    "on its own; pairwise graders give each its win rate against the others, so send all of "
    "a task's rollouts together. A failed grade has reward null and an error."
)
GET_REWARD_DOC = (
    "OpenRLHF's remote reward model protocol (--remote_rm_url). Each query is its prompt "
    "followed by the response; queries are grouped by task for pairwise graders. A failed "
    "grade is 0.0, marked in extra_logs.grader_failed. Special-token text (<|im_end|>, ...) is "
    "taken out of responses. With group_size, samples of a prompt sent one per request are "
    "gathered and graded as one group."
)


@extend_schema(
    operation_id="reward",
    summary="Rewards for a group of responses",
    description=REWARD_DOC,
    parameters=[VERSION_PARAMETER],
    request=RewardIn,
    responses={200: RewardOut, **ERROR_RESPONSES},
    examples=[REWARD_EXAMPLE],
    tags=["reward"],
)
@_token_api(TokenScope.REWARD)
def reward(request: Request, slug: str, grader_id: int) -> Response:
    return _reward_respond(request, _grader_by_id(request.auth, grader_id))


@extend_schema(
    operation_id="reward_selected",
    summary="Rewards from the project's selected grader of a kind",
    description=REWARD_DOC,
    parameters=[KIND_PARAMETER, VERSION_PARAMETER],
    request=RewardIn,
    responses={200: RewardOut, **ERROR_RESPONSES},
    tags=["reward"],
)
@_token_api(TokenScope.REWARD)
def reward_selected(request: Request, slug: str, kind: str) -> Response:
    return _reward_respond(request, _grader_selected(request.auth, kind))


@extend_schema(
    operation_id="get_reward",
    summary="OpenRLHF remote reward model",
    description=GET_REWARD_DOC,
    parameters=[VERSION_PARAMETER, *GATHER_PARAMETERS],
    request=GetRewardIn,
    responses={200: GetRewardOut, **ERROR_RESPONSES},
    tags=["openrlhf"],
)
@_token_api(TokenScope.REWARD)
def get_reward(request: Request, slug: str, grader_id: int) -> Response:
    return _get_reward_respond(request, _grader_by_id(request.auth, grader_id))


@extend_schema(
    operation_id="get_reward_selected",
    summary="OpenRLHF remote reward model, with the project's selected grader of a kind",
    description=GET_REWARD_DOC,
    parameters=[KIND_PARAMETER, VERSION_PARAMETER, *GATHER_PARAMETERS],
    request=GetRewardIn,
    responses={200: GetRewardOut, **ERROR_RESPONSES},
    tags=["openrlhf"],
)
@_token_api(TokenScope.REWARD)
def get_reward_selected(request: Request, slug: str, kind: str) -> Response:
    return _get_reward_respond(request, _grader_selected(request.auth, kind))


@extend_schema(
    operation_id="reward_alias",
    summary="Rewards from the grader an alias points at",
    description=REWARD_DOC,
    parameters=[ALIAS_PARAMETER, VERSION_PARAMETER],
    request=RewardIn,
    responses={200: RewardOut, **ERROR_RESPONSES},
    tags=["reward"],
)
@_token_api(TokenScope.REWARD)
def reward_alias(request: Request, slug: str, name: str) -> Response:
    return _reward_respond(request, _grader_aliased(request.auth, name))


@extend_schema(
    operation_id="get_reward_alias",
    summary="OpenRLHF remote reward model, with the grader an alias points at",
    description=GET_REWARD_DOC,
    parameters=[ALIAS_PARAMETER, VERSION_PARAMETER, *GATHER_PARAMETERS],
    request=GetRewardIn,
    responses={200: GetRewardOut, **ERROR_RESPONSES},
    tags=["openrlhf"],
)
@_token_api(TokenScope.REWARD)
def get_reward_alias(request: Request, slug: str, name: str) -> Response:
    return _get_reward_respond(request, _grader_aliased(request.auth, name))


# The schema ---------------------------------------------------------------------------------


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "graders.tokens.ApiTokenAuthentication"
    name = "projectToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "wbt_<prefix>_<secret>",
            "description": "A project token with the reward scope, made on the project's "
            "API tokens page.",
        }


GRADER = "p/<slug:slug>/graders/<int:grader_id>/"
SELECTED = "p/<slug:slug>/graders/selected/<str:kind>/"
ALIAS = "p/<slug:slug>/graders/alias/<str:name>/"
reward_urlpatterns = [
    path(GRADER + "reward", reward, name="api-reward"),
    path(SELECTED + "reward", reward_selected, name="api-reward-selected"),
    path(ALIAS + "reward", reward_alias, name="api-reward-alias"),
    path(GRADER + "get_reward", get_reward, name="api-get-reward"),
    path(SELECTED + "get_reward", get_reward_selected, name="api-get-reward-selected"),
    path(ALIAS + "get_reward", get_reward_alias, name="api-get-reward-alias"),
]


def schema_exclusive_fields(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what the serializers check by hand: a request gives exactly one of
    task_id and task, a response exactly one of content and messages."""
    components = result["components"]["schemas"]
    components["RewardIn"]["oneOf"] = [{"required": ["task_id"]}, {"required": ["task"]}]
    components["ResponseIn"]["oneOf"] = [{"required": ["content"]}, {"required": ["messages"]}]
    return result


schema_view = SpectacularAPIView.as_view(
    # Only the token API: the session API of labeling/ is for the browser and is not promised
    # to training jobs.
    patterns=[path("api/", include(reward_urlpatterns))],
    authentication_classes=[],
    permission_classes=[AllowAny],
    custom_settings={
        "TITLE": "Grading workbench reward API",
        "DESCRIPTION": "Rewards from a project's graders for RL training jobs. Authenticate "
        "with a project token: 'Authorization: Bearer wbt_...'.",
        "VERSION": "1",
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "graders.reward_api.schema_exclusive_fields",
        ],
    },
)
