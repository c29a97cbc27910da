"""Blind audits: start and resume one (writes), and read its report (selectors).

The audit itself runs in reviews.audit_jobs. What the report knows that the auditor never did
is who wrote each criterion; it is joined in here, from the database, after the fact."""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import Q, QuerySet

from graders.engine.audit import (
    AuditedCriterion,
    AuthorShares,
    audit_shares,
    higher_supported_tasks,
)
from graders.models import JudgeEndpoint
from labeling.jobs import job_create
from labeling.models import AuthorKind, Job, JobStatus, Project, Task
from reviews.audit_jobs import audit_run_task
from reviews.models import AuditRun, AuditVerdict

AUDIT_JOB = "audit"
# Contradicted, unverifiable, generic or omission-prone: what a reviewer should read.
FLAGGED = (
    Q(grounding__in=["contradicted", "unverifiable"]) | Q(specificity="generic") | Q(omission=True)
)


class AuditInvalid(ValueError):
    pass


@transaction.atomic
def audit_start(
    *,
    project: Project,
    endpoint: JudgeEndpoint,
    split: str = "",
    task_ids: list[str] | None = None,
    max_calls: int | None = None,
    max_cost: float | None = None,
    user: Any = None,
) -> AuditRun:
    """Audit every criterion of every rubric (expert, generated, reviewed) of a split or of
    the given tasks; enqueue it when this commits. Raises AuditInvalid with a reason."""
    if endpoint.project_id != project.pk:
        raise AuditInvalid("the judge endpoint must belong to this project")
    if bool(split) == bool(task_ids):
        raise AuditInvalid("choose either a split or a list of task ids")
    tasks = Task.objects.filter(project=project)
    if task_ids:
        tasks = tasks.filter(external_id__in=task_ids)
        unknown = sorted(set(task_ids) - set(tasks.values_list("external_id", flat=True)))
        if unknown:
            raise AuditInvalid(f"no such task: {', '.join(unknown[:10])}")
    else:
        tasks = tasks.filter(split=split)
    task_pks = list(
        tasks.filter(rubrics__items__isnull=False).distinct().values_list("pk", flat=True)
    )
    if not task_pks:
        raise AuditInvalid("no rubric criteria to audit in this selection")
    job = job_create(
        kind=AUDIT_JOB,
        project=project,
        user=user,
        params={"endpoint": endpoint.pk, "split": split, "tasks": len(task_pks)},
    )
    run = AuditRun.objects.create(
        project=project,
        job=job,
        endpoint=endpoint,
        split=split,
        task_ids=task_ids or [],
        max_calls=max_calls,
        max_cost=max_cost,
        created_by=job.created_by,
    )
    run.tasks.set(task_pks)
    audit_run_task.delay_on_commit(run.pk)
    return run


def audit_resume(*, run: AuditRun) -> None:
    """Queue a stopped audit again. Criteria whose call failed are audited again (a transient
    failure may pass now; an answer that failed to parse comes back from the cache for free);
    finished verdicts stay."""
    with transaction.atomic():
        AuditVerdict.objects.filter(run=run).exclude(error="").delete()
        Job.objects.filter(pk=run.job_id).update(
            status=JobStatus.QUEUED, cancel_requested=False, error="", finished_at=None
        )
        audit_run_task.delay_on_commit(run.pk)


@dataclass(frozen=True)
class AuditReport:
    """Per author kind (expert, generated, reviewed, those present), the shares; and on how
    many of the tasks with both the generated rubric has the higher supported share."""

    authors: list[AuthorShares]
    generated_higher: int
    tasks_with_both: int
    audited: int
    failed: int


def audit_report(*, run: AuditRun, domain: str = "") -> AuditReport:
    """The report over the audit's verdicts, or over those of one domain's tasks. Failed
    calls are counted, never treated as a verdict."""
    verdicts = AuditVerdict.objects.filter(run=run)
    if domain:
        verdicts = verdicts.filter(task__domain=domain)
    criteria = [
        AuditedCriterion(task, author, specificity, grounding, omission)
        for task, author, specificity, grounding, omission in verdicts.filter(error="")
        .order_by("pk")
        .values_list("task_id", "author_kind", "specificity", "grounding", "omission")
    ]
    order = {kind: n for n, kind in enumerate(AuthorKind.values)}
    authors = sorted(_audit_shares_cached(criteria), key=lambda shares: order[shares.author])
    higher, both = higher_supported_tasks(
        criteria, author=AuthorKind.GENERATED, than=AuthorKind.EXPERT
    )
    failed = verdicts.exclude(error="").count()
    return AuditReport(authors, higher, both, len(criteria), failed)


# audit_shares bootstraps 10,000 resamples of each author's tasks (0.3 s at 1,000 tasks) and
# is a pure function of the criteria (its seed is fixed), which do not change once an audit has
# finished: kept under a digest of the criteria themselves, so any new or changed verdict is
# another key and nothing can be served stale.
AUDIT_SHARES_CACHE_S = 24 * 3600


def _audit_shares_cached(criteria: Sequence[AuditedCriterion]) -> list[AuthorShares]:
    material = json.dumps(
        [[str(c.task), c.author, c.specificity, c.grounding, c.omission] for c in criteria],
        separators=(",", ":"),
    )
    key = f"audit-shares:{hashlib.sha256(material.encode()).hexdigest()}"
    shares: list[AuthorShares] | None = cache.get(key)
    if shares is None:
        shares = audit_shares(criteria)
        cache.set(key, shares, AUDIT_SHARES_CACHE_S)
    return shares


def audit_flagged(
    *,
    run: AuditRun,
    author: str = "",
    grounding: str = "",
    specificity: str = "",
    omission: bool | None = None,
    domain: str = "",
) -> QuerySet[AuditVerdict]:
    """The flagged verdicts of an audit, narrowed by the given filters; task by task, and in
    each task rubric by rubric, in the rubric's order."""
    verdicts = (
        AuditVerdict.objects.filter(FLAGGED, run=run)
        .select_related("task")
        .order_by("task__external_id", "author_kind", "rubric_item__position", "pk")
    )
    if author:
        verdicts = verdicts.filter(author_kind=author)
    if grounding:
        verdicts = verdicts.filter(grounding=grounding)
    if specificity:
        verdicts = verdicts.filter(specificity=specificity)
    if omission is not None:
        verdicts = verdicts.filter(omission=omission)
    if domain:
        verdicts = verdicts.filter(task__domain=domain)
    return verdicts


def audit_domains(*, run: AuditRun) -> list[str]:
    """The domains of the audit's tasks, for the report's filter."""
    return sorted(set(run.tasks.exclude(domain="").values_list("domain", flat=True)))
