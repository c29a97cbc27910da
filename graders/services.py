"""Writes on the grading side: endpoints, metagraders, and starting grading runs."""

from typing import Any

from django.db import transaction

from graders.engine.baseline import BASELINES
from graders.engine.judge import JudgeSettings
from graders.engine.programs import program_validate
from graders.judge_egress import endpoint_egress_check
from graders.local_judge import LOCAL_JUDGE_MODEL
from graders.models import (
    GraderSelection,
    GradingItem,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    Origin,
)
from labeling.jobs import job_create
from labeling.models import Project, Task

GRADING_JOB = "grading"


def endpoint_settings(endpoint: JudgeEndpoint) -> JudgeSettings:
    """The engine's view of an endpoint (the key stays in the environment), carrying the
    operator's egress policy, which every judge client made from it enforces. Checked here
    too (a ValidationError), so an endpoint written around the form fails before any work."""
    egress = endpoint_egress_check(
        base_url=endpoint.base_url, api_key_env=endpoint.api_key_env, resolve=False
    )
    return JudgeSettings(
        base_url=endpoint.base_url,
        model=endpoint.model,
        api_key_env=endpoint.api_key_env or None,
        temperature=endpoint.temperature,
        max_tokens=endpoint.max_tokens,
        max_concurrency=endpoint.max_concurrency,
        timeout_s=endpoint.timeout_s,
        price_in_per_mtok=endpoint.price_in_per_mtok,
        price_out_per_mtok=endpoint.price_out_per_mtok,
        response_format=endpoint.response_format,  # type: ignore[arg-type]
        egress=egress,
    )


def metagrader_register(
    *,
    project: Project,
    program: dict[str, Any],
    origin: str,
    parent: Metagrader | None = None,
    user: Any = None,
) -> Metagrader:
    """Validate a program and store it once per project (by content hash). Raises
    ProgramInvalid with messages a person can act on."""
    parsed = program_validate(program)
    existing = Metagrader.objects.filter(project=project, content_hash=parsed.content_hash).first()
    if existing is not None:
        return existing
    return Metagrader.objects.create(
        project=project,
        name=parsed.name,
        kind=parsed.kind,
        program=parsed.to_json(),
        content_hash=parsed.content_hash,
        parent=parent,
        origin=origin,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )


def baselines_ensure(*, project: Project) -> list[Metagrader]:
    """The baseline programs of every kind, always available for comparison."""
    return [
        metagrader_register(project=project, program=program, origin=Origin.BASELINE)
        for program in BASELINES.values()
    ]


class RunInvalid(ValueError):
    pass


@transaction.atomic
def grading_run_start(
    *,
    project: Project,
    metagrader: Metagrader,
    endpoint: JudgeEndpoint,
    split: str = "",
    task_ids: list[str] | None = None,
    max_calls: int | None = None,
    max_cost: float | None = None,
    user: Any = None,
) -> GradingRun:
    """Create a run over a split (or the given task ids) and enqueue it when this commits."""
    if metagrader.project_id != project.pk or endpoint.project_id != project.pk:
        raise RunInvalid("the grader and the judge endpoint must belong to this project")
    tasks = Task.objects.filter(project=project)
    if task_ids:
        tasks = tasks.filter(external_id__in=task_ids)
    elif split:
        tasks = tasks.filter(split=split)
    task_pks = list(tasks.filter(responses__isnull=False).distinct().values_list("pk", flat=True))
    if not task_pks:
        raise RunInvalid("no tasks with responses to grade in this selection")
    job = job_create(
        kind=GRADING_JOB,
        project=project,
        user=user,
        params={"metagrader": metagrader.pk, "endpoint": endpoint.pk, "split": split},
    )
    run = GradingRun.objects.create(
        project=project,
        metagrader=metagrader,
        endpoint=endpoint,
        split=split,
        job=job,
        max_calls=max_calls,
        max_cost=max_cost,
    )
    GradingItem.objects.bulk_create([GradingItem(run=run, task_id=pk) for pk in task_pks])
    from graders.tasks import grading_run_task

    grading_run_task.delay_on_commit(run.pk)
    return run


def local_demo_endpoint_ensure(*, project: Project, base_url: str) -> JudgeEndpoint:
    """The bundled local judge as the project's default endpoint (when it has none yet)."""
    endpoint, _ = JudgeEndpoint.objects.get_or_create(
        project=project,
        name="local-demo",
        defaults={
            "base_url": base_url,
            "model": LOCAL_JUDGE_MODEL,
            "max_concurrency": 1,
            "timeout_s": 180.0,
            "max_tokens": 256,
            "is_local_demo": True,
            "is_default": not JudgeEndpoint.objects.filter(
                project=project, is_default=True
            ).exists(),
        },
    )
    return endpoint


@transaction.atomic
def grader_promote(
    *,
    project: Project,
    metagrader: Metagrader,
    user: Any = None,
    search: Any = None,
    note: str = "",
) -> GraderSelection:
    """Make `metagrader` the project's selected grader of its kind, as a new version; earlier
    versions stay, so who selected what and when is never lost."""
    if metagrader.project_id != project.pk:
        raise RunInvalid("the grader must belong to this project")
    last = (
        GraderSelection.objects.select_for_update()
        .filter(project=project, kind=metagrader.kind)
        .order_by("-version")
        .first()
    )
    return GraderSelection.objects.create(
        project=project,
        kind=metagrader.kind,
        version=(last.version if last else 0) + 1,
        metagrader=metagrader,
        search=search,
        selected_by=user if getattr(user, "is_authenticated", False) else None,
        note=note,
    )


def grader_selected(*, project: Project, kind: str) -> GraderSelection | None:
    """The grader of this kind in use now: the newest selection."""
    return (
        GraderSelection.objects.filter(project=project, kind=kind)
        .select_related("metagrader", "selected_by")
        .order_by("-version")
        .first()
    )
