"""Synthesis rows made directly (as a run or an import would leave them), for tests.

Every name that reveals a pair's origin carries SECRET, so blinding tests can look for it."""

from collections.abc import Sequence

from labeling.models import (
    Dimension,
    DrawOutcome,
    Project,
    Response,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)

AGENT = "agent-SECRET-model"
STEERING = {
    "reasoning": "SECRET-reasoning",
    "bad": "SECRET-steer-bad: be curt",
    "ok": "SECRET-steer-ok: be plain",
    "good": "SECRET-steer-good: be warm",
}


def synthesis_make(
    project: Project,
    *,
    external_id: str = "syn-SECRET",
    judges: Sequence[str] = ("judge-SECRET-1", "judge-SECRET-2"),
) -> Synthesis:
    return Synthesis.objects.create(project=project, external_id=external_id, judges=list(judges))


def dimension_get(project: Project, name: str) -> Dimension:
    return Dimension.objects.get_or_create(
        project=project, name=name, defaults={"description": f"How {name} the agent is."}
    )[0]


def draw_make(
    synthesis: Synthesis,
    *,
    task: str,
    dimension: str = "friendliness",
    domain: str = "airline",
    levels: tuple[str, str] = ("bad", "ok"),
    retry: int = 0,
    votes: Sequence[bool | None] = (True, True),
    outcome: str | None = None,
    high_first: bool = False,
) -> SynthesisDraw:
    """A draw of the cell (task, dimension), with its two responses (created in the order
    `high_first` says, so tests control which has the smaller id) and its cascade votes; the
    outcome follows from the votes unless given."""
    project = synthesis.project
    task_row = Task.objects.get_or_create(
        project=project,
        external_id=task,
        defaults={"domain": domain, "prompt": f"Help with {task}."},
    )[0]
    cell = SynthesisCell.objects.get_or_create(
        synthesis=synthesis,
        external_id=f"{task}.{dimension}.SECRET-cell",
        defaults={
            "task": task_row,
            "dimension": dimension_get(project, dimension),
            "low_level": levels[0],
            "high_level": levels[1],
            "agent": AGENT,
            "steering": STEERING,
        },
    )[0]

    def response(level: str) -> Response:
        return Response.objects.create(
            project=project,
            task=task_row,
            external_id=f"{task}/{dimension}/{level}/{retry}",
            content=f"Reply {Response.objects.count() + 1} to {task}.",
            source_model=AGENT,
            metadata={"steering": STEERING[level]},
        )

    if high_first:
        high, low = response(levels[1]), response(levels[0])
    else:
        low, high = response(levels[0]), response(levels[1])
    if outcome is None:
        vetoed = any(v is not True for v in votes)
        outcome = DrawOutcome.VETOED if vetoed else DrawOutcome.KEPT
    draw = SynthesisDraw.objects.create(
        cell=cell, retry=retry, low_response=low, high_response=high, outcome=outcome, cost=0.01
    )
    for position, agrees in enumerate(votes):
        SynthesisVote.objects.create(
            draw=draw,
            position=position,
            judge=synthesis.judges[position],
            agrees=agrees,
            slot_order="ab",
            answers=[f'{{"reasoning": "SECRET-vote-{position}", "answer": "B"}}'],
        )
    return draw
