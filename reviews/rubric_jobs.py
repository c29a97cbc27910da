"""Celery tasks of rubric review: take ids, call one service, return a small dict."""

from typing import Any

from celery import Task, shared_task

from reviews.rubric_generation import rubric_generation_execute


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def rubric_generation_task(self: Task, job_id: int) -> dict[str, Any]:  # type: ignore[type-arg]
    # A redelivery after a dead worker may take back the running job: work already stored is
    # skipped, so starting over repeats nothing.
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    return rubric_generation_execute(job_id=job_id, redelivered=redelivered)
