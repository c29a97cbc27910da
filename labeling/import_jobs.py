"""Imports from the page and the API: small files inline, large ones as a background job."""

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction

from labeling.imports import (
    SNIFF_BYTES,
    ImportRejected,
    ImportReport,
    ImportStopped,
    file_head_check,
    jsonl_import,
)
from labeling.jobs import (
    JobCancelled,
    job_cancel_requested,
    job_claim,
    job_create,
    job_finish,
    job_progress_reporter,
)
from labeling.models import Job, JobStatus, Project

IMPORT_JOB = "import"


class UploadTooLarge(Exception):
    pass


UPLOADS = "imports"


@contextmanager
def _local_copy(name: str) -> Iterator[Path]:
    """The stored upload as a local file (the import reads it twice), removed afterwards."""
    with (
        tempfile.NamedTemporaryFile(suffix=".jsonl") as local,
        default_storage.open(name, "rb") as stored,
    ):
        shutil.copyfileobj(stored, local, length=1024 * 1024)
        local.flush()
        yield Path(local.name)


def rejection_payload(exc: ImportRejected) -> dict[str, Any]:
    return {
        "message": str(exc),
        "total_errors": exc.total,
        "errors": [{"line": e.line, "field": e.field, "message": e.message} for e in exc.errors],
    }


def import_upload(
    *, project: Project, user: Any, upload: IO[bytes], size: int
) -> ImportReport | Job:
    """Import an uploaded file: inline when small (raises ImportRejected), else as a job."""
    if size > settings.IMPORT_MAX_FILE_BYTES:
        raise UploadTooLarge(
            f"the file has {size} bytes; the limit is {settings.IMPORT_MAX_FILE_BYTES}"
        )
    # A file that is plainly not JSON Lines is refused now, not after a job has queued.
    file_head_check(upload.read(SNIFF_BYTES))
    upload.seek(0)
    if size <= settings.IMPORT_INLINE_MAX_BYTES:
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as local:
            shutil.copyfileobj(upload, local, length=1024 * 1024)
            local.flush()
            return jsonl_import(project=project, path=Path(local.name))
    # Kept in the project's storage (a shared one in production), because the job runs later,
    # maybe on another machine, after Django has deleted the request's temporary file.
    name = default_storage.save(f"{UPLOADS}/{uuid.uuid4().hex}.jsonl", File(upload))
    job = job_create(
        kind=IMPORT_JOB, project=project, user=user, params={"path": name, "bytes": size}
    )
    from labeling.tasks import import_file_task

    transaction.on_commit(lambda: import_file_task.delay(job.pk))
    return job


def import_job_run(*, job_id: int, redelivered: bool = False) -> dict[str, Any]:
    """Run a queued import job; a second delivery of the same job does nothing, and one that
    the broker redelivers after its worker died starts the (all-or-nothing) import again."""
    job = job_claim(job_id=job_id, redelivered=redelivered)
    if job is None:
        stopped = Job.objects.filter(pk=job_id).exclude(status__in=Job.ACTIVE).first()
        if stopped is not None:  # cancelled before it ran: its upload is no longer needed
            default_storage.delete(stopped.params["path"])
        return {"job": job_id, "skipped": True}
    name = job.params["path"]
    try:
        with _local_copy(name) as path:
            report = jsonl_import(
                project=job.project,
                path=path,
                progress=job_progress_reporter(job),
                should_stop=lambda: job_cancel_requested(job=job),
            )
    except ImportRejected as exc:
        job_finish(job=job, status=JobStatus.FAILED, result=rejection_payload(exc), error=str(exc))
    except (JobCancelled, ImportStopped):
        job_finish(job=job, status=JobStatus.CANCELLED, error="Cancelled; nothing was imported.")
    except Exception as exc:
        job_finish(job=job, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    else:
        job_finish(
            job=job,
            status=JobStatus.SUCCEEDED,
            result={**report.as_json(), "summary": report.summary()},
        )
    finally:
        default_storage.delete(name)
    return {"job": job_id, "status": Job.objects.get(pk=job_id).status}
