"""The HTTP reward API: training jobs send a group of responses to a task and get rewards.

Two shapes, one grading path:

- `POST /api/p/<slug>/graders/<id>/reward` (or `.../graders/selected/<kind>/reward`, the
  project's selected grader of a kind): a task (a stored task's id, or the task itself) and up
  to MAX_RESPONSES responses; returns one reward per response, with per-criterion detail on
  request.
- `POST /api/p/<slug>/graders/<id>/get_reward` (and `.../selected/<kind>/get_reward`):
  OpenRLHF's remote reward model protocol, {"query", "prompts", "labels"} in and
  {"rewards", ...} out, with the same semantics as the OpenRLHF adapter of the Python runtime
  (graders/engine/trainers.py).

Both authenticate with a project token (graders/tokens.py) that holds the `reward` scope, and
grade with the engine's bundle runtime exactly as an exported bundle would, over the database
judge cache: a response the workbench already graded costs no judge call and gets the reward
the workbench stored. Only what the request needs is loaded, never the whole project's bundle:
the program, the judge settings of the endpoint a bundle would carry, and the task (with its
stored generated rubric) when the request names one.

Limits: the body (REWARD_API_MAX_BYTES, 413), responses per request (400), and the sizes of
every text, the same as the JSONL import's (FORMATS.md). Every error is JSON: {"detail": ...}
or field errors keyed by the field's name."""

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import httpx
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.http import Http404
from django.urls import include, path
from django.utils import timezone
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
from httpx_aiohttp import AiohttpTransport
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import json as drf_json

from graders.bundles import JUDGE_FIELDS
from graders.engine.bundle import load_bundle_parsed
from graders.engine.judge import MissingApiKey
from graders.engine.programs import (
    KINDS,
    DocumentInput,
    Program,
    ResponseInput,
    TaskInput,
    program_validate,
)
from graders.engine.runtime import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BundleInvalid,
    Grader,
    GradeResult,
)
from graders.grading import rubric_origin
from graders.judge_cache import DatabaseJudgeCache
from graders.models import (
    ApiToken,
    GradingRun,
    JudgeCall,
    JudgeEndpoint,
    Metagrader,
    RewardUsage,
    TokenScope,
)
from graders.services import endpoint_settings, grader_selected
from graders.tokens import ApiTokenAuthentication, TokenRateThrottle, scope_required
from labeling.models import AuthorKind, Document, Rubric, Task
from labeling.records import (
    MAX_DOCUMENT_TEXT,
    MAX_DOCUMENTS,
    MAX_ID,
    MAX_MESSAGES,
    MAX_PROMPT,
    MAX_RESPONSE_TEXT,
)

MAX_RESPONSES = 64  # one group: a task's rollouts in one training step
MAX_QUERIES = 1024  # an OpenRLHF batch, which holds many groups
MAX_TOOL_CALLS = 100
# Beyond this, ids cannot name a row in any database we run on; they get 404, not a crash.
MAX_ROW_ID = 2**63 - 1
# What a failed grade is worth in get_reward, where OpenRLHF needs a number for every query;
# the same default as the runtime's OpenRLHF adapter, with the failures in extra_logs.
OPENRLHF_FAILURE_REWARD = 0.0


_GRADED = object()


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


class GraderUnavailable(APIException):
    """The grader cannot run on this server as configured: an operator has to act."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "grader_unavailable"


class GraderConflict(APIException):
    """The project is not set up to run this grader (no judge endpoint)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "grader_not_runnable"


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
            return drf_json.loads(text, parse_constant=drf_json.strict_constant)
        except (ValueError, RecursionError) as exc:
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


class RewardIn(serializers.Serializer):
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


class GetRewardIn(serializers.Serializer):
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


class GetRewardOut(serializers.Serializer):
    rewards = serializers.ListField(
        child=serializers.FloatField(),
        help_text=f"One per query; a failed grade is {OPENRLHF_FAILURE_REWARD}.",
    )
    scores = serializers.ListField(child=serializers.FloatField())
    extra_logs = ExtraLogsOut()


class ErrorOut(serializers.Serializer):
    detail = serializers.CharField()


# Grading ------------------------------------------------------------------------------------


class KeptTransport(httpx.AsyncBaseTransport):
    """A judge connection pool shared by every request of the process: closing a request's
    client must leave it open."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        pass


class JudgeLoop:
    """The event loop every reward request of this process grades on, in a daemon thread,
    with one keep-alive connection pool per judge endpoint.

    A loop and a pool per request (as a grading job has per chunk) would cost each request a
    thread, a new HTTP session and a TCP (or TLS) handshake per judge call. The pool holds at
    most the endpoint's max_concurrency connections, so that limit holds for the whole
    process, as it does for a worker. A forked process makes its own on first use."""

    _lock = threading.Lock()
    _current: "JudgeLoop | None" = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.transports: dict[tuple[str, int], KeptTransport] = {}
        threading.Thread(
            target=self.loop.run_forever, name="reward-judge-loop", daemon=True
        ).start()

    @classmethod
    def get(cls) -> "JudgeLoop":
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls()
            return cls._current

    def transport(self, base_url: str, max_concurrency: int) -> KeptTransport:
        with self._lock:
            key = (base_url, max_concurrency)
            if key not in self.transports:
                limits = httpx.Limits(
                    max_connections=max_concurrency, max_keepalive_connections=max_concurrency
                )
                self.transports[key] = KeptTransport(AiohttpTransport(limits=limits))
            return self.transports[key]


class RequestJudgeCache(DatabaseJudgeCache):
    """The database judge cache as one request uses it: answers are written once, together,
    when grading is done (`flush`), instead of one committed INSERT per judge call while the
    event loop waits; a request's own answers are read back from memory meanwhile. Lookups
    are one indexed read each, in plain SQL: the event loop waits for every one of them.

    An answer not yet flushed is invisible to concurrent requests, which may then ask the
    judge the same deterministic question; both answers are equal and the second INSERT is
    ignored, so this costs a judge call at worst, never a wrong reward."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self._answers: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        # Only the event loop's thread reads and writes _answers.
        return self._answers.get(key) or super().get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._answers[key] = value

    def run[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the process's JudgeLoop, serving the cache meanwhile from the
        calling thread (which owns the database connection)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, JudgeLoop.get().loop)
        future.add_done_callback(lambda _: self._requests.put(_GRADED))
        while (request := self._requests.get()) is not _GRADED:
            function, args, answer = request
            try:
                answer.set_result(function(*args))
            except BaseException as exc:  # raised in the loop's thread, where it was asked
                answer.set_exception(exc)
        return future.result()

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The engine's batched lookup (a group's calls ask together): one query for all."""
        found = {key: self._answers[key] for key in keys if key in self._answers}
        missing = [key for key in keys if key not in found]
        if missing:
            found |= self._ask(self._get_many, missing)
        return found

    def flush(self) -> None:
        """Store the answers of this request (on the calling thread, after `run`)."""
        if self._answers:
            JudgeCall.objects.bulk_create(
                [JudgeCall(key=key, model=self.model, result=value)
                 for key, value in self._answers.items()],
                ignore_conflicts=True,
            )  # fmt: skip
            self._answers.clear()

    @staticmethod
    def _get_many(keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        marks = ", ".join(["%s"] * len(keys))
        table = JudgeCall._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT key, result FROM {table} WHERE key IN ({marks})", list(keys))
            rows = cursor.fetchall()
        return {
            key: json.loads(value) if isinstance(value, str | bytes) else value
            for key, value in rows
        }

    @staticmethod
    def _get(key: str) -> dict[str, Any] | None:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT result FROM {JudgeCall._meta.db_table} WHERE key = %s", [key])
            row = cursor.fetchone()
        if row is None:
            return None
        value = row[0]
        result: dict[str, Any] = json.loads(value) if isinstance(value, str | bytes) else value
        return result


# Parsed programs by content hash: a program never changes under its hash, and parsing and
# hashing one costs more CPU than the rest of a small request. Bounded, not LRU: a process
# serves a handful of graders.
_PROGRAMS: dict[str, Program] = {}
_PROGRAMS_MAX = 256


def _program_load(metagrader: Metagrader) -> Program:
    program = _PROGRAMS.get(metagrader.content_hash)
    if program is not None:
        return program
    program = program_validate(metagrader.program)  # deferred: read only on a miss
    if program.content_hash == metagrader.content_hash:
        if len(_PROGRAMS) >= _PROGRAMS_MAX:
            _PROGRAMS.clear()
        _PROGRAMS[program.content_hash] = program
    return program


def _endpoint_for(metagrader: Metagrader) -> JudgeEndpoint | None:
    """graders.bundles.endpoint_for in one query: the endpoint of the grader's latest run,
    else the project's default. In SQL because Django takes about 2 ms of CPU to compile the
    ORM form of it (two subqueries), five times the query's own cost, on every request."""
    endpoints, runs = JudgeEndpoint._meta.db_table, GradingRun._meta.db_table
    query = JudgeEndpoint.objects.raw(
        f"SELECT * FROM {endpoints} WHERE id = COALESCE("
        f"(SELECT endpoint_id FROM {runs} WHERE metagrader_id = %s"
        " ORDER BY created_at DESC LIMIT 1), "
        f"(SELECT id FROM {endpoints} WHERE project_id = %s AND is_default"
        " ORDER BY name LIMIT 1))",
        [metagrader.pk, metagrader.project_id],
    )
    return next(iter(query), None)


def _grader_load(
    metagrader: Metagrader, tasks: Mapping[int, TaskInput]
) -> tuple[Grader, RequestJudgeCache]:
    """The runtime Grader an exported bundle of `metagrader` would give, holding only
    `tasks` (by primary key, with their stored generated rubrics), over the database judge
    cache."""
    endpoint = _endpoint_for(metagrader)
    if endpoint is None:
        raise GraderConflict(
            "The project has no judge endpoint to run this grader with: add one on the Judges "
            "page and make it the default."
        )
    try:
        endpoint_settings(endpoint)  # the operator's rules on key variables and judge hosts
    except Exception as exc:
        raise GraderUnavailable(
            f"The judge endpoint {endpoint.name!r} is not allowed on this server: {exc}"
        ) from None
    program = _program_load(metagrader)
    rubrics: dict[str, list[dict[str, Any]]] = {}
    if program.rubric_steps and tasks:
        stored = Rubric.objects.filter(
            task_id__in=list(tasks), author_kind=AuthorKind.GENERATED, origin=rubric_origin(program)
        ).prefetch_related("items")
        for rubric in stored:
            rubrics[tasks[rubric.task_id].id] = [
                {"id": item.key, "text": item.text, "weight": item.weight}
                for item in rubric.items.all()
            ]
    # The bundle an export would write, less the program's JSON: the program is the one
    # parsed above (load_bundle_parsed checks everything else as load_bundle does).
    bundle = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "project": metagrader.project.slug,
        "grader": {
            "id": metagrader.pk,
            "name": metagrader.name,
            "kind": program.kind,
            "content_hash": program.content_hash,
        },
        "judge": {field: getattr(endpoint, field) for field in JUDGE_FIELDS}
        | {"api_key_env": endpoint.api_key_env or None},
        "tasks": {
            task.id: {
                "prompt": task.prompt,
                "instructions": task.instructions,
                "documents": [
                    {"id": d.id, "title": d.title, "text": d.text} for d in task.documents
                ],
            }
            for task in tasks.values()
        },
        "rubrics": rubrics,
    }
    cache = RequestJudgeCache(endpoint.model)
    transport = JudgeLoop.get().transport(endpoint.base_url, endpoint.max_concurrency)
    try:
        return load_bundle_parsed(bundle, program, cache=cache, transport=transport), cache
    except BundleInvalid as exc:
        raise GraderConflict(f"This grader cannot be run on this task: {exc}") from None


def _groups_grade(
    grader: Grader,
    cache: RequestJudgeCache,
    groups: Sequence[tuple[TaskInput | str, Sequence[ResponseInput]]],
) -> list[list[GradeResult]]:
    """Grade the groups concurrently; the calling thread serves the judge cache meanwhile."""

    async def grade() -> list[list[GradeResult]]:
        try:
            return list(
                await asyncio.gather(*(grader.score_group(task, group) for task, group in groups))
            )
        finally:
            await grader.aclose()

    try:
        return cache.run(grade())
    except MissingApiKey as exc:
        raise GraderUnavailable(f"The judge cannot be called from this server: {exc}.") from None
    finally:
        cache.flush()


def _response_input(index: int, item: Mapping[str, Any]) -> ResponseInput:
    response_id = item.get("id", str(index))
    if "messages" not in item:
        return ResponseInput(response_id, item["content"])
    # Stored the way the JSONL import stores trajectories (absent and null fields left out),
    # so a trajectory sent here reads to the judge exactly as the imported one does.
    messages = []
    for message in item["messages"]:
        normalized = {key: value for key, value in message.items() if value is not None}
        normalized.setdefault("content", "")
        if "tool_calls" in normalized:
            normalized["tool_calls"] = [
                {key: value for key, value in call.items() if value is not None}
                for call in normalized["tool_calls"]
            ]
        messages.append(normalized)
    return ResponseInput(response_id, "", tuple(messages))


def _tasks_known(metagrader: Metagrader, external_ids: set[str]) -> dict[int, TaskInput]:
    """The project's tasks of these ids with their documents (in order), by primary key: one
    query, the documents joined in (a task without documents joins one row of nulls)."""
    if not external_ids:
        return {}
    # In SQL for the reason given at _endpoint_for: the ORM's join costs more than the query.
    ids = sorted(external_ids)
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.id, t.external_id, t.prompt, t.instructions, d.external_id, d.title, d.text"
            f" FROM {Task._meta.db_table} t LEFT JOIN {Document._meta.db_table} d"
            " ON d.task_id = t.id"
            f" WHERE t.project_id = %s AND t.external_id IN ({marks})"
            " ORDER BY t.id, d.position, d.id",
            [metagrader.project_id, *ids],
        )
        rows = cursor.fetchall()
    tasks: dict[int, tuple[str, str, str, list[DocumentInput]]] = {}
    for pk, external_id, prompt, instructions, doc_id, doc_title, doc_text in rows:
        documents = tasks.setdefault(pk, (external_id, prompt, instructions, []))[3]
        if doc_id is not None:
            documents.append(DocumentInput(doc_id, doc_title, doc_text))
    return {
        pk: TaskInput(external_id, prompt, instructions, tuple(documents))
        for pk, (external_id, prompt, instructions, documents) in tasks.items()
    }


def reward_score(*, metagrader: Metagrader, data: Mapping[str, Any]) -> list[GradeResult]:
    """Grade one group (validated RewardIn data) with `metagrader`. Raises a ValidationError
    naming task_id when the project has no such task."""
    tasks = _tasks_known(metagrader, {data["task_id"]} if "task_id" in data else set())
    if "task_id" in data and not tasks:
        raise serializers.ValidationError({"task_id": ["This project has no task with this id."]})
    grader, cache = _grader_load(metagrader, tasks)
    if tasks:
        task: TaskInput | str = next(iter(tasks.values())).id
    else:
        given = data["task"]
        task = grader.resolve_task(
            prompt=given["prompt"],
            instructions=given["instructions"],
            documents=[
                {"id": d.get("id") or f"doc{n}", "title": d["title"], "text": d["text"]}
                for n, d in enumerate(given["documents"], 1)
            ],
        )
    responses = [_response_input(i, item) for i, item in enumerate(data["responses"])]
    return _groups_grade(grader, cache, [(task, responses)])[0]


def openrlhf_score(*, metagrader: Metagrader, data: Mapping[str, Any]) -> dict[str, Any]:
    """OpenRLHF's get_reward for validated GetRewardIn data: responses are the queries with
    their prompts cut off, grouped by task (so pairwise programs compare a prompt's rollouts
    with each other), and a failed grade is OPENRLHF_FAILURE_REWARD."""
    labels = data["labels"]
    # Labels are often reference answers, not task ids: only what could be an id is looked up.
    named = {label for label in labels if isinstance(label, str) and len(label) <= MAX_ID}
    named |= {
        label["task_id"] for label in labels if isinstance(label, dict) and "task_id" in label
    }
    grader, cache = _grader_load(metagrader, _tasks_known(metagrader, named))
    rows: dict[TaskInput, list[int]] = {}
    for row, (prompt, label) in enumerate(zip(data["prompts"], labels, strict=True)):
        rows.setdefault(_openrlhf_task(grader, prompt, label), []).append(row)
    query, prompts = data["query"], data["prompts"]
    groups = [
        (task, [ResponseInput(str(row), query[row][len(prompts[row]) :]) for row in members])
        for task, members in rows.items()
    ]
    results: dict[int, GradeResult] = {}
    for graded in _groups_grade(grader, cache, groups):
        for result in graded:
            results[int(result.response_id)] = result
    ordered = [results[row] for row in range(len(data["query"]))]
    rewards = [OPENRLHF_FAILURE_REWARD if r.reward is None else r.reward for r in ordered]
    return {
        "rewards": rewards,
        "scores": list(rewards),
        "extra_logs": {"grader_failed": [float(not r.ok) for r in ordered]},
    }


def _openrlhf_task(grader: Grader, prompt: str, label: Any) -> TaskInput:
    if isinstance(label, str) and label in grader.tasks:
        return grader.tasks[label]
    if isinstance(label, dict):
        return grader.resolve_task(
            prompt=label.get("prompt", prompt),
            task_id=label.get("task_id"),
            documents=label.get("documents"),
            instructions=label.get("instructions"),
        )
    return grader.resolve_task(prompt=prompt)


def reward_usage_record(*, metagrader: Metagrader, token: ApiToken, responses: int) -> None:
    """Count a request and its responses for (grader, token), atomically under concurrent
    requests: an UPDATE with F(), and the row made first (unique, conflicts ignored) when
    this pair has none yet."""
    scope = RewardUsage.objects.filter(metagrader=metagrader, token=token)
    increment = {
        "requests": F("requests") + 1,
        "responses": F("responses") + responses,
        "last_at": timezone.now(),
    }
    if scope.update(**increment) == 0:
        RewardUsage.objects.bulk_create(
            [RewardUsage(metagrader=metagrader, token=token)], ignore_conflicts=True
        )
        scope.update(**increment)


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


def _token_api(scope: str) -> Any:
    """A POST view of the token API: project tokens only (no sessions, so no CSRF), the
    token's project and scope, its rate limit, and JSON bodies within the size limit."""

    def decorate(function: Any) -> Any:
        function.authentication_classes = [ApiTokenAuthentication]
        function.permission_classes = [scope_required(scope)]
        function.throttle_classes = [TokenRateThrottle]
        function.parser_classes = [LimitedJSONParser]
        # drf-spectacular's schema class on the view, and where @extend_schema looks for it:
        # the project's DEFAULT_SCHEMA_CLASS stays DRF's own.
        function.schema = AutoSchema()
        view = api_view(["POST"])(function)
        view.schema = function.schema
        return view

    return decorate


def _grader_by_id(token: ApiToken, grader_id: int) -> Metagrader:
    metagrader = (
        # The program only when its parse is not cached already (_program_load).
        Metagrader.objects.filter(project=token.project, pk=grader_id).defer("program").first()
        if grader_id <= MAX_ROW_ID
        else None
    )
    if metagrader is None:
        raise Http404("No such grader in this project.")
    metagrader.project = token.project
    return metagrader


def _grader_selected(token: ApiToken, kind: str) -> Metagrader:
    selection = grader_selected(project=token.project, kind=kind) if kind in KINDS else None
    if selection is None:
        raise Http404(f"No {kind} grader is selected in this project.")
    selection.metagrader.project = token.project
    return selection.metagrader


def _reward_respond(request: Request, metagrader: Metagrader) -> Response:
    data = RewardIn(data=request.data)
    data.is_valid(raise_exception=True)
    results = reward_score(metagrader=metagrader, data=data.validated_data)
    reward_usage_record(metagrader=metagrader, token=request.auth, responses=len(results))
    return Response(
        {
            "grader": {
                "id": metagrader.pk,
                "name": metagrader.name,
                "content_hash": metagrader.content_hash,
            },
            "rewards": [result.reward for result in results],
            "results": _results_json(results, data.validated_data["detail"]),
        }
    )


def _get_reward_respond(request: Request, metagrader: Metagrader) -> Response:
    data = GetRewardIn(data=request.data)
    data.is_valid(raise_exception=True)
    payload = openrlhf_score(metagrader=metagrader, data=data.validated_data)
    reward_usage_record(
        metagrader=metagrader, token=request.auth, responses=len(payload["rewards"])
    )
    return Response(payload)


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
}
ERROR_RESPONSES: dict[int | str, Any] = {
    400: OpenApiTypes.OBJECT,
    **{code: shape for code, shape in ERRORS.items() if code != 400},
}
KIND_PARAMETER = OpenApiParameter(
    "kind", OpenApiTypes.STR, OpenApiParameter.PATH, enum=list(KINDS),
    description="The kind of the project's selected grader to use.",
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
    "grade is 0.0, marked in extra_logs.grader_failed."
)


@extend_schema(
    operation_id="reward",
    summary="Rewards for a group of responses",
    description=REWARD_DOC,
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
    parameters=[KIND_PARAMETER],
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
    parameters=[KIND_PARAMETER],
    request=GetRewardIn,
    responses={200: GetRewardOut, **ERROR_RESPONSES},
    tags=["openrlhf"],
)
@_token_api(TokenScope.REWARD)
def get_reward_selected(request: Request, slug: str, kind: str) -> Response:
    return _get_reward_respond(request, _grader_selected(request.auth, kind))


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
reward_urlpatterns = [
    path(GRADER + "reward", reward, name="api-reward"),
    path(SELECTED + "reward", reward_selected, name="api-reward-selected"),
    path(GRADER + "get_reward", get_reward, name="api-get-reward"),
    path(SELECTED + "get_reward", get_reward_selected, name="api-get-reward-selected"),
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
