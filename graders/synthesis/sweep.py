"""Starting and resuming an evaluator sweep (PADME section 5.3, DESIGN.md section 11); the
running is in graders/synthesis/sweep_run.py.

Each response of a synthesis's kept pairs is scored alone on its cell's dimension, by each
evaluator, in runs 0..n-1: a judge endpoint through the evaluator prompt
(graders/engine/synthesis/evaluator.py), a scalar metagrader through its own program on an
endpoint. Every score (None for a failed call or an answer out of [0, 1]) is a JudgeScore row,
so the meta-evaluation page and `meta_eval` rank the evaluators on the synthetic labels."""

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from graders.models import JudgeEndpoint, Metagrader, SynthesisSweep
from graders.synthesis.kept_pairs import kept_draws
from graders.synthesis.store import synthetic_annotator
from labeling.jobs import job_create, job_requeue
from labeling.models import (
    JudgeScore,
    Preference,
    Project,
    Provider,
    Synthesis,
)

SWEEP_JOB = "synthesis_sweep"
DEFAULT_RUNS = 3
MAX_RUNS = 20
JUDGE_NAME_MAX = JudgeScore._meta.get_field("judge").max_length or 200


class SweepInvalid(ValueError):
    """A sweep that cannot start as asked; the message says what to change."""


# Starting -------------------------------------------------------------------------------------


def evaluator_name(endpoint: JudgeEndpoint, metagrader: Metagrader | None = None) -> str:
    """The JudgeScore name of an evaluator: the endpoint with its model (a new model behind the
    same endpoint is a new evaluator), or the metagrader by name and id on that endpoint."""
    if metagrader is None:
        return f"{endpoint.name} ({endpoint.model})"
    return f"{metagrader.name} #{metagrader.pk} on {endpoint.name} ({endpoint.model})"


def kept_pairs(synthesis: Synthesis) -> list[tuple[int, int, int, int]]:
    """(low response, high response, dimension, task) of each kept draw with both responses."""
    return list(
        kept_draws(synthesis=synthesis)
        .select_related(None)
        .prefetch_related(None)
        .values_list("low_response_id", "high_response_id", "cell__dimension_id", "cell__task_id")
    )


@transaction.atomic
def sweep_start(
    *,
    synthesis: Synthesis,
    judges: Sequence[JudgeEndpoint] = (),
    graders: Sequence[Metagrader] = (),
    grader_endpoint: JudgeEndpoint | None = None,
    runs: int = DEFAULT_RUNS,
    max_calls: int | None = None,
    max_cost: float | None = None,
    user: Any = None,
) -> SynthesisSweep:
    """Check a sweep and enqueue it when this commits. Metagraders run on `grader_endpoint`
    (default: the project's default endpoint). Raises SweepInvalid naming what is wrong;
    nothing is written then."""
    project = synthesis.project
    if not 1 <= runs <= MAX_RUNS:
        raise SweepInvalid(f"runs must be from 1 to {MAX_RUNS}, not {runs}")
    evaluators = _evaluators(project, judges, graders, grader_endpoint)
    if not kept_draws(synthesis=synthesis).exists():
        raise SweepInvalid(f"synthesis {synthesis.external_id!r} has no kept pair with responses")
    synthesis_labels_ensure(synthesis=synthesis)
    job = job_create(kind=SWEEP_JOB, project=project, user=user)
    sweep = SynthesisSweep.objects.create(
        project=project,
        synthesis=synthesis,
        job=job,
        evaluators=evaluators,
        runs=runs,
        max_calls=max_calls,
        max_cost=max_cost,
    )
    from graders.tasks import synthesis_sweep_task

    synthesis_sweep_task.delay_on_commit(sweep.pk)
    return sweep


def _evaluators(
    project: Project,
    judges: Sequence[JudgeEndpoint],
    graders: Sequence[Metagrader],
    grader_endpoint: JudgeEndpoint | None,
) -> list[dict[str, Any]]:
    """The sweep's evaluators as stored ({"name", "endpoint", "metagrader"}), checked."""
    if not judges and not graders:
        raise SweepInvalid("choose at least one judge endpoint or scalar grader to sweep")
    if graders and grader_endpoint is None:
        grader_endpoint = JudgeEndpoint.objects.filter(project=project, is_default=True).first()
        if grader_endpoint is None:
            raise SweepInvalid("graders need an endpoint to run on, and the project has no default")
    foreign = [str(e) for e in (*judges, grader_endpoint) if e and e.project_id != project.pk]
    foreign += [str(g) for g in graders if g.project_id != project.pk]
    if foreign:
        raise SweepInvalid(f"not in project {project.slug!r}: {', '.join(foreign)}")
    not_scalar = [f"#{g.pk} {g.name} ({g.kind})" for g in graders if g.kind != "scalar"]
    if not_scalar:
        raise SweepInvalid(
            f"only scalar graders score one response alone: {', '.join(not_scalar)} is not"
        )
    evaluators = [{"name": evaluator_name(e), "endpoint": e.pk, "metagrader": None} for e in judges]
    if grader_endpoint is not None:
        evaluators += [
            {"name": evaluator_name(grader_endpoint, g), "endpoint": grader_endpoint.pk,
             "metagrader": g.pk}
            for g in graders
        ]  # fmt: skip
    names = [e["name"] for e in evaluators]
    if len(set(names)) != len(names):
        raise SweepInvalid("an evaluator is listed twice")
    too_long = [n for n in names if len(n) > JUDGE_NAME_MAX]
    if too_long:
        raise SweepInvalid(
            f"evaluator name longer than {JUDGE_NAME_MAX} characters: {too_long[0][:60]}...; "
            "shorten the endpoint or grader name"
        )
    return evaluators


def synthesis_labels_ensure(*, synthesis: Synthesis) -> int:
    """Write each kept draw's implied synthetic label where it is missing (FORMATS.md: provider
    synthetic, annotator the synthesis id, the higher level preferred on the cell's dimension),
    so the meta-evaluation reads the kept pairs as labeled whether an import or a run of this
    product made them. A pair that has a current label from that annotator keeps it. Returns
    the number written."""
    annotator = synthetic_annotator(synthesis)
    labeled = {
        (min(a, b), max(a, b), dimension)
        for a, b, dimension in Preference.objects.filter(
            annotator=annotator, is_current=True
        ).values_list("response_a_id", "response_b_id", "dimension_id")
    }
    missing = [
        Preference(
            task_id=task,
            response_a_id=low,
            response_b_id=high,
            choice="b",
            dimension_id=dimension,
            provider=Provider.SYNTHETIC,
            annotator=annotator,
        )
        for low, high, dimension, task in kept_pairs(synthesis)
        if (min(low, high), max(low, high), dimension) not in labeled
    ]
    Preference.objects.bulk_create(missing)
    return len(missing)


def sweep_resume(
    *, sweep: SynthesisSweep, max_calls: int | None = None, max_cost: float | None = None
) -> None:
    """Queue a stopped sweep again, with its budget raised where one is given (totals for the
    sweep, what it spent included); the scores written and the cached answers stay."""
    from graders.tasks import synthesis_sweep_task

    with transaction.atomic():
        job_requeue(row=sweep, max_calls=max_calls, max_cost=max_cost)
        synthesis_sweep_task.delay_on_commit(sweep.pk)
