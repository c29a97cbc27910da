"""Grading for the HTTP reward API (graders/reward_api.py): what a request needs loaded, the
judge calls on the process's event loop, and what is written once the answer is sent.

Only what the request needs is loaded, never the whole project's bundle: the program (parsed
once per process), the judge settings of the endpoint a bundle would carry, and the task
(with its stored generated rubric) when the request names one. The grading itself is the
engine's bundle runtime, exactly as an exported bundle would run, over the database judge
cache: a response the workbench already graded costs no judge call and gets the reward the
workbench stored.

The hot path reads with hand-written SQL (graders/sql_rows.py), and each lookup says why."""

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.exceptions import APIException

from graders.bundles import bundle_judge
from graders.engine.bundle import load_bundle_parsed
from graders.engine.egress import EgressPolicy
from graders.engine.judge import JudgeSettings, MissingApiKey
from graders.engine.judge_http import JudgeTransport, ssl_context
from graders.engine.programs import (
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
from graders.engine.trainers import openrlhf_rewards
from graders.engine.trainers.openrlhf import SPECIAL_TOKENS
from graders.grading import rubric_origin
from graders.judge_cache import DatabaseJudgeCache
from graders.models import (
    ApiToken,
    GradingRun,
    JudgeCall,
    JudgeEndpoint,
    Metagrader,
    RewardUsage,
)
from graders.services import endpoint_settings
from graders.sql_rows import Columns
from labeling.models import AuthorKind, Document, Rubric, Task
from labeling.records import MAX_ID

# What a failed grade is worth in get_reward, where OpenRLHF needs a number for every query;
# the same default as the runtime's OpenRLHF adapter, with the failures in extra_logs.
OPENRLHF_FAILURE_REWARD = 0.0

_GRADED = object()
# Answers per INSERT when a request's answers are stored: 4 parameters each, well within
# SQLite's 32,766 and PostgreSQL's 65,535 parameters per statement.
FLUSH_ROWS = 500


class GraderUnavailable(APIException):
    """The grader cannot run on this server as configured: an operator has to act."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "grader_unavailable"


class GraderConflict(APIException):
    """The project is not set up to run this grader (no judge endpoint)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "grader_not_runnable"


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
        self.transports: dict[tuple[str, int, EgressPolicy | None], JudgeTransport] = {}
        threading.Thread(
            target=self.loop.run_forever, name="reward-judge-loop", daemon=True
        ).start()

    @classmethod
    def get(cls) -> "JudgeLoop":
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls()
            return cls._current

    def transport(self, settings: JudgeSettings) -> JudgeTransport:
        """The pool for this endpoint, connecting where its egress policy allows; judge
        clients leave a transport they were given open."""
        with self._lock:
            key = (settings.base_url, settings.max_concurrency, settings.egress)
            if key not in self.transports:
                self.transports[key] = JudgeTransport(
                    max_connections=settings.max_concurrency,
                    ssl_context=ssl_context(),
                    egress=settings.egress,
                )
            return self.transports[key]


class RequestJudgeCache(DatabaseJudgeCache):
    """The database judge cache as one request uses it: answers are written once, together,
    when grading is done (`flush`), instead of one committed INSERT per judge call while the
    event loop waits; a request's own answers are read back from memory meanwhile. Lookups
    are one indexed read each, in plain SQL: the event loop waits for every one of them.

    An answer not yet flushed is invisible to concurrent requests, which may then ask the
    judge the same deterministic question; both answers are equal and the second INSERT is
    ignored, so this costs a judge call at worst, never a wrong reward."""

    def __init__(self, endpoint: JudgeEndpoint) -> None:
        super().__init__(endpoint)
        self._answers: dict[str, dict[str, Any]] = {}  # by request key

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
        missing = {self.row_key(key): key for key in keys if key not in found}
        if missing:
            stored = self.call(self._get_many, list(missing))
            found |= {missing[row_key]: value for row_key, value in stored.items()}
        return found

    def flush(self) -> None:
        """Store this request's answers (on the calling thread, after `run`): an INSERT per
        FLUSH_ROWS answers, an answer another request stored first left as it is (both are
        the same deterministic answer). By hand for the reason given at _endpoint_for: the
        ORM's bulk_create cost 1.1 ms of CPU for 8 answers, this 0.3."""
        answers, self._answers = list(self._answers.items()), {}
        result = JudgeCall._meta.get_field("result")
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        quote = connection.ops.quote_name
        columns = ", ".join(quote(name) for name in ("key", "model", "result", "created_at"))
        for start in range(0, len(answers), FLUSH_ROWS):
            chunk = answers[start : start + FLUSH_ROWS]
            values = [
                (self.row_key(key), self.model, result.get_db_prep_save(value, connection), now)
                for key, value in chunk
            ]
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {JudgeCall._meta.db_table} ({columns}) VALUES "
                    + ", ".join(["(%s, %s, %s, %s)"] * len(values))
                    + f" ON CONFLICT ({quote('key')}) DO NOTHING",
                    [item for row in values for item in row],
                )

    @staticmethod
    def _get_many(row_keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        marks = ", ".join(["%s"] * len(row_keys))
        table = JudgeCall._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT key, result FROM {table} WHERE key IN ({marks})", list(row_keys)
            )
            rows = cursor.fetchall()
        return {
            key: json.loads(value) if isinstance(value, str | bytes) else value
            for key, value in rows
        }

    @classmethod
    def _get(cls, row_key: str) -> dict[str, Any] | None:
        return cls._get_many([row_key]).get(row_key)


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


_ENDPOINT = Columns(JudgeEndpoint, "e")


def _endpoint_for(metagrader: Metagrader) -> JudgeEndpoint | None:
    """graders.bundles.endpoint_for in one query: the endpoint of the grader's latest run,
    else the project's default. In SQL because Django takes about 2 ms of CPU to compile the
    ORM form of it (two subqueries), five times the query's own cost, on every request."""
    endpoints, runs = JudgeEndpoint._meta.db_table, GradingRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_ENDPOINT.sql} FROM {endpoints} e WHERE e.id = COALESCE("
            f"(SELECT endpoint_id FROM {runs} WHERE metagrader_id = %s"
            " ORDER BY created_at DESC LIMIT 1), "
            f"(SELECT id FROM {endpoints} WHERE project_id = %s AND is_default"
            " ORDER BY name LIMIT 1))",
            [metagrader.pk, metagrader.project_id],
        )
        row = cursor.fetchone()
    return None if row is None else _ENDPOINT.build(row)


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
        settings = endpoint_settings(endpoint)  # the operator's egress rules, checked
    except (ValidationError, ValueError) as exc:
        reason = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        raise GraderUnavailable(
            f"The judge endpoint {endpoint.name!r} is not allowed on this server: {reason}"
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
        "judge": bundle_judge(endpoint),
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
    cache = RequestJudgeCache(endpoint)
    transport = JudgeLoop.get().transport(settings)
    try:
        grader = load_bundle_parsed(
            bundle, program, cache=cache, transport=transport, egress=settings.egress
        )
        return grader, cache
    except BundleInvalid as exc:
        raise GraderConflict(f"This grader cannot be run on this task: {exc}") from None


def _graded[T](grader: Grader, cache: RequestJudgeCache, scoring: Coroutine[Any, Any, T]) -> T:
    """Run `scoring` (which grades with `grader`); the calling thread serves the judge cache
    meanwhile. The judge's new answers stay in `cache` until its flush()."""

    async def scored() -> T:
        try:
            return await scoring
        finally:
            await grader.aclose()

    try:
        return cache.run(scored())
    except BaseException as exc:
        # Keep what was paid for before the failure. On success the view stores the answers
        # once its own answer is sent (reward_record).
        cache.flush()
        if isinstance(exc, MissingApiKey):
            raise GraderUnavailable(
                f"The judge cannot be called from this server: {exc}."
            ) from None
        raise


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


def reward_score(
    *, metagrader: Metagrader, data: Mapping[str, Any]
) -> tuple[list[GradeResult], RequestJudgeCache]:
    """Grade one group (validated RewardIn data) with `metagrader`; the results, and the
    cache holding the judge's new answers for reward_record. Raises a ValidationError naming
    task_id when the project has no such task."""
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
    return _graded(grader, cache, grader.score_group(task, responses)), cache


def openrlhf_score(
    *,
    metagrader: Metagrader,
    data: Mapping[str, Any],
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
) -> tuple[dict[str, Any], RequestJudgeCache]:
    """OpenRLHF's get_reward for validated GetRewardIn data, as the runtime's OpenRLHF adapter
    scores a batch (graders/engine/trainers.openrlhf_rewards), a failed grade being
    OPENRLHF_FAILURE_REWARD; returned with the cache holding the judge's new answers, as
    reward_score does. `special_tokens` are taken out of each response."""
    labels = data["labels"]
    # Labels are often reference answers, not task ids: only what could be an id is looked up.
    named = {label for label in labels if isinstance(label, str) and len(label) <= MAX_ID}
    named |= {
        label["task_id"] for label in labels if isinstance(label, dict) and "task_id" in label
    }
    grader, cache = _grader_load(metagrader, _tasks_known(metagrader, named))
    scoring = openrlhf_rewards(
        grader,
        data["query"],
        data["prompts"],
        labels,
        failure_reward=OPENRLHF_FAILURE_REWARD,
        per_sample=False,
        special_tokens=special_tokens,
    )
    return _graded(grader, cache, scoring), cache


def reward_record(
    *, answers: RequestJudgeCache | None, metagrader: Metagrader, token: ApiToken, responses: int
) -> None:
    """What a reward request writes once its answer is sent (graders/reward_api.py,
    RecordedResponse): the judge's new answers (None: another request graded its group,
    graders/reward_gather.py), and the request in the usage count of (grader, token)."""
    if answers is not None:
        answers.flush()
    reward_usage_record(metagrader=metagrader, token=token, responses=responses)


def reward_usage_record(*, metagrader: Metagrader, token: ApiToken, responses: int) -> None:
    """Count a request and its responses for (grader, token) in one statement that is
    atomic under concurrent requests: an INSERT that adds to the row when the pair has one
    (ON CONFLICT DO UPDATE, in PostgreSQL and SQLite alike). By hand: the ORM needs an
    UPDATE, then an INSERT and another UPDATE for a new pair, and 1 ms of CPU."""
    table = RewardUsage._meta.db_table
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (metagrader_id, token_id, requests, responses, first_at,"
            " last_at) VALUES (%s, %s, 1, %s, %s, %s)"
            " ON CONFLICT (metagrader_id, token_id) DO UPDATE SET"
            f" requests = {table}.requests + 1,"
            f" responses = {table}.responses + excluded.responses, last_at = excluded.last_at",
            [metagrader.pk, token.pk, responses, now, now],
        )
