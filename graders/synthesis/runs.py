"""Writes of a synthesis run: start one (its cells planned at once, so the page shows them and a
resume never re-plans), resume a stopped one, cancel. The work is in graders.synthesis.execute."""

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from graders.engine.synthesis.plan import cells_plan
from graders.models import JudgeEndpoint, RolloutMode, SynthesisRun, SynthesisRunJudge
from labeling.jobs import job_cancel, job_create, job_requeue
from labeling.models import (
    INT_FIELD_MAX,
    Dimension,
    Project,
    Split,
    Synthesis,
    SynthesisCell,
    Task,
)

SYNTHESIS_JOB = "synthesis"
MAX_RETRIES = 10
MAX_JUDGES = 8
MAX_CELLS = 20_000
MAX_TURN_CAP = 50


class SynthesisInvalid(ValueError):
    """A run's settings are wrong; the message says which and how."""


def scope_tasks(*, project: Project, split: str = "", domain: str = "") -> list[Task]:
    """The tasks a run covers: one split, one domain, or (neither given) all."""
    tasks = Task.objects.filter(project=project)
    if split:
        tasks = tasks.filter(split=split)
    if domain:
        tasks = tasks.filter(domain=domain)
    return list(tasks.order_by("external_id"))


def _settings_check(
    *,
    project: Project,
    endpoints: Sequence[JudgeEndpoint | None],
    judges: Sequence[JudgeEndpoint],
    agents: Sequence[JudgeEndpoint],
    dimensions: Sequence[Dimension],
    split: str,
    domain: str,
    retries: int,
    mode: str,
    user_simulator: JudgeEndpoint | None,
    webhook_url: str,
    turn_cap: int,
    max_calls: int | None,
    max_cost: float | None,
) -> None:
    if any(e is not None and e.project_id != project.pk for e in endpoints):
        raise SynthesisInvalid(
            "every endpoint (agents, writer, judges, user) must be this project's"
        )
    if any(d.project_id != project.pk for d in dimensions):
        raise SynthesisInvalid("every dimension must be this project's")
    if not dimensions:
        raise SynthesisInvalid("choose at least one dimension")
    if not agents:
        raise SynthesisInvalid("choose at least one agent endpoint")
    if len({a.pk for a in agents}) != len(agents):
        raise SynthesisInvalid("an agent endpoint is listed twice")
    if not 1 <= len(judges) <= MAX_JUDGES:
        raise SynthesisInvalid(f"the cascade needs 1 to {MAX_JUDGES} filter judges (K >= 1)")
    if len({j.pk for j in judges}) != len(judges):
        raise SynthesisInvalid("a filter judge is listed twice in the cascade")
    if split and domain:
        raise SynthesisInvalid("choose a split or a domain, not both")
    if split and split not in Split.values:
        raise SynthesisInvalid(f"unknown split {split!r}; use one of {', '.join(Split.values)}")
    if not 0 <= retries <= MAX_RETRIES:
        raise SynthesisInvalid(f"retries R must be 0 to {MAX_RETRIES}")
    if mode not in RolloutMode.values:
        raise SynthesisInvalid(f"unknown mode {mode!r}; use one of {', '.join(RolloutMode.values)}")
    if mode == RolloutMode.CONVERSATION and user_simulator is None:
        raise SynthesisInvalid("a conversation needs a user-simulator endpoint")
    if mode == RolloutMode.CONVERSATION and not 1 <= turn_cap <= MAX_TURN_CAP:
        raise SynthesisInvalid(f"the turn cap must be 1 to {MAX_TURN_CAP}")
    if mode == RolloutMode.WEBHOOK and not webhook_url:
        raise SynthesisInvalid("the webhook mode needs a rollout webhook URL")
    if max_calls is not None and not 1 <= max_calls <= INT_FIELD_MAX:
        raise SynthesisInvalid(f"the call budget must be 1 to {INT_FIELD_MAX}")
    if max_cost is not None and not 0 < max_cost <= 1_000_000:
        raise SynthesisInvalid("the dollar budget must be above 0 and at most 1,000,000")


@transaction.atomic
def synthesis_start(
    *,
    project: Project,
    dimensions: Sequence[Dimension],
    agents: Sequence[JudgeEndpoint],
    writer: JudgeEndpoint,
    judges: Sequence[JudgeEndpoint],
    name: str = "",
    split: str = "",
    domain: str = "",
    retries: int = 2,
    mode: str = RolloutMode.SINGLE,
    user_simulator: JudgeEndpoint | None = None,
    turn_cap: int = 8,
    webhook_url: str = "",
    seed: int = 0,
    max_calls: int | None = None,
    max_cost: float | None = None,
    user: Any = None,
) -> SynthesisRun:
    """Check a run's settings, plan its cells (every task in scope by every dimension, the
    contrasts rotated and the agents drawn with the seed) and enqueue it when this commits.
    Raises SynthesisInvalid with a message a person can act on; nothing is written then."""
    _settings_check(
        project=project,
        endpoints=[writer, user_simulator, *agents, *judges],
        judges=judges,
        agents=agents,
        dimensions=dimensions,
        split=split,
        domain=domain,
        retries=retries,
        mode=mode,
        user_simulator=user_simulator,
        webhook_url=webhook_url,
        turn_cap=turn_cap,
        max_calls=max_calls,
        max_cost=max_cost,
    )
    if mode == RolloutMode.WEBHOOK:
        from graders.synthesis.webhook import webhook_url_check

        problem = webhook_url_check(webhook_url)
        if problem:
            raise SynthesisInvalid(problem)
    tasks = scope_tasks(project=project, split=split, domain=domain)
    if not tasks:
        raise SynthesisInvalid(f"no tasks in {split or domain or 'the project'} to synthesize on")
    if len(tasks) * len(dimensions) > MAX_CELLS:
        raise SynthesisInvalid(
            f"that is {len(tasks) * len(dimensions)} cells; at most {MAX_CELLS} per run"
        )
    job = job_create(kind=SYNTHESIS_JOB, project=project, user=user, params={"mode": mode})
    name = name or f"synthesis-{job.pk}"
    if Synthesis.objects.filter(project=project, external_id=name).exists():
        raise SynthesisInvalid(f"this project already has a synthesis named {name!r}")
    synthesis = Synthesis.objects.create(
        project=project, external_id=name, judges=[j.name for j in judges], retries=retries
    )
    run = SynthesisRun.objects.create(
        project=project,
        synthesis=synthesis,
        job=job,
        split=split,
        domain=domain,
        writer=writer,
        retries=retries,
        mode=mode,
        user_simulator=user_simulator,
        turn_cap=turn_cap,
        webhook_url=webhook_url,
        seed=seed,
        max_calls=max_calls,
        max_cost=max_cost,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    run.dimensions.set(dimensions)
    run.agents.set(agents)
    SynthesisRunJudge.objects.bulk_create(
        [SynthesisRunJudge(run=run, endpoint=j, position=i) for i, j in enumerate(judges)]
    )
    _cells_store(run, tasks, dimensions, agents)
    from graders.tasks import synthesis_run_task

    synthesis_run_task.delay_on_commit(run.pk)
    return run


def _cells_store(
    run: SynthesisRun,
    tasks: Sequence[Task],
    dimensions: Sequence[Dimension],
    agents: Sequence[JudgeEndpoint],
) -> None:
    """The plan, stored once: a resume reads these rows, so tasks imported later change nothing."""
    plan = cells_plan(
        tasks=[t.external_id for t in tasks],
        dimensions=sorted(d.name for d in dimensions),
        agents=sorted(a.name for a in agents),
        seed=run.seed,
        domains={t.external_id: t.domain or "general" for t in tasks},
    )
    task_pks = {t.external_id: t.pk for t in tasks}
    dimension_pks = {d.name: d.pk for d in dimensions}
    SynthesisCell.objects.bulk_create(
        [
            SynthesisCell(
                synthesis=run.synthesis,
                external_id=cell.key,
                task_id=task_pks[cell.task_id],
                dimension_id=dimension_pks[cell.dimension],
                low_level=cell.low,
                high_level=cell.high,
                agent=cell.agent,
            )
            for cell in plan
        ]
    )


def synthesis_resume(
    *, run: SynthesisRun, max_calls: int | None = None, max_cost: float | None = None
) -> None:
    """Queue a stopped run again, with a budget raised where one is given (totals for the run,
    what it spent included). Nothing stored is asked again: steering, rollouts and votes stay."""
    from graders.tasks import synthesis_run_task

    with transaction.atomic():
        if job_requeue(row=run, max_calls=max_calls, max_cost=max_cost):
            synthesis_run_task.delay_on_commit(run.pk)


def synthesis_cancel(*, run: SynthesisRun, by: Any = None) -> None:
    """Ask the run to stop: no judge call is sent after its next check; stored work stays.
    `by`: who asked (the job's creator is told of a cancel only when someone else asked)."""
    job_cancel(job=run.job, by=by)
