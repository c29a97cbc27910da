"""Running a blind audit: every criterion of the audit's tasks, one judge call each, in chunks.

Blinding: the work items carry the author only so the verdict can be stored against it; the
engine is given the task and the criterion's text and nothing else. The items of all authors
are shuffled together with the run's seed, so neither the order of the calls nor the make-up of
a chunk follows a rubric.

Idempotency: one worker runs an audit at a time, under a lease it keeps fresh (labeling.jobs);
verdicts are unique per run and rubric item, and every deterministic judge answer is cached. So
a redelivered, resumed or restarted audit audits only what has no verdict yet, and whatever it
had already paid for comes back from the cache."""

import asyncio
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.db import transaction

from graders.engine.audit import AuditVerdict as Verdict
from graders.engine.audit import audit_criterion
from graders.engine.judge import Budget, BudgetExhausted, JudgeClient, JudgeSettings, Usage
from graders.engine.programs import DocumentInput, TaskInput
from graders.grading import run_budget
from graders.judge_cache import DatabaseJudgeCache
from graders.services import endpoint_settings
from labeling.jobs import BudgetSpent, JobHeartbeat, job_progress, job_run_leased
from labeling.models import Job, JobStatus, RubricItem, Task
from reviews.models import AuditRun, AuditVerdict

STAGE = "Auditing criteria"


def chunk_size(settings: JudgeSettings) -> int:
    """Criteria audited between two progress reports: enough to keep the endpoint's calls in
    flight, few enough that progress moves and a cancel is seen soon."""
    return max(4, min(64, settings.max_concurrency * 4))


@dataclass(frozen=True)
class CriterionWork:
    item_pk: int
    task_pk: int
    author_kind: str
    text: str
    task: TaskInput


@dataclass(frozen=True)
class ChunkResult:
    verdicts: list[tuple[CriterionWork, Verdict]]
    usage: Usage
    budget_spent: bool


def work_load(run: AuditRun) -> list[CriterionWork]:
    """The criteria of the audit's tasks that have no verdict yet, shuffled across authors."""
    audited = AuditVerdict.objects.filter(run=run, rubric_item__isnull=False).values(
        "rubric_item_id"
    )
    items = (
        RubricItem.objects.filter(rubric__task__in=run.tasks.all())
        .exclude(pk__in=audited)
        .values_list("pk", "rubric__task_id", "rubric__author_kind", "text")
        .order_by("pk")
    )
    tasks = Task.objects.prefetch_related("documents").in_bulk({item[1] for item in items})
    inputs = {
        pk: TaskInput(
            task.external_id,
            task.prompt,
            task.instructions,
            tuple(DocumentInput(d.external_id, d.title, d.text) for d in task.documents.all()),
        )
        for pk, task in tasks.items()
    }
    work = [
        CriterionWork(pk, task_pk, author_kind, text, inputs[task_pk])
        for pk, task_pk, author_kind, text in items
    ]
    random.Random(run.seed).shuffle(work)
    return work


async def chunk_audit(
    settings: JudgeSettings,
    cache: DatabaseJudgeCache,
    budget: Budget,
    work: Sequence[CriterionWork],
) -> ChunkResult:
    """Audit a chunk concurrently; the verdicts finished before a budget stop are kept, and
    the usage always comes back, so no spend goes unaccounted."""
    async with JudgeClient(settings, cache=cache, budget=budget) as judge:
        outcomes = await asyncio.gather(
            *(audit_criterion(judge, w.task, w.text) for w in work), return_exceptions=True
        )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    unexpected = [e for e in errors if not isinstance(e, BudgetExhausted)]
    if unexpected:
        raise unexpected[0]
    verdicts = [(w, o) for w, o in zip(work, outcomes, strict=True) if isinstance(o, Verdict)]
    return ChunkResult(verdicts, judge.usage, budget_spent=bool(errors))


def _verdicts_store(run: AuditRun, verdicts: list[tuple[CriterionWork, Verdict]]) -> None:
    AuditVerdict.objects.bulk_create(
        [
            AuditVerdict(
                run=run,
                rubric_item_id=work.item_pk,
                task_id=work.task_pk,
                author_kind=work.author_kind,
                criterion_text=work.text,
                specificity=verdict.specificity or "",
                grounding=verdict.grounding or "",
                quote=verdict.quote,
                omission=verdict.omission,
                quote_missing=verdict.quote_missing,
                error=verdict.error or "",
                trace=asdict(verdict.trace),
            )
            for work, verdict in verdicts
        ],
        ignore_conflicts=True,  # a verdict stored by an earlier pass stays as it was
    )


def _usage_add(run: AuditRun, usage: Usage) -> None:
    with transaction.atomic():
        locked = AuditRun.objects.select_for_update().get(pk=run.pk)
        totals = dict(locked.usage)
        for key, value in usage.as_dict().items():
            totals[key] = totals.get(key, 0) + value
        AuditRun.objects.filter(pk=run.pk).update(usage=totals)
        Job.objects.filter(pk=run.job_id).update(cost=round(totals.get("cost", 0.0), 6))
    run.usage = totals


def audit_pass(run: AuditRun, job: Job, heartbeat: JobHeartbeat) -> dict[str, Any]:
    """Audit what has no verdict yet, chunk by chunk, storing each chunk as it lands; returns
    the job's result. Raises JobCancelled or LeaseLost between chunks, BudgetSpent when the
    budget runs out."""
    settings = endpoint_settings(run.endpoint)
    cache = DatabaseJudgeCache(run.endpoint)
    budget = run_budget(run.max_calls, run.max_cost, run.usage)
    work = work_load(run)
    done = AuditVerdict.objects.filter(run=run).count()
    total = done + len(work)
    size = chunk_size(settings)
    for start in range(0, len(work), size):
        heartbeat.check()
        job_progress(job=job, stage=STAGE, done=done, total=total)
        chunk = cache.run(chunk_audit(settings, cache, budget, work[start : start + size]))
        _verdicts_store(run, chunk.verdicts)
        _usage_add(run, chunk.usage)
        done = AuditVerdict.objects.filter(run=run).count()
        if chunk.budget_spent:
            raise BudgetSpent
    job_progress(job=job, stage="Done", done=done, total=total)
    verdicts = AuditVerdict.objects.filter(run=run)
    return {"criteria": verdicts.count(), "failed": verdicts.exclude(error="").count()}


def audit_run_execute(*, run_id: int) -> dict[str, Any]:
    """Run or resume an audit (labeling.jobs.job_run_leased: safe to call any number of
    times)."""
    run = AuditRun.objects.select_related("endpoint").get(pk=run_id)
    outcome = job_run_leased(
        job_id=run.job_id,
        work=lambda job, heartbeat: audit_pass(run, job, heartbeat),
        resend=lambda countdown: audit_run_task.apply_async((run_id,), countdown=countdown),
        cancelled="Cancelled; the verdicts so far are kept. Resume to go on.",
    )
    return {"audit": run_id, **outcome}


@shared_task(acks_late=True, reject_on_worker_lost=True)
def audit_run_task(run_id: int) -> dict[str, Any]:
    return audit_run_execute(run_id=run_id)


@worker_ready.connect
def audit_runs_recover(**_: Any) -> None:
    """Send again the audits a dead worker left running: a broker may hold their messages
    until a visibility timeout, or have lost them (the file-system broker). An audit whose
    holder is alive keeps its lease; the extra message only looks again later."""
    running = AuditRun.objects.filter(job__status=JobStatus.RUNNING).values_list("pk", flat=True)
    for pk in running:
        audit_run_task.delay(pk)
