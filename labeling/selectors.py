"""Reads: what pages and the API show. Blinding is decided here, by what is fetched."""

from collections import defaultdict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet

from labeling.models import (
    CriterionGrade,
    JudgeScore,
    Membership,
    Preference,
    Project,
    Response,
    Rubric,
    Score,
    Split,
    Task,
)


def memberships_for_user(*, user: AbstractBaseUser) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(user=user)
        .select_related("project")
        .annotate(task_count=Count("project__tasks", distinct=True))
        .order_by("project__name")
    )


def split_table(*, project: Project) -> dict[str, dict[str, int]]:
    """Task counts per domain and split, every split present."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(Split.values, 0))
    rows = (
        Task.objects.filter(project=project).values_list("domain", "split").annotate(n=Count("pk"))
    )
    for domain, split, n in rows.order_by("domain"):
        table[domain][split] = n
    return dict(table)


def project_overview(*, project: Project) -> dict[str, Any]:
    tasks = Task.objects.filter(project=project)
    labels = dict(
        Preference.objects.filter(task__project=project, is_current=True)
        .values_list("provider")
        .annotate(n=Count("pk"))
    )
    table = split_table(project=project)
    return {
        "tasks": tasks.count(),
        "responses": Response.objects.filter(project=project).count(),
        "trajectories": Response.objects.filter(project=project, messages__isnull=False).count(),
        "rubrics": Rubric.objects.filter(task__project=project).count(),
        "criterion_grades": CriterionGrade.objects.filter(response__project=project).count(),
        "scores": Score.objects.filter(response__project=project).count(),
        "judge_scores": JudgeScore.objects.filter(response__project=project).count(),
        "preferences": {
            provider: labels.get(provider, 0) for provider in ("human", "synthetic", "judge")
        },
        "splits": {split: sum(row[split] for row in table.values()) for split in Split.values},
        "domains": {domain: sum(row.values()) for domain, row in table.items()},
    }


def tasks_browse(
    *, project: Project, query: str = "", domain: str = "", split: str = ""
) -> QuerySet[Task]:
    tasks = Task.objects.filter(project=project)
    if query:
        tasks = tasks.filter(Q(external_id__icontains=query) | Q(prompt__icontains=query))
    if domain:
        tasks = tasks.filter(domain=domain)
    if split:
        tasks = tasks.filter(split=split)
    return tasks.annotate(
        response_count=Count("responses", distinct=True),
        label_count=Count("preferences", filter=Q(preferences__is_current=True), distinct=True),
    ).order_by("external_id")


def project_domains(*, project: Project) -> list[str]:
    return list(
        Task.objects.filter(project=project)
        .values_list("domain", flat=True)
        .distinct()
        .order_by("domain")
    )


def task_detail(*, project: Project, external_id: str, with_sources: bool) -> dict[str, Any]:
    """A task with documents, responses and rubrics. Without `with_sources` the responses are
    plain dicts with no model name or metadata, so a blind reader's page cannot leak them."""
    task = Task.objects.get(project=project, external_id=external_id)
    fields = ["external_id", "content", "messages"]
    if with_sources:
        fields += ["source_model", "metadata"]
    responses = list(Response.objects.filter(task=task).order_by("external_id").values(*fields))
    return {
        "task": task,
        "documents": list(task.documents.all()),
        "responses": responses,
        "rubrics": list(task.rubrics.prefetch_related("items").order_by("author_kind", "origin")),
    }
