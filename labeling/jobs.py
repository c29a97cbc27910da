"""The one Job row every background job reports through: progress, cost, errors, cancel.

Workers claim a job with a conditional UPDATE (queued -> running) and check that exactly one
row changed, so a second delivery of the same Celery message finds nothing to do.
"""

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from labeling.models import Job, JobStatus, Project


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
    Job.objects.filter(pk=job.pk).update(
        status=status,
        result=result or {},
        error=error,
        finished_at=timezone.now(),
    )


def job_cancel(*, job: Job) -> None:
    """Ask a job to stop. A queued job stops at once; a running one at its next progress report."""
    with transaction.atomic():
        Job.objects.filter(pk=job.pk, status__in=Job.ACTIVE).update(cancel_requested=True)
        Job.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.CANCELLED, finished_at=timezone.now()
        )
