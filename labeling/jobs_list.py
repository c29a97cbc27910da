"""The jobs list: which jobs a user may see (of one project, or of all of theirs), filtered by
kind, status and who started them, and each as a row in words."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from labeling.job_words import KIND_WORDS, duration_words, kind_words, status_words
from labeling.models import Job, JobStatus, Membership, Project


class JobFilterForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *KIND_WORDS.items()])
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *JobStatus.choices])
    started_by = forms.ChoiceField(required=False, label="Started by")

    def __init__(self, *args: object, starters: list[tuple[int, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["started_by"].choices = [("", "Anyone"), *starters]

    def filters(self) -> dict[str, str]:
        """The valid filters given; an invalid one (a stale link) is dropped, not an error."""
        self.is_valid()
        return {name: value for name, value in self.cleaned_data.items() if value}


def jobs_visible(*, user: Any, project: Project | None = None) -> QuerySet[Job]:
    """The jobs of `project` (its access already checked), or, without one, of every project
    the user belongs to and the user's own jobs of no project: those the job page shows them."""
    if project is not None:
        return Job.objects.filter(project=project)
    projects = Membership.objects.filter(user=user).values("project")
    return Job.objects.filter(Q(project__in=projects) | Q(project=None, created_by=user))


def job_starters(jobs: QuerySet[Job]) -> list[tuple[int, str]]:
    """Who started any of `jobs`: (user id, username), by name, for the filter."""
    users = get_user_model().objects.filter(pk__in=jobs.values("created_by")).order_by("username")
    return [(user.pk, user.get_username()) for user in users.only("pk", "username")]


def jobs_filtered(jobs: QuerySet[Job], *, filters: dict[str, str]) -> QuerySet[Job]:
    """`jobs` as the list shows them, newest first, with what the rows need."""
    if filters.get("kind"):
        jobs = jobs.filter(kind=filters["kind"])
    if filters.get("status"):
        jobs = jobs.filter(status=filters["status"])
    if filters.get("started_by"):
        jobs = jobs.filter(created_by_id=filters["started_by"])
    return (
        jobs.select_related("project", "created_by", "cancel_requested_by")
        .defer("params", "result")
        .order_by("-created_at", "-pk")
    )


@dataclass(frozen=True)
class JobRow:
    job: Job
    kind: str
    status: str
    started_by: str
    duration: str
    cost: Decimal


def job_rows(jobs: list[Job], *, now: datetime) -> list[JobRow]:
    return [
        JobRow(
            job=job,
            kind=kind_words(job.kind),
            status=status_words(job, now=now),
            started_by=job.created_by.get_username() if job.created_by else "",
            duration=duration_words(job, now=now),
            cost=job.cost,
        )
        for job in jobs
    ]
