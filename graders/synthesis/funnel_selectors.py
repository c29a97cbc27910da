"""Reads for the synthesis funnel: which synthesis a page or command means, and its rows as the
engine's inputs (graders/engine/synthesis/funnel.py). Generated and imported syntheses are the
same rows, so they read the same way."""

from collections import defaultdict

from graders.engine.synthesis.funnel import (
    Cell,
    Draw,
    Funnel,
    StageUsage,
    SynthesisRun,
    Vote,
    funnel_compute,
)
from labeling.demo import demo_synthesis_note
from labeling.models import Project, Synthesis, SynthesisCell, SynthesisDraw, SynthesisVote


class SynthesisChoiceError(Exception):
    """No synthesis matches what was asked for; the message says why in one line."""


def syntheses_list(*, project: Project) -> list[Synthesis]:
    """The project's syntheses, newest first."""
    return list(Synthesis.objects.filter(project=project).order_by("-created_at", "-pk"))


def synthesis_choose(*, project: Project, external_id: str | None) -> Synthesis:
    """The synthesis `external_id` of the project, or its only one when none is named;
    SynthesisChoiceError when it does not exist, the project has none, or several."""
    if external_id is not None:
        found = Synthesis.objects.filter(project=project, external_id=external_id).first()
        if found is None:
            raise SynthesisChoiceError(f"project {project.slug!r} has no synthesis {external_id!r}")
        return found
    syntheses = syntheses_list(project=project)
    if not syntheses:
        raise SynthesisChoiceError(
            f"project {project.slug!r} has no synthesis yet: run one or import synthesis records"
        )
    if len(syntheses) > 1:
        names = ", ".join(s.external_id for s in syntheses)
        raise SynthesisChoiceError(
            f"project {project.slug!r} has {len(syntheses)} syntheses ({names}): name one "
            "with --synthesis"
        )
    return syntheses[0]


def synthesis_run_load(*, synthesis: Synthesis) -> SynthesisRun:
    """The synthesis's cells, draws and votes as the engine's dataclasses. Read as plain rows,
    three statements, not model instances: the funnel of 2,000 cells spent 0.6 s building
    rows it reads seven fields of."""
    votes: defaultdict[int, list[Vote]] = defaultdict(list)
    for draw_id, judge, agrees, slot_order in (
        SynthesisVote.objects.filter(draw__cell__synthesis=synthesis)
        .order_by("draw", "position")
        .values_list("draw_id", "judge", "agrees", "slot_order")
    ):
        votes[draw_id].append(Vote(judge=judge, agrees=agrees, slot_order=slot_order))
    draws: defaultdict[int, list[Draw]] = defaultdict(list)
    for draw_id, cell_id, retry, outcome, cost, usage in (
        SynthesisDraw.objects.filter(cell__synthesis=synthesis)
        .order_by("cell", "retry")
        .values_list("pk", "cell_id", "retry", "outcome", "cost", "usage")
    ):
        draws[cell_id].append(
            Draw(
                retry=retry,
                outcome=outcome,
                cost=cost,
                votes=tuple(votes[draw_id]),
                usage={
                    stage: StageUsage(calls=int(u.get("calls", 0)), tokens=u.get("tokens"))
                    for stage, u in (usage or {}).items()
                },
            )
        )
    cells = (
        SynthesisCell.objects.filter(synthesis=synthesis)
        .order_by("external_id")
        .values_list(
            "pk", "external_id", "dimension__name", "task__domain", "low_level", "high_level",
            "agent",
        )
    )  # fmt: skip
    return SynthesisRun(
        judges=tuple(synthesis.judges),
        retries=synthesis.retries,
        cells=tuple(
            Cell(
                id=external_id,
                dimension=dimension,
                domain=domain,
                contrast=f"{low}-{high}",
                agent=agent,
                draws=tuple(draws[pk]),
            )
            for pk, external_id, dimension, domain, low, high, agent in cells
        ),
    )


def synthesis_funnel(*, synthesis: Synthesis) -> Funnel:
    """The funnel of one synthesis (paper Tables 1, 8 and 9)."""
    return funnel_compute(synthesis_run_load(synthesis=synthesis))


def synthesis_funnel_json(*, synthesis: Synthesis) -> dict[str, object]:
    """The `synthesis_funnel --json` document: FORMATS.md's keys, plus which synthesis and its
    note (the demo synthesis's "mechanics only" label; null for any other)."""
    return {
        "synthesis": synthesis.external_id,
        "note": demo_synthesis_note(synthesis) or None,
        "judges": list(synthesis.judges),
        "retries": synthesis.retries,
        **synthesis_funnel(synthesis=synthesis).as_json(),
    }
