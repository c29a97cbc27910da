"""Celery tasks: take ids, call one service, return a small dict."""

from typing import Any

from celery import Task, shared_task

from labeling.import_jobs import import_job_run
from labeling.models import Project
from labeling.queue import queue_refresh


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def import_file_task(self: Task, job_id: int) -> dict[str, Any]:  # type: ignore[type-arg]
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    return import_job_run(job_id=job_id, redelivered=redelivered)


@shared_task(acks_late=True, reject_on_worker_lost=True, time_limit=600)
def queue_refresh_task(project_id: int) -> dict[str, Any]:
    """Rewrite a project's queue priorities. A rerun writes the same ranks again (a strategy is
    a function of the labels and its seed), so a second delivery is harmless."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return {"project": project_id, "rewritten": 0, "missing": True}
    return {"project": project_id, "rewritten": queue_refresh(project=project)}
