"""Capture (DESIGN.md section 12, step 1): the reward API keeps a sample of the groups it
grades, and a bulk endpoint takes production logs, so experts can label what the policy now
produces.

- Whole groups: labels compare responses of one task, so a group is kept or left whole (a
  get_reward batch is split into groups by prompt first).
- Sampled at a rate per token (ApiToken.capture_rate, else Project.capture_rate; 0 is off).
  The draw is one random number per group, made while the request is served; the drawn
  group is handed, once the answer is sent (RecordedResponse in graders/reward_api.py), to
  the process's CaptureWriter thread, which sends it to a Celery worker that stores it. So
  capture neither slows nor fails a reward answer, nor the next request on the same
  connection, and its queries cost the web process nothing.
- Capped per task at CAPTURE_GROUPS_PER_TASK groups by reservoir sampling (Algorithm R): the
  n-th group offered to a full reservoir takes a random slot with probability K/n, so every
  group of a long run has the same chance to be kept whenever it came. The group it pushes
  out is deleted, unless experts labeled any of its responses: labels are never deleted to
  make room, so such a group stays with no slot.
- Deduplicated by content: a response whose content hash was already captured for the task
  is not stored again; a group with nothing new is not offered at all.

Captured rollouts are labeling Responses (the queue serves them like any pair) under opaque
ids (a hash of task and content), with no source model and no metadata: the run, step, token,
grader and reward live in CapturedGroup / CapturedResponse, which no expert page reads. A task
given inline (no stored id) becomes a Task whose external id is the hash of its content
(capture_task_id), so the same prompt always lands on the same task, in the unassigned split:
D_selection and D_eval are the fixed sets graders are chosen and reported on, and letting
traffic add tasks to them would move those numbers under every comparison made so far.
"""

import hashlib
import logging
import math
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery

from graders.engine.capture_client import capture_task_id, response_content_hash
from graders.engine.programs import ResponseInput
from graders.models import (
    ApiToken,
    CapturedGroup,
    CapturedResponse,
    CaptureReservoir,
    CaptureSource,
    Metagrader,
)
from graders.reward_grading import _response_input
from labeling.imports import (
    MAX_REPORTED_ERRORS,
    SNIFF_BYTES,
    ImportRejected,
    LineError,
    file_head_check,
)
from labeling.json_input import json_parse
from labeling.models import (
    CriterionGrade,
    Document,
    Preference,
    Project,
    QueueAssignment,
    Response,
    Score,
    Split,
    Task,
)
from labeling.records import MAX_ID, RecordInvalid, ResponseRecord, TaskRecord, record_parse

_log = logging.getLogger(__name__)

# Not for secrets: which groups are kept only has to be unbiased.
_rng = random.Random()

MAX_RUN = 200
MAX_STEP = 2**63 - 1
RESPONSE_ID_DIGITS = 32


def capture_groups_per_task() -> int:
    return int(settings.CAPTURE_GROUPS_PER_TASK)


def capture_queue_size() -> int:
    return int(settings.CAPTURE_QUEUE_SIZE)


@dataclass(frozen=True)
class CaptureTask:
    """A group's task: `stored_id` names a task of the project when the request named one
    (a label may be a reference answer rather than an id, so it is looked up when stored);
    otherwise, or when no such task exists, the task is the content given."""

    stored_id: str | None
    prompt: str
    instructions: str = ""
    documents: tuple[tuple[str, str, str], ...] = ()  # (id, title, text)


@dataclass(frozen=True)
class CaptureGroup:
    task: CaptureTask
    responses: tuple[ResponseInput, ...]
    rewards: tuple[float | None, ...]
    run: str = ""
    step: int | None = None


@dataclass(frozen=True)
class CaptureOrigin:
    """Who sent the groups; kept with them, never shown to experts."""

    project: Project
    source: str
    # By id: a worker stores what a web process drew, and the row may be gone by then; the
    # group's INSERT looks each up in the project (_owner), so none costs a query of its own.
    token_id: int | None = None
    metagrader_id: int | None = None


@dataclass
class CaptureReport:
    """What storing some groups did; the bulk endpoint answers with `as_json`."""

    groups: int = 0  # offered to a reservoir (a group with nothing new is not)
    captured_groups: int = 0
    captured_responses: int = 0
    duplicate_responses: int = 0
    not_kept: int = 0  # lost the reservoir draw
    evicted: int = 0  # pushed out of a reservoir and deleted
    kept_labeled: int = 0  # pushed out, kept because experts labeled or were served it
    tasks_created: int = 0

    def add(self, other: "CaptureReport") -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def as_json(self) -> dict[str, int]:
        return asdict(self)


# Sampling, while the request is served -------------------------------------------------------


def capture_rate(token: ApiToken) -> float:
    """The token's own rate, else its project's (token.project is loaded with the token)."""
    if token.capture_rate is not None:
        return token.capture_rate
    return token.project.capture_rate


def _drawn(rate: float, rng: random.Random) -> bool:
    return rate > 0 and (rate >= 1 or rng.random() < rate)


def reward_capture(
    *,
    token: ApiToken,
    metagrader: Metagrader,
    data: Mapping[str, Any],
    rewards: Sequence[float | None],
    rng: random.Random = _rng,
) -> Callable[[], None] | None:
    """What to do for a reward request (validated RewardIn data and its rewards) once its
    answer is sent, or None when its group is not drawn. The request pays for the draw
    only: the group is built and handed on by the CaptureWriter (capture_submit)."""
    if not _drawn(capture_rate(token), rng):
        return None
    origin = CaptureOrigin(token.project, CaptureSource.REWARD, token.pk, metagrader.pk)
    return partial(capture_submit, partial(_reward_groups, data, tuple(rewards)), origin)


def _reward_groups(
    data: Mapping[str, Any], rewards: tuple[float | None, ...]
) -> list[CaptureGroup]:
    if "task_id" in data:
        task = CaptureTask(stored_id=data["task_id"], prompt="")
    else:
        given = data["task"]
        task = CaptureTask(
            stored_id=None,
            prompt=given["prompt"],
            instructions=given["instructions"],
            documents=_documents(given["documents"]),
        )
    responses = tuple(_response_input(i, item) for i, item in enumerate(data["responses"]))
    return [CaptureGroup(task, responses, rewards, data.get("run", ""), data.get("step"))]


def get_reward_capture(
    *,
    token: ApiToken,
    metagrader: Metagrader,
    data: Mapping[str, Any],
    payload: Mapping[str, Any],
    rng: random.Random = _rng,
) -> Callable[[], None] | None:
    """reward_capture for OpenRLHF's get_reward (its validated data and answer, where a
    failed grade is a number marked in extra_logs.grader_failed, stored as no reward): the
    batch's queries grouped by prompt, each group drawn on its own; None when none is."""
    rate = capture_rate(token)
    if rate <= 0:
        return None
    rows_by_prompt: dict[str, list[int]] = {}
    for row, prompt in enumerate(data["prompts"]):
        rows_by_prompt.setdefault(prompt, []).append(row)
    drawn = [rows for rows in rows_by_prompt.values() if _drawn(rate, rng)]
    if not drawn:
        return None
    origin = CaptureOrigin(token.project, CaptureSource.GET_REWARD, token.pk, metagrader.pk)
    return partial(capture_submit, partial(_get_reward_groups, data, payload, drawn), origin)


def _get_reward_groups(
    data: Mapping[str, Any], payload: Mapping[str, Any], drawn: Sequence[Sequence[int]]
) -> list[CaptureGroup]:
    failed = payload["extra_logs"]["grader_failed"]
    groups = []
    for rows in drawn:
        prompt = data["prompts"][rows[0]]
        responses = tuple(
            ResponseInput(str(n), data["query"][row][len(prompt) :]) for n, row in enumerate(rows)
        )
        groups.append(
            CaptureGroup(
                _label_task(prompt, data["labels"][rows[0]]),
                responses,
                tuple(None if failed[row] else payload["rewards"][row] for row in rows),
                data.get("run", ""),
                data.get("step"),
            )
        )
    return groups


def _documents(documents: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    # Named as the reward API names them for the grader (reward_grading.reward_score).
    return tuple(
        (d.get("id") or f"doc{n}", d.get("title", ""), d["text"])
        for n, d in enumerate(documents, 1)
    )


def _label_task(prompt: str, label: Any) -> CaptureTask:
    """The task of a get_reward row, as the grader read it (trainers._openrlhf_task): a
    label that could be a task id, or an object naming one or giving the task's content."""
    if isinstance(label, dict):
        return CaptureTask(
            stored_id=label.get("task_id"),
            prompt=label.get("prompt", prompt),
            instructions=label.get("instructions", ""),
            documents=_documents(label.get("documents", [])),
        )
    stored = label if isinstance(label, str) and len(label) <= MAX_ID else None
    return CaptureTask(stored_id=stored, prompt=prompt)


# Storing, once the answer is sent ------------------------------------------------------------


# A writer sends the groups drawn within CAPTURE_BATCH_S of the first it takes in one message
# per origin, up to CAPTURE_BATCH_RESPONSES responses (a larger group goes alone): a send cost
# the web process's interpreter 0.7 ms and the worker a task whatever it carried, and a group
# waits for a worker anyway.
CAPTURE_BATCH_S = 1.0
CAPTURE_BATCH_RESPONSES = 256

type GroupsBuild = Callable[[], Sequence[CaptureGroup]]
type GroupsSend = Callable[[Sequence[CaptureGroup], CaptureOrigin], None]


class CaptureWriter:
    """The thread that hands this process's drawn groups to a worker (capture_send), fed by a
    bounded queue, a message per origin for the groups drawn within `batch_s` of each other.

    Storing in the request's thread, even after its answer is sent, held the connection:
    gunicorn reads the next request of a keep-alive connection only once close() returns, so
    a trainer's next request waited for the capture's queries (bench/reward_api.py at rate
    0.05: p99 overhead 12 to 40 ms above capture off). A full queue drops the group, counted
    in `dropped` and logged: capture is a sample, and a slow database must not grow memory.
    A request whose groups fail to build or send is counted in `failed` and logged. Queued
    groups die with the process. A forked process makes its own on first use."""

    _lock = threading.Lock()
    _current: "CaptureWriter | None" = None

    def __init__(
        self, size: int, *, batch_s: float = CAPTURE_BATCH_S, send: GroupsSend | None = None
    ) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[tuple[GroupsBuild, CaptureOrigin]] = queue.Queue(maxsize=size)
        self.batch_s = batch_s
        self._send = capture_send if send is None else send
        self.dropped = 0
        self.failed = 0
        threading.Thread(target=self._work, name="capture-writer", daemon=True).start()

    @classmethod
    def get(cls) -> "CaptureWriter":
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = cls(capture_queue_size())
            return cls._current

    def submit(self, build: GroupsBuild, origin: CaptureOrigin) -> bool:
        """Queue the groups `build` makes (never blocks); False, counted and logged, when the
        queue is full."""
        try:
            self.queue.put_nowait((build, origin))
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
            _log.warning(
                "capture: the writer is %d groups behind; a drawn group was dropped (%d so far)",
                self.queue.maxsize,
                dropped,
            )
            return False
        return True

    def _work(self) -> None:
        while True:
            taken, batches = self._gather()
            try:
                for origin, (groups, requests) in batches.items():
                    try:
                        self._send(groups, origin)
                    except Exception:
                        self._failed(requests, "sending")
            finally:
                for _ in range(taken):
                    self.queue.task_done()

    def _gather(self) -> tuple[int, dict[CaptureOrigin, tuple[list[CaptureGroup], int]]]:
        """The next request's drawn groups and those of the requests queued within batch_s of
        it, by origin, each with how many requests it holds; and how many were taken from the
        queue."""
        batches: dict[CaptureOrigin, tuple[list[CaptureGroup], int]] = {}
        taken = responses = 0
        build, origin = self.queue.get()
        deadline = time.monotonic() + self.batch_s
        while True:
            taken += 1
            try:
                groups = build()
            except Exception:
                self._failed(1, "building")
            else:
                held, requests = batches.get(origin, ([], 0))
                batches[origin] = (held + list(groups), requests + 1)
                responses += sum(len(group.responses) for group in groups)
            left = deadline - time.monotonic()
            if responses >= CAPTURE_BATCH_RESPONSES or left <= 0:
                return taken, batches
            try:
                build, origin = self.queue.get(timeout=left)
            except queue.Empty:
                return taken, batches

    def _failed(self, requests: int, doing: str) -> None:
        with self._lock:
            self.failed += requests
        _log.exception(
            "capture: %s the groups of %d requests failed; they are lost", doing, requests
        )


def capture_submit(build: GroupsBuild, origin: CaptureOrigin) -> None:
    """Store the groups `build` makes: at once when CAPTURE_QUEUE_SIZE is 0 (tests, and
    servers that would rather wait than drop), else through the CaptureWriter, which builds
    them and sends them to a worker (capture_send)."""
    if capture_queue_size() == 0:
        capture_store(groups=build(), origin=origin)
    else:
        CaptureWriter.get().submit(build, origin)


CAPTURE_TASK = "graders.tasks.capture_groups_task"


def capture_send(groups: Sequence[CaptureGroup], origin: CaptureOrigin) -> None:
    """Hand the groups to a Celery worker, which stores them (capture_groups_store), so that
    the web process spends no CPU on a capture's queries: in a web process they shared its
    interpreter with the requests it serves (bench/reward_api.py --capture). No retry: with
    the broker away the writer thread logs the failure and the groups are lost, as a sample
    may be; the writer's bounded queue drops what arrives meanwhile."""
    from config.celery import app

    messages = [group_json(group) for group in groups]
    app.send_task(
        CAPTURE_TASK,
        args=(messages, origin_json(origin)),
        retry=False,
        # Celery's default is a safe repr of the arguments, for monitoring tools: walking the
        # groups' nested JSON for it took a quarter of the send's CPU, 0.3 of 1.1 ms of the
        # web process's interpreter per group.
        argsrepr=capture_message_summary(messages, origin),
        kwargsrepr="{}",
    )


def capture_message_summary(groups: Sequence[Mapping[str, Any]], origin: CaptureOrigin) -> str:
    """What a capture message says of itself in its headers: counts, never content."""
    responses = sum(len(group["responses"]) for group in groups)
    return f"<{len(groups)} groups, {responses} responses for project {origin.project.pk}>"


def group_json(group: CaptureGroup) -> dict[str, Any]:
    """A group as a Celery message carries it (JSON); group_parse reads it back."""
    return {
        "task": {
            "stored_id": group.task.stored_id,
            "prompt": group.task.prompt,
            "instructions": group.task.instructions,
            "documents": [list(document) for document in group.task.documents],
        },
        "responses": [
            {
                "id": response.id,
                "text": response.text,
                "messages": None if response.messages is None else list(response.messages),
            }
            for response in group.responses
        ],
        "rewards": list(group.rewards),
        "run": group.run,
        "step": group.step,
    }


def group_parse(data: Mapping[str, Any]) -> CaptureGroup:
    task = data["task"]
    return CaptureGroup(
        CaptureTask(
            stored_id=task["stored_id"],
            prompt=task["prompt"],
            instructions=task["instructions"],
            documents=tuple((str(i), str(t), str(x)) for i, t, x in task["documents"]),
        ),
        tuple(
            ResponseInput(
                response["id"],
                response["text"],
                None if response["messages"] is None else tuple(response["messages"]),
            )
            for response in data["responses"]
        ),
        tuple(data["rewards"]),
        data["run"],
        data["step"],
    )


def origin_json(origin: CaptureOrigin) -> dict[str, Any]:
    return {
        "project": origin.project.pk,
        "source": origin.source,
        "token": origin.token_id,
        "metagrader": origin.metagrader_id,
    }


def capture_groups_store(
    groups: Sequence[Mapping[str, Any]], origin: Mapping[str, Any]
) -> dict[str, int]:
    """The worker's side of capture_send: store the groups; what was stored, as the bulk
    endpoint reports it. A group whose project is gone by now is dropped; a token or grader
    deleted meanwhile leaves the group without it, as deleting one later would."""
    project = Project.objects.filter(pk=origin["project"]).first()
    if project is None:
        _log.warning(
            "capture: project %s is gone; %d groups dropped", origin["project"], len(groups)
        )
        return CaptureReport().as_json()
    stored_origin = CaptureOrigin(project, origin["source"], origin["token"], origin["metagrader"])
    return capture_store(groups=[group_parse(g) for g in groups], origin=stored_origin).as_json()


def capture_store(
    *, groups: Sequence[CaptureGroup], origin: CaptureOrigin, rng: random.Random = _rng
) -> CaptureReport:
    """Store sampled groups, each in its own transaction (a failure loses that group only)."""
    report = CaptureReport()
    for group in groups:
        with transaction.atomic():
            report.add(_group_store(group, origin, rng))
    return report


def reservoir_slot(*, seen: int, capacity: int, rng: random.Random) -> int | None:
    """Algorithm R: the slot of a reservoir of `capacity` that the `seen`-th item offered
    takes (pushing out what held it), or None when it is not kept. The first `capacity` items
    fill the slots in turn; item n > capacity is kept with probability capacity / n, in a
    uniformly drawn slot, which leaves every item seen so far in the reservoir with
    probability capacity / n."""
    if seen <= capacity:
        return seen - 1
    slot = rng.randrange(seen)
    return slot if slot < capacity else None


def _task_for(project: Project, task: CaptureTask) -> tuple[Task | None, bool]:
    """The stored task the group names, else the task of its content (made on first sight,
    unassigned); None when it names a task the project lacks and gives no content."""
    if task.stored_id is not None:
        found = Task.objects.filter(project=project, external_id=task.stored_id).first()
        if found is not None or not task.prompt:
            return found, False
    external_id = capture_task_id(
        prompt=task.prompt, instructions=task.instructions, documents=task.documents
    )
    made, created = Task.objects.get_or_create(
        project=project,
        external_id=external_id,
        defaults={
            "prompt": task.prompt,
            "instructions": task.instructions,
            "split": Split.UNASSIGNED,
        },
    )
    if created:
        Document.objects.bulk_create(
            Document(task=made, external_id=doc_id, title=title, text=text, position=position)
            for position, (doc_id, title, text) in enumerate(task.documents)
        )
    return made, created


def _group_store(group: CaptureGroup, origin: CaptureOrigin, rng: random.Random) -> CaptureReport:
    report = CaptureReport()
    task, created = _task_for(origin.project, group.task)
    if task is None:
        _log.warning("capture: task %r is not in project %s", group.task.stored_id, origin.project)
        return report
    report.tasks_created = int(created)
    # The reservoir row's lock orders concurrent captures of this task: the dedup check and
    # the count below read what the previous capture wrote. (SQLite has no row locks; its
    # IMMEDIATE transactions serialize every writer instead.)
    reservoir = CaptureReservoir.objects.select_for_update().filter(task=task).first()
    if reservoir is None:  # the task's first capture: make the row (once, if two race), lock it
        CaptureReservoir.objects.bulk_create([CaptureReservoir(task=task)], ignore_conflicts=True)
        reservoir = CaptureReservoir.objects.select_for_update().get(task=task)
    fresh: dict[str, tuple[int, ResponseInput]] = {}
    for position, response in enumerate(group.responses):
        messages = None if response.messages is None else [dict(m) for m in response.messages]
        fresh.setdefault(response_content_hash(response.text, messages), (position, response))
    held = set(
        CapturedResponse.objects.filter(task=task, content_hash__in=list(fresh)).values_list(
            "content_hash", flat=True
        )
    )
    report.duplicate_responses = len(group.responses) - len(fresh) + len(held)
    new = {digest: item for digest, item in fresh.items() if digest not in held}
    if not new:
        return report
    report.groups = 1
    seen = reservoir.groups_seen + 1
    CaptureReservoir.objects.filter(pk=reservoir.pk).update(groups_seen=seen)
    slot = reservoir_slot(seen=seen, capacity=capture_groups_per_task(), rng=rng)
    if slot is None:
        report.not_kept = 1
        return report
    _slot_free(task, slot, report)
    captured = CapturedGroup.objects.create(
        project=origin.project,
        task=task,
        slot=slot,
        source=origin.source,
        metagrader_id=_owner(Metagrader, origin.metagrader_id, origin.project),
        token_id=_owner(ApiToken, origin.token_id, origin.project),
        run=group.run,
        step=group.step,
    )
    rows = [
        Response(
            project=origin.project,
            task=task,
            external_id=_response_id(task, digest),
            content=response.text if response.messages is None else "",
            messages=None if response.messages is None else [dict(m) for m in response.messages],
        )
        for digest, (_, response) in new.items()
    ]
    stored = Response.objects.bulk_create(rows)
    CapturedResponse.objects.bulk_create(
        CapturedResponse(
            group=captured,
            response=row,
            task=task,
            content_hash=digest,
            reward=group.rewards[position],
            position=position,
        )
        for row, (digest, (position, _)) in zip(stored, new.items(), strict=True)
    )
    report.captured_groups = 1
    report.captured_responses = len(stored)
    return report


def _owner(model: type[ApiToken | Metagrader], pk: int | None, project: Project) -> Any:
    """The row `pk` of `model` in `project` as a subquery of the group's INSERT: null when
    there is none (or no longer one), so a token or grader deleted since the draw leaves the
    group without it, as deleting one later would."""
    if pk is None:
        return None
    return Subquery(model.objects.filter(pk=pk, project=project).values("pk")[:1])


def _response_id(task: Task, digest: str) -> str:
    """Opaque, so the task page (which lists response ids) says nothing of where it came from."""
    return hashlib.sha256(f"{task.external_id}\n{digest}".encode()).hexdigest()[:RESPONSE_ID_DIGITS]


def _slot_free(task: Task, slot: int, report: CaptureReport) -> None:
    """Push the group in `slot` out of the reservoir: deleted with its responses, unless an
    expert labeled one of them or was served a pair of them (a label may be on its way), in
    which case it stays, with no slot.

    One query finds the group and its responses, one asks whether any is labeled or served,
    and the deletion loads the responses' ids only, never their text: the ORM's cascade over
    whole rows took 26 queries and most of a capture's time."""
    rows = list(
        CapturedGroup.objects.filter(task=task, slot=slot).values_list("pk", "members__response")
    )
    if not rows:
        return
    group_pk = rows[0][0]
    ids = [response for _, response in rows if response is not None]
    served = QueueAssignment.objects.filter(
        Q(pair__response_a=OuterRef("pk")) | Q(pair__response_b=OuterRef("pk"))
    )
    labeled = (
        Response.objects.filter(pk__in=ids)
        .filter(
            Exists(Preference.objects.filter(response_a=OuterRef("pk")))
            | Exists(Preference.objects.filter(response_b=OuterRef("pk")))
            | Exists(CriterionGrade.objects.filter(response=OuterRef("pk")))
            | Exists(Score.objects.filter(response=OuterRef("pk")))
            | Exists(served)
        )
        .exists()
    )
    if labeled:
        CapturedGroup.objects.filter(pk=group_pk).update(slot=None)
        report.kept_labeled += 1
        return
    Response.objects.filter(pk__in=ids).only("pk").delete()
    CapturedGroup.objects.filter(pk=group_pk).delete()
    report.evicted += 1


# The bulk endpoint's log ---------------------------------------------------------------------


@dataclass
class _LogGroup:
    task: CaptureTask
    line: int
    responses: list[ResponseInput] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)


def _extra_fields(line: int, data: Mapping[str, Any], errors: list[LineError]) -> tuple[Any, ...]:
    """run, step, reward and group of a response line, each checked with a clear error (and
    left out when bad: the log is rejected anyway)."""
    run, step, reward, group = (data.get(name) for name in ("run", "step", "reward", "group"))
    if run is not None and not (isinstance(run, str) and 1 <= len(run) <= MAX_RUN):
        errors.append(LineError(line, "run", f"expected a string of 1 to {MAX_RUN} characters"))
        run = None
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP
    ):
        errors.append(LineError(line, "step", "expected a whole number, 0 or more"))
        step = None
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
    ):
        errors.append(LineError(line, "reward", "expected a finite number or null"))
        reward = None
    if group is not None and not (isinstance(group, str) and len(group) <= MAX_ID):
        errors.append(LineError(line, "group", f"expected a string of at most {MAX_ID} characters"))
        group = None
    return run or "", step, None if reward is None else float(reward), group or ""


def capture_log_parse(*, project: Project, body: bytes) -> list[CaptureGroup]:
    """A capture log (JSON Lines: FORMATS.md's task and response records, responses with
    optional run, step, reward and group) as groups: the responses with the same task, run,
    step and group, in file order. A task record names a task by its content: its id must be
    capture_task_id of that content (so a log can never change a stored task); a response's
    task is such a record or a task of the project. Raises ImportRejected naming every bad
    line and field."""
    file_head_check(body[:SNIFF_BYTES])  # an image or a zip is one error, not one per line
    errors: list[LineError] = []
    tasks: dict[str, TaskRecord] = {}
    responses: list[tuple[int, ResponseRecord, tuple[Any, ...]]] = []
    seen: dict[str, tuple[int, bytes]] = {}
    for number, raw in enumerate(body.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            record = record_parse(raw)
        except RecordInvalid as exc:
            errors += [LineError(number, name, message) for name, message in exc.problems]
            continue
        if isinstance(record, TaskRecord):
            expected = capture_task_id(
                prompt=record.prompt,
                instructions=record.instructions,
                documents=[(d.id, d.title, d.text) for d in record.documents],
            )
            if record.id != expected:
                errors.append(
                    LineError(
                        number,
                        "id",
                        f"a task in a capture log is named by the hash of its content, "
                        f"{expected}; to capture for a stored task, name it in each "
                        "response's task field instead",
                    )
                )
            tasks[record.id] = record
        elif isinstance(record, ResponseRecord):
            earlier = seen.get(record.id)
            if earlier is not None:
                if earlier[1] != raw:
                    errors.append(
                        LineError(number, "id", f"conflicts with line {earlier[0]} (same id)")
                    )
                continue
            seen[record.id] = (number, raw)
            responses.append((number, record, _extra_fields(number, json_parse(raw), errors)))
        else:
            errors.append(
                LineError(number, "type", "a capture log holds task and response records only")
            )
    named = {r.task for _, r, _ in responses if r.task not in tasks}
    stored = set(
        Task.objects.filter(project=project, external_id__in=named).values_list(
            "external_id", flat=True
        )
    )
    groups: dict[tuple[str, str, int | None, str], _LogGroup] = {}
    for number, r, (run, step, reward, group_name) in responses:
        if r.task in tasks:
            given = tasks[r.task]
            task = CaptureTask(
                stored_id=None,
                prompt=given.prompt,
                instructions=given.instructions,
                documents=tuple((d.id, d.title, d.text) for d in given.documents),
            )
        elif r.task in stored:
            task = CaptureTask(stored_id=r.task, prompt="")
        else:
            errors.append(
                LineError(number, "task", f"task {r.task!r} not found in this log or the project")
            )
            continue
        messages = None
        if r.messages is not None:
            messages = tuple(message.model_dump(exclude_none=True) for message in r.messages)
        response = ResponseInput(r.id, r.content or "", messages)
        entry = groups.setdefault((r.task, run, step, group_name), _LogGroup(task, number))
        entry.responses.append(response)
        entry.rewards.append(reward)
    if errors:
        errors.sort(key=lambda error: error.line)
        raise ImportRejected(errors[:MAX_REPORTED_ERRORS], len(errors))
    return [
        CaptureGroup(g.task, tuple(g.responses), tuple(g.rewards), run, step)
        for (_, run, step, _), g in groups.items()
    ]


@transaction.atomic
def capture_log_store(
    *, project: Project, token: ApiToken, body: bytes, rng: random.Random = _rng
) -> CaptureReport:
    """Store a capture log all or nothing: ImportRejected (nothing written) for any bad
    line; every group goes through the reservoir and dedup as sampled API traffic does, at
    rate 1 (the sender chose what to send)."""
    groups = capture_log_parse(project=project, body=body)
    origin = CaptureOrigin(project, CaptureSource.BULK, token.pk)
    report = CaptureReport()
    for group in groups:
        report.add(_group_store(group, origin, rng))
    return report
