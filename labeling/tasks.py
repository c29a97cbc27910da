"""Celery tasks: take ids, call one service, return a small dict."""

from typing import Any

from celery import shared_task

from labeling.import_jobs import import_job_run


@shared_task(acks_late=True, reject_on_worker_lost=True)
def import_file_task(job_id: int) -> dict[str, Any]:
    return import_job_run(job_id=job_id)
