"""A job's kind and status as the jobs list, the job page and notifications say them:
"Grader search", "Running: 340 of 1,000, about 4 min left", "Failed: ValueError: bad line"."""

from datetime import datetime

from labeling.job_progress import duration_text, job_eta
from labeling.models import Job, JobStatus

# The kinds the apps create (each module's *_JOB constant); another kind shows its own name.
KIND_WORDS = {
    "import": "Import",
    "grading": "Grading run",
    "search": "Grader search",
    "audit": "Rubric audit",
    "rubric_generation": "Rubric generation",
    "synthesis": "Synthesis run",
    "synthesis_sweep": "Evaluator sweep",
}
ERROR_CHARS = 160


def kind_words(kind: str) -> str:
    return KIND_WORDS.get(kind) or kind.replace("_", " ").capitalize()


def status_words(job: Job, *, now: datetime) -> str:
    """The job's status in a sentence. A cancelled job names who cancelled it when someone did
    (load `cancel_requested_by` with the job)."""
    if job.status == JobStatus.RUNNING:
        words = "Cancelling" if job.cancel_requested else "Running"
        if job.total:
            words += f": {job.done:,} of {job.total:,}"
            eta = job_eta(done=job.done, total=job.total, started_at=job.started_at, now=now)
            if eta is not None:
                words += f", {eta.left_text}"
        elif job.done:
            words += f": {job.done:,} done"
        return words
    if job.status == JobStatus.FAILED and job.error.strip():
        first_line = job.error.strip().splitlines()[0]
        if len(first_line) > ERROR_CHARS:
            first_line = first_line[: ERROR_CHARS - 1] + "…"
        return f"Failed: {first_line}"
    if job.status == JobStatus.CANCELLED and job.cancel_requested_by is not None:
        return f"Cancelled by {job.cancel_requested_by.get_username()}"
    return str(job.get_status_display())


def duration_words(job: Job, *, now: datetime) -> str:
    """How long the job ran (so far, while it runs); empty before it started."""
    if job.started_at is None:
        return ""
    end = job.finished_at or (now if job.is_active else job.started_at)
    return duration_text((end - job.started_at).total_seconds())
