"""Running a grading run: claim tasks in chunks, grade each chunk concurrently through the
async judge client, store grades under unique constraints, report progress, stop on cancel or
when the budget is spent, and resume where it stopped.

Idempotency: a task is claimed with a conditional UPDATE (pending, or running but abandoned by
a dead worker), grades are unique per run and response, and every deterministic judge answer is
in the cache, so a redelivered or resumed run repeats no finished work and no judge call."""

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from graders.engine.judge import (
    Budget,
    BudgetExhausted,
    CallsStopped,
    ChatRequest,
    ChatResult,
    JudgeClient,
    JudgeSettings,
    Usage,
)
from graders.engine.programs import (
    Criterion,
    DocumentInput,
    GeneratedRubric,
    Grade,
    Judge,
    Program,
    ResponseInput,
    TaskInput,
    gather_all,
    grade_group_pairwise,
    grade_rubric,
    grade_scalar,
    grading_requests,
    program_validate,
    rubric_generate,
)
from graders.evaluation import grading_evaluate
from graders.judge_cache import DatabaseJudgeCache
from graders.models import Grade as GradeRow
from graders.models import GradingItem, GradingRun, ItemStatus, JudgeEndpoint
from graders.services import endpoint_settings
from labeling.jobs import (
    JobCancelled,
    job_budget_stop,
    job_cancel_reason,
    job_cancel_requested,
    job_finish,
    job_progress,
    job_requeue,
)
from labeling.models import AuthorKind, Job, JobStatus, Response, Rubric, Task
from labeling.rubric_items import rubric_items_replace


def chunk_size(settings: JudgeSettings) -> int:
    """Tasks claimed at once: enough to keep the endpoint's calls in flight (a task issues
    several), few enough that progress moves often; one at a time for a one-slot local judge."""
    return max(1, min(16, settings.max_concurrency // 4))


ABANDONED = timedelta(minutes=15)
RECHECK_SECONDS = 60


@dataclass(frozen=True)
class TaskWork:
    item_pk: int
    task_pk: int
    task: TaskInput
    responses: tuple[ResponseInput, ...]
    response_pks: dict[str, int]
    rubric: tuple[Criterion, ...] | None


@dataclass(frozen=True)
class TaskOutcome:
    work: TaskWork
    grades: tuple[Grade, ...]
    generated: GeneratedRubric | None


def rubric_origin(program: Program) -> str:
    """Generated rubrics are stored per program, so a reviewed or re-run rubric is reused."""
    return program.content_hash


def _items_claim(run: GradingRun, size: int) -> list[GradingItem]:
    now = timezone.now()
    claimable = Q(status=ItemStatus.PENDING) | Q(
        status=ItemStatus.RUNNING, claimed_at__lt=now - ABANDONED
    )
    claimed = []
    for item in GradingItem.objects.filter(claimable, run=run).order_by("pk")[: size * 2]:
        taken = GradingItem.objects.filter(claimable, pk=item.pk).update(
            status=ItemStatus.RUNNING, claimed_at=now
        )
        if taken == 1:
            claimed.append(item)
        if len(claimed) == size:
            break
    return claimed


def _work_load(items: Sequence[GradingItem], program: Program) -> list[TaskWork]:
    tasks = Task.objects.prefetch_related("documents").in_bulk([item.task_id for item in items])
    documents: dict[int, list[DocumentInput]] = {}
    for task in tasks.values():
        documents[task.pk] = [
            DocumentInput(d.external_id, d.title, d.text) for d in task.documents.all()
        ]
    responses: dict[int, list[Response]] = {}
    for response in Response.objects.filter(task_id__in=tasks).order_by("external_id"):
        responses.setdefault(response.task_id, []).append(response)
    rubrics: dict[int, tuple[Criterion, ...]] = {}
    if program.rubric_steps:
        stored = Rubric.objects.filter(
            task_id__in=tasks, author_kind=AuthorKind.GENERATED, origin=rubric_origin(program)
        ).prefetch_related("items")
        for rubric in stored:
            rubrics[rubric.task_id] = tuple(
                Criterion(item.key, item.text, item.weight) for item in rubric.items.all()
            )
    work = []
    for item in items:
        task = tasks[item.task_id]
        group = responses.get(task.pk, [])
        work.append(
            TaskWork(
                item_pk=item.pk,
                task_pk=task.pk,
                task=TaskInput(
                    task.external_id, task.prompt, task.instructions, tuple(documents[task.pk])
                ),
                responses=tuple(
                    ResponseInput(
                        r.external_id,
                        r.content,
                        None if r.messages is None else tuple(r.messages),
                    )
                    for r in group
                ),
                response_pks={r.external_id: r.pk for r in group},
                rubric=rubrics.get(task.pk),
            )
        )
    return work


async def _task_grade(program: Program, judge: Judge, work: TaskWork) -> TaskOutcome:
    generated = None
    rubric = work.rubric
    if program.rubric_steps and rubric is None:
        generated = await rubric_generate(program, work.task, judge)
        if generated.error is not None:
            failed = tuple(
                Grade(r.id, None, f"rubric generation failed: {generated.error}", generated.trace)
                for r in work.responses
            )
            return TaskOutcome(work, failed, generated)
        rubric = generated.criteria
    if program.kind in ("pairwise", "pairwise_rubric"):
        grades = await grade_group_pairwise(
            program, work.task, work.responses, judge, rubric=rubric
        )
    elif program.kind == "rubric":
        assert rubric is not None
        grades = await gather_all(
            grade_rubric(program, work.task, rubric, r, judge) for r in work.responses
        )
    else:
        grades = await gather_all(
            grade_scalar(program, work.task, r, judge) for r in work.responses
        )
    return TaskOutcome(work, tuple(grades), generated)


@dataclass(frozen=True)
class ChunkResult:
    outcomes: list[TaskOutcome]
    usage: Usage
    budget_spent: bool
    stopped: bool  # the job was cancelled: no judge call was sent after that


class _CountingJudge:
    """The judge client, counting the requests answered (cache hits included) and calling
    `counted(count)` after each."""

    def __init__(self, judge: Judge, counted: Callable[[int], None]) -> None:
        self.judge, self.counted, self.count = judge, counted, 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        result = await self.judge.complete(request)
        self.count += 1
        self.counted(self.count)
        return result


def _requests_expected(program: Program, work: Sequence[TaskWork]) -> int | None:
    """The judge requests grading `work` makes when no step fails; None when a rubric is still
    to be written, since its size is not known yet."""
    if program.rubric_steps and any(w.rubric is None for w in work):
        return None
    return sum(grading_requests(program, len(w.responses), len(w.rubric or ())) for w in work)


class RunUsageCache(DatabaseJudgeCache):
    """The database judge cache of one pass over a run, which also keeps the run's stored usage
    live: after each new answer it stores (at most once a second) and at the end of each chunk
    it adds what the chunk's judge client has spent since the last time. The run, search and
    job pages all read that stored usage, so a slow judge's run shows its judge calls and
    spending long before a task is done, and every page shows the same count under one name."""

    def __init__(self, endpoint: JudgeEndpoint, run: GradingRun) -> None:
        super().__init__(endpoint)
        self.grading_run = run
        self.client_usage = Usage()
        self.stored = Usage()
        self.stored_at = -1.0

    def chunk_start(self, usage: Usage) -> None:
        """Watch the usage of a new chunk's judge client (called before it makes a call)."""
        self.client_usage, self.stored = usage, Usage()

    def chunk_end(self, usage: Usage) -> None:
        """Store the rest of the chunk's usage, `usage` being its final figures."""
        self.client_usage = usage
        self._store()

    def _put(self, row_key: str, value: dict[str, Any]) -> None:
        super()._put(row_key, value)
        if time.monotonic() - self.stored_at >= 1.0:
            self._store()

    def _store(self) -> None:
        # The client's counters move on the event loop's thread meanwhile: a snapshot may be a
        # call behind, and the next store (at the latest chunk_end, with the final figures)
        # adds the difference, so the stored total is exact once the chunk is done.
        current = Usage(**self.client_usage.as_dict())
        delta = Usage(
            **{key: value - getattr(self.stored, key) for key, value in current.as_dict().items()}
        )
        self.stored, self.stored_at = current, time.monotonic()
        _usage_add(self.grading_run, delta)


async def _chunk_grade(
    program: Program,
    settings: JudgeSettings,
    cache: RunUsageCache,
    budget: Budget,
    work: list[TaskWork],
    stop: Callable[[], bool] | None = None,
    counted: Callable[[int], None] | None = None,
) -> ChunkResult:
    """Grade a chunk of tasks; the tasks finished before a budget stop or a cancel are kept,
    and the usage always comes back, so no spend goes unaccounted."""
    async with JudgeClient(settings, cache=cache, budget=budget, stop=stop) as client:
        cache.chunk_start(client.usage)
        judge: Judge = client if counted is None else _CountingJudge(client, counted)
        results = await asyncio.gather(
            *(_task_grade(program, judge, w) for w in work), return_exceptions=True
        )
    outcomes = [r for r in results if isinstance(r, TaskOutcome)]
    errors = [r for r in results if isinstance(r, BaseException)]
    stops = (BudgetExhausted, CallsStopped)
    if any(not isinstance(e, stops) for e in errors):
        raise next(e for e in errors if not isinstance(e, stops))
    return ChunkResult(
        outcomes,
        client.usage,
        budget_spent=any(isinstance(e, BudgetExhausted) for e in errors),
        stopped=any(isinstance(e, CallsStopped) for e in errors),
    )


def _trace_json(grade: Grade) -> list[dict[str, Any]]:
    steps = list(grade.trace)
    for comparison in grade.comparisons:
        steps.extend(comparison.trace)
    return [asdict(step) for step in steps]


def _outcomes_store(run: GradingRun, program: Program, outcomes: list[TaskOutcome]) -> None:
    with transaction.atomic():
        for outcome in outcomes:
            if outcome.generated is not None and outcome.generated.error is None:
                rubric, created = Rubric.objects.get_or_create(
                    task_id=outcome.work.task_pk,
                    author_kind=AuthorKind.GENERATED,
                    origin=rubric_origin(program),
                )
                if created:
                    rubric_items_replace(
                        rubric=rubric,
                        items=[
                            {"id": c.id, "text": c.text, "weight": c.weight}
                            for c in outcome.generated.criteria
                        ],
                        editor=f"grader {run.metagrader_id}",
                    )
            GradeRow.objects.bulk_create(
                [
                    GradeRow(
                        run=run,
                        response_id=outcome.work.response_pks[grade.response_id],
                        reward=grade.reward,
                        error=grade.error or "",
                        criteria=[
                            {
                                "id": c.criterion.id,
                                "text": c.criterion.text,
                                "weight": c.criterion.weight,
                                "passed": c.passed,
                                "error": c.error,
                            }
                            for c in grade.criteria
                        ],
                        trace=_trace_json(grade),
                    )
                    for grade in outcome.grades
                ],
                ignore_conflicts=True,  # a second delivery of the same task changes nothing
            )
            GradingItem.objects.filter(pk=outcome.work.item_pk).update(status=ItemStatus.DONE)


def _usage_add(run: GradingRun, usage: Usage) -> None:
    # Locked, because two deliveries of one run may add their usage at the same time.
    with transaction.atomic():
        locked = GradingRun.objects.select_for_update().get(pk=run.pk)
        totals = dict(locked.usage)
        for key, value in usage.as_dict().items():
            totals[key] = totals.get(key, 0) + value
        GradingRun.objects.filter(pk=run.pk).update(usage=totals)
        Job.objects.filter(pk=run.job_id).update(cost=round(totals.get("cost", 0.0), 6))
    run.usage = totals


def _claims_release(run: GradingRun, items: Sequence[GradingItem]) -> None:
    GradingItem.objects.filter(pk__in=[i.pk for i in items], status=ItemStatus.RUNNING).update(
        status=ItemStatus.PENDING, claimed_at=None
    )


def run_budget(max_calls: int | None, max_cost: float | None, spent: dict[str, Any]) -> Budget:
    """What is left of a budget after `spent` (a usage dict)."""
    return Budget(
        max_calls=None if max_calls is None else max(0, max_calls - int(spent.get("calls", 0))),
        max_cost=None if max_cost is None else max(0.0, max_cost - float(spent.get("cost", 0.0))),
    )


class StageShown:
    """A run_grade `checked` callback that shows a pass's progress in its job's stage
    ("Grading tasks · 7 of 25 checks"): the judge requests answered of those the current batch
    of tasks needs, cache hits included. Written at most once a second (the job pages poll
    about as often), and always when a batch starts and when its checks are all answered. The
    judge calls and spending show beside it from the run's stored usage (RunUsageCache)."""

    INTERVAL_S = 1.0

    def __init__(self, *, job_pk: int, stage: str) -> None:
        self.job_pk, self.stage = job_pk, stage
        self.shown = 0.0

    def checked(self, done: int, total: int) -> None:
        if done != 0 and done < total and time.monotonic() - self.shown < self.INTERVAL_S:
            return
        self.shown = time.monotonic()
        Job.objects.filter(pk=self.job_pk).update(stage=f"{self.stage} · {done} of {total} checks")


def run_grade(
    run: GradingRun,
    *,
    budget: Budget,
    progress: Callable[[int, int], None],
    checked: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> tuple[Usage, bool]:
    """Grade every task of the run that can be claimed, chunk by chunk, storing each chunk's
    grades as it lands and its usage as it is spent (RunUsageCache); `progress(done, total)` is
    called before each chunk and may raise (JobCancelled) to stop; `checked(done, total)`, if
    given, after each judge request answered (cache hits included), with those of the chunk so
    far and all it needs (when known before it starts). `cancelled()`, if given, is asked
    before each new judge call: once it says True, no call is sent, the chunk's finished tasks
    are stored and JobCancelled is raised. Returns this pass's usage and whether the budget ran
    out; claims are released on any way out, so nothing stays held. Every callback runs on the
    calling thread (it may use the database)."""
    program = program_validate(run.metagrader.program)
    settings = endpoint_settings(run.endpoint)
    total = GradingItem.objects.filter(run=run).count()
    cache = RunUsageCache(run.endpoint, run)
    # The engine's loop runs on a helper thread: callbacks go back to this one through the cache.
    stop = None if cancelled is None else lambda: bool(cache.call(cancelled))
    usage = Usage()
    items: list[GradingItem] = []
    try:
        while True:
            progress(GradingItem.objects.filter(run=run, status=ItemStatus.DONE).count(), total)
            items = _items_claim(run, chunk_size(settings))
            if not items:
                return usage, False
            work = _work_load(items, program)
            chunk = cache.run(
                _chunk_grade(
                    program,
                    settings,
                    cache,
                    budget,
                    work,
                    stop,
                    _checks_counter(cache, checked, program, work),
                )
            )
            _outcomes_store(run, program, chunk.outcomes)
            cache.chunk_end(chunk.usage)
            for key, value in chunk.usage.as_dict().items():
                setattr(usage, key, getattr(usage, key) + value)
            if chunk.stopped:
                raise JobCancelled
            if chunk.budget_spent:
                return usage, True
    finally:
        _claims_release(run, items)


def _checks_counter(
    cache: DatabaseJudgeCache,
    checked: Callable[[int, int], None] | None,
    program: Program,
    work: Sequence[TaskWork],
) -> Callable[[int], None] | None:
    """A _chunk_grade `counted` callback that reports to `checked` on the calling thread."""
    expected = _requests_expected(program, work)
    if checked is None or expected is None:
        return None
    if expected:
        checked(0, expected)
    return lambda count: cache.call(checked, count, expected)


def run_complete(run: GradingRun) -> bool:
    return not GradingItem.objects.filter(run=run).exclude(status=ItemStatus.DONE).exists()


def grading_run_execute(*, run_id: int) -> dict[str, Any]:
    """Grade every task of the run not graded yet. Safe to call again at any time."""
    run = GradingRun.objects.select_related("job", "metagrader", "endpoint").get(pk=run_id)
    job = run.job
    # A redelivery after a worker died finds the job already running and resumes it.
    Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=timezone.now()
    )
    job.refresh_from_db()
    if job.status != JobStatus.RUNNING:
        return {"run": run_id, "skipped": True}

    def progress(done: int, total: int) -> None:
        job_progress(job=job, stage="Grading tasks", done=done, total=total)

    shown = StageShown(job_pk=job.pk, stage="Grading tasks")
    try:
        _, budget_spent = run_grade(
            run,
            budget=run_budget(run.max_calls, run.max_cost, run.usage),
            progress=progress,
            checked=shown.checked,
            cancelled=lambda: job_cancel_requested(job=job),
        )
    except JobCancelled:
        reason = job_cancel_reason(job=job, default="Cancelled; grades so far are kept.")
        job_finish(job=job, status=JobStatus.CANCELLED, error=reason)
        return {"run": run_id, "status": "cancelled"}
    except Exception as exc:
        job_finish(job=job, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    if budget_spent:
        job_budget_stop(job=job, usage=run.usage)
        return {"run": run_id, "status": "budget"}
    if not run_complete(run):
        # Another delivery still holds tasks, or a dead one did until its claims go stale:
        # look again later, and whoever finishes the last task finishes the run.
        from graders.tasks import grading_run_task

        grading_run_task.apply_async((run.pk,), countdown=RECHECK_SECONDS)
        return {"run": run_id, "status": "waiting"}
    run_finish(run)
    return {"run": run_id, "status": "succeeded"}


def run_finish(run: GradingRun) -> None:
    """Evaluate a complete run and mark its job done."""
    total = GradingItem.objects.filter(run=run).count()
    run.evaluation = grading_evaluate(run=run)
    run.save(update_fields=["evaluation"])
    job_progress(job=run.job, stage="Done", done=total, total=total)
    job_finish(job=run.job, status=JobStatus.SUCCEEDED, result={"graded_tasks": total})


def grading_run_resume(
    *, run: GradingRun, max_calls: int | None = None, max_cost: float | None = None
) -> None:
    """Queue a stopped (cancelled, failed or budget-spent) run again, with a new budget in
    calls or dollars where one is given (totals for the run, what it spent included); the
    finished tasks and the cached judge answers stay."""
    from graders.tasks import grading_run_task

    with transaction.atomic():
        job_requeue(row=run, max_calls=max_calls, max_cost=max_cost)
        grading_run_task.delay_on_commit(run.pk)
