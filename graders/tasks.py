"""Celery tasks of the grading side: take ids, call one service, return a small dict."""

from typing import Any

from celery import shared_task

from graders.grading import grading_run_execute


@shared_task(acks_late=True, reject_on_worker_lost=True)
def grading_run_task(run_id: int) -> dict[str, Any]:
    return grading_run_execute(run_id=run_id)
