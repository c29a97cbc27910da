"""Celery tasks: take ids, call one service, return a small dict."""

from typing import Any

from celery import Task, shared_task

from labeling.import_jobs import import_job_run


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def import_file_task(self: Task, job_id: int) -> dict[str, Any]:  # type: ignore[type-arg]
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    return import_job_run(job_id=job_id, redelivered=redelivered)
