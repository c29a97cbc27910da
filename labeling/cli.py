"""Argument checks shared by the management commands: one-line reasons on bad input."""

import time
from collections.abc import Callable
from typing import Any

from django import forms
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.db import models

from labeling.models import Job, JobStatus, Project


def project_or_error(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise CommandError(f"project {slug!r} does not exist")
    return project


def dimension_check(project: Project, name: str | None) -> None:
    """Refuse a dimension the project does not have (None means all dimensions)."""
    if name is not None and not project.dimensions.filter(name=name).exists():
        raise CommandError(f"project {project.slug!r} has no dimension {name!r}")


def budget_arguments(parser: CommandParser) -> None:
    """--max-calls N and --max-cost USD: a job's budget (on --resume, its new totals)."""
    parser.add_argument("--max-calls", type=int)
    parser.add_argument("--max-cost", type=float)


def budget_given(options: dict[str, Any]) -> dict[str, Any]:
    """The budget options given on the command line (left out: None), as form data."""
    return {name: options[name] for name in ("max_calls", "max_cost") if options[name] is not None}


def form_or_error(form: forms.Form) -> dict[str, Any]:
    """The form's cleaned data, or a CommandError ``--flag: reason; ...`` naming each field
    as its option."""
    if not form.is_valid():
        raise CommandError(
            "; ".join(
                f"--{field.replace('_', '-')}: {' '.join(errors)}"
                for field, errors in form.errors.items()
            )
        )
    return form.cleaned_data


def job_follow(
    stderr: OutputWrapper, job_id: int, progress: Callable[[Job], str], what: str
) -> None:
    """--wait: poll the job once a second, writing its `progress` line to stderr whenever it
    changes, until it ends; a CommandError ``{what}: Status. error`` unless it succeeded."""
    shown = ""
    while True:
        job = Job.objects.get(pk=job_id)
        line = progress(job)
        if line != shown:
            stderr.write(line)
            shown = line
        if not job.is_active:
            break
        time.sleep(1)
    if job.status != JobStatus.SUCCEEDED:
        raise CommandError(f"{what}: {job.get_status_display()}. {job.error}")


def resume_target_or_error[T: models.Model](
    model: type[T], project: Project, pk: int, noun: str
) -> T:
    """--resume: the project's `model` row `pk` (its job loaded with it), or a CommandError
    ``{noun} {pk} is not in project 'slug'``."""
    found = model._default_manager.select_related("job").filter(project=project, pk=pk).first()
    if found is None:
        raise CommandError(f"{noun} {pk} is not in project {project.slug!r}")
    return found


def job_announce(stdout: OutputWrapper, what: str, job_id: int, *, resumed: bool) -> None:
    """``{what} resumed as job N.`` or ``{what} queued as job N.``"""
    stdout.write(f"{what} {'resumed' if resumed else 'queued'} as job {job_id}.")


def resumable_check(job: Job, noun: str, pk: int) -> None:
    """--resume: refuse a job that is not stopped (cancelled, failed or out of budget)."""
    if job.status not in Job.RESUMABLE:
        raise CommandError(
            f"{noun} {pk} is {job.get_status_display().lower()}: only a stopped "
            f"{noun} (cancelled, failed or out of budget) resumes"
        )
