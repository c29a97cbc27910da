"""The one Job row every background job reports through: progress, cost, errors, cancel.

Workers claim a job with a conditional UPDATE (queued -> running) and check that exactly one
row changed, so a second delivery of the same Celery message finds nothing to do.
"""

import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from labeling.models import Job, JobStatus, Project
from labeling.notifications import notify_job_stopped


class JobCancelled(Exception):
    """Raised inside a running job when someone asked to cancel it."""


def job_create(
    *, kind: str, project: Project | None, user: Any = None, params: dict[str, Any] | None = None
) -> Job:
    return Job.objects.create(
        kind=kind,
        project=project,
        created_by=user if user is not None and user.is_authenticated else None,
        params=params or {},
    )


def job_claim(*, job_id: int, redelivered: bool = False) -> Job | None:
    """Move a queued job to running; None if another delivery already took it. A message the
    broker delivers again after its worker died (`redelivered`) may also take back a job left
    running: only for jobs whose work is all or nothing, so starting over is safe."""
    claimable = [JobStatus.QUEUED, JobStatus.RUNNING] if redelivered else [JobStatus.QUEUED]
    claimed = Job.objects.filter(pk=job_id, status__in=claimable).update(
        status=JobStatus.RUNNING, started_at=timezone.now()
    )
    if claimed != 1:
        return None
    return Job.objects.get(pk=job_id)


def budget_spent_text(usage: Mapping[str, Any]) -> str:
    """Why a job stopped on its budget, with what it had spent by then (a usage dict: its
    cost, and its calls when known)."""
    spent = f"${float(usage.get('cost', 0.0)):.4f}"
    if "calls" in usage:
        calls = int(usage["calls"])
        spent = f"{calls} judge call{'' if calls == 1 else 's'} and {spent}"
    return (
        f"The budget is spent: {spent} at the stop. Raise it and resume; finished work and "
        "cached judge answers are kept."
    )


class BudgetSpent(Exception):
    """A job's budget in calls or money ran out; the message, if any, says what was spent."""


def job_budget_stop(*, job: Job, usage: Mapping[str, Any]) -> None:
    """Record a budget stop: its own status (not a failure) and what was spent by then."""
    job_finish(job=job, status=JobStatus.BUDGET_SPENT, error=budget_spent_text(usage))


class LeaseLost(Exception):
    """This worker's lease on a job went stale and another worker may have taken it over."""


def job_lease_take(*, job_id: int, owner: str) -> Job | None:
    """Take a job to run alone: a queued one, or a running one whose holder stopped beating
    (its worker died). None while another worker's lease is fresh, or once the job is over.

    Long jobs that one worker runs start to finish (searches) use this instead of job_claim,
    so a worker restarted after a crash, or a broker's redelivery, takes the work back."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.JOB_LEASE_SECONDS)
    takeable = Q(status=JobStatus.QUEUED) | Q(status=JobStatus.RUNNING) & (
        Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True)
    )
    job = Job.objects.filter(pk=job_id).only("started_at").first()
    if job is None:
        return None
    taken = Job.objects.filter(takeable, pk=job_id).update(
        status=JobStatus.RUNNING, owner=owner, heartbeat_at=now, started_at=job.started_at or now
    )
    return Job.objects.get(pk=job_id) if taken == 1 else None


class JobHeartbeat:
    """Keep a job's lease fresh from a background thread while the block runs. `check()`
    raises LeaseLost if a beat found the lease taken over (the job is someone else's now)."""

    def __init__(self, job: Job, owner: str) -> None:
        self.job_id, self.owner = job.pk, owner
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"job-{job.pk}-heartbeat")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        if self.lost:
            raise LeaseLost(f"job {self.job_id}: the lease went to another worker")

    def _beat(self) -> None:
        interval = settings.JOB_LEASE_SECONDS / 4
        try:
            while not self._stop.wait(interval):
                beat = Job.objects.filter(
                    pk=self.job_id, owner=self.owner, status=JobStatus.RUNNING
                ).update(heartbeat_at=timezone.now())
                self.lost = self.lost or beat == 0
        finally:
            connection.close()  # this thread's own connection


def job_run_leased(
    *,
    job_id: int,
    work: Callable[[Job, "JobHeartbeat"], dict[str, Any]],
    resend: Callable[[float], object],
    cancelled: str,
) -> dict[str, Any]:
    """Run a long job start to finish in this worker, alone: take its lease (else, while
    another worker's lease is fresh, `resend` the message for a lease period later), run
    `work` under a heartbeat, and record how it ended. Safe to call any number of times.

    `work` returns the job's result, or stops by raising JobCancelled (recorded with the
    `cancelled` message), BudgetSpent, or any error (recorded, then raised again). On a lost
    lease nothing is recorded: the job belongs to the worker that took it over."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    job = job_lease_take(job_id=job_id, owner=owner)
    if job is None:
        if Job.objects.filter(pk=job_id, status__in=Job.ACTIVE).exists():
            resend(settings.JOB_LEASE_SECONDS)
            return {"status": "busy"}
        return {"skipped": True}
    with JobHeartbeat(job, owner) as heartbeat:
        try:
            result = work(job, heartbeat)
        except LeaseLost:
            return {"status": "lost"}
        except JobCancelled:
            job_finish(job=job, status=JobStatus.CANCELLED, error=cancelled)
            return {"status": "cancelled"}
        except BudgetSpent as spent:
            cost = Job.objects.filter(pk=job.pk).values_list("cost", flat=True).get()
            error = str(spent) or budget_spent_text({"cost": cost})
            job_finish(job=job, status=JobStatus.BUDGET_SPENT, error=error)
            return {"status": "budget"}
        except Exception as exc:
            job_finish(job=job, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            raise
    job_finish(job=job, status=JobStatus.SUCCEEDED, result=result)
    return {"status": "succeeded"}


def job_resend(task: str, *args: object) -> Callable[[float], object]:
    """A `resend` for job_run_leased: the Celery task at dotted path `task` sent again with
    `args` after the countdown. It is imported only when sent, as the tasks modules import the
    code that runs the jobs."""

    def resend(countdown: float) -> object:
        return import_string(task).apply_async(args, countdown=countdown)

    return resend


def job_requeue(*, row: Any, max_calls: int | None = None, max_cost: float | None = None) -> bool:
    """Make a stopped job's owner `row` (a model with `max_calls`, `max_cost` and `job_id`)
    ready to resume: its budget raised where a figure is given (totals, what it spent
    included), its job moved back to queued unless it is still active. Call it in a
    transaction; whether the job was moved."""
    raised = {
        name: value
        for name, value in (("max_calls", max_calls), ("max_cost", max_cost))
        if value is not None
    }
    if raised:
        type(row)._default_manager.filter(pk=row.pk).update(**raised)
    moved = (
        Job.objects.filter(pk=row.job_id)
        .exclude(status__in=Job.ACTIVE)
        .update(status=JobStatus.QUEUED, cancel_requested=False, error="", finished_at=None)
    )
    return moved > 0


def job_cancel_requested(*, job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, cancel_requested=True).exists()


def job_progress(*, job: Job, stage: str, done: int, total: int | None) -> None:
    """Record progress, and raise JobCancelled if a cancel was requested meanwhile.

    Call it outside the job's own transaction: inside one, the update would stay invisible to
    the page until commit (and on SQLite would hold the only write lock)."""
    Job.objects.filter(pk=job.pk).update(stage=stage, done=done, total=total)
    if job_cancel_requested(job=job):
        raise JobCancelled


def job_progress_reporter(job: Job, every: float = 0.5) -> Callable[[str, int, int], None]:
    """A progress callback that writes at most every `every` seconds, and always when the stage
    changes or the stage's work is done."""
    last_time = 0.0
    last_stage = ""

    def report(stage: str, done: int, total: int) -> None:
        nonlocal last_time, last_stage
        now = timezone.now().timestamp()
        if stage != last_stage or now - last_time >= every or done >= total:
            last_time, last_stage = now, stage
            job_progress(job=job, stage=stage, done=done, total=total)

    return report


def job_finish(
    *,
    job: Job,
    status: str,
    result: dict[str, Any] | None = None,
    error: str = "",
) -> None:
    with transaction.atomic():
        _job_stop(
            Job.objects.filter(pk=job.pk),
            status=status,
            result=result or {},
            error=error,
            finished_at=timezone.now(),
        )


def _job_stop(jobs: QuerySet[Job], **stop: Any) -> None:
    """Where every job stops: write `stop` (its final status and more) to the job in `jobs`,
    and tell its creator (labeling.notifications) if this moved it from queued or running.
    A second delivery of the same finish finds the job stopped already and tells nobody again.
    Call it in a transaction (the row stays locked from the check to the write)."""
    was_active = jobs.select_for_update().filter(status__in=Job.ACTIVE).values_list("pk", flat=True)
    stopped = list(was_active)
    jobs.update(**stop)
    for job_id in stopped:
        notify_job_stopped(job_id=job_id)


def job_cancel(*, job: Job, reason: str = "", by: Any = None) -> None:
    """Ask a job to stop. A queued job stops at once; a running one at its next progress report
    (a grading run: before its next judge call). `reason`, if given, is kept as the job's
    error, so the job's pages say why it stopped; `by` is who asked (none: nobody in
    particular), so that the creator is told when someone else stopped their job."""
    asker = by if by is not None and by.is_authenticated else None
    with transaction.atomic():
        active = Job.objects.filter(pk=job.pk, status__in=Job.ACTIVE)
        active.update(
            cancel_requested=True,
            cancel_requested_by=asker,
            **({"error": reason} if reason else {}),
        )
        queued = Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED)
        _job_stop(queued, status=JobStatus.CANCELLED, finished_at=timezone.now())


def job_cancel_reason(*, job: Job, default: str) -> str:
    """Why a cancelled job stopped: the reason given to job_cancel, else `default`."""
    reason = Job.objects.filter(pk=job.pk).values_list("error", flat=True).first()
    return reason or default
