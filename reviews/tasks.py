"""Celery autodiscovery reads this module; the tasks live beside the features they run."""

from reviews.audit_jobs import audit_run_task as audit_run_task
from reviews.rubric_jobs import rubric_generation_task as rubric_generation_task
