"""A small factory of synthesis rows (labeling.models Synthesis, SynthesisCell, SynthesisDraw,
SynthesisVote) for the tests of what reads them, written directly, as an import or a run of
this product would leave them. Everything that must stay hidden from evaluators carries a
marker: steering text, vote answers, agent model names, levels in metadata."""

from dataclasses import dataclass

from labeling.models import (
    Dimension,
    Document,
    DrawOutcome,
    Level,
    Project,
    Response,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)

STEERING_MARK = "STEERSECRET"
VOTE_MARK = "VOTESECRET"
AGENT_MARK = "agentsecret-7b"
CONTRASTS = ((Level.BAD, Level.OK), (Level.OK, Level.GOOD), (Level.BAD, Level.GOOD))


@dataclass(frozen=True)
class DrawSpec:
    outcome: str = DrawOutcome.KEPT
    trajectory: bool = False


def synthesis_rows(
    project: Project,
    draws: list[DrawSpec],
    *,
    external_id: str = "padme-test",
    dimension: str = "friendliness",
) -> Synthesis:
    """One cell per draw (one draw each, retry 0), its task with a policy document, and its two
    responses: `low-<i>` says "LOWSIDE <i>", `high-<i>` "HIGHSIDE <i>"; a trajectory response
    has the agent's system prompt, steering included, as its first turn."""
    dim, _ = Dimension.objects.get_or_create(
        project=project, name=dimension, defaults={"description": "Warmth toward the customer."}
    )
    synthesis = Synthesis.objects.create(
        project=project, external_id=external_id, judges=["judge1", "judge2"], retries=2
    )
    for i, spec in enumerate(draws):
        low_level, high_level = CONTRASTS[i % 3]
        task = Task.objects.create(
            project=project,
            external_id=f"{external_id}-t{i}",
            domain="airline",
            prompt=f"Customer {i} asks to change a flight.",
            instructions=f"USERSIM {i}: insist on a refund.",
        )
        Document.objects.create(
            task=task, external_id="policy", title="Policy", text="Changes cost 50 dollars."
        )
        cell = SynthesisCell.objects.create(
            synthesis=synthesis,
            external_id=f"airline.{dimension}.t{i}",
            task=task,
            dimension=dim,
            low_level=low_level,
            high_level=high_level,
            agent=AGENT_MARK,
            steering={
                "reasoning": f"{STEERING_MARK} reasoning",
                **{
                    level: f"{STEERING_MARK} {level} instruction" for level in ("bad", "ok", "good")
                },
            },
        )
        sides = []
        for side, level in (("low", low_level), ("high", high_level)):
            text = f"{side.upper()}SIDE {i}: here is what I can do."
            messages = None
            if spec.trajectory:
                messages = [
                    {"role": "system", "content": f"Be helpful. {STEERING_MARK} {level}"},
                    {"role": "user", "content": "I need to change my flight."},
                    {"role": "assistant", "content": text},
                ]
            sides.append(
                Response.objects.create(
                    project=project,
                    task=task,
                    external_id=f"{external_id}/{side}-{i}",
                    content="" if messages else text,
                    messages=messages,
                    source_model=AGENT_MARK,
                    metadata={"level": level, "steering": STEERING_MARK},
                )
            )
        draw = SynthesisDraw.objects.create(
            cell=cell, retry=0, low_response=sides[0], high_response=sides[1], outcome=spec.outcome
        )
        votes = 2 if spec.outcome == DrawOutcome.KEPT else 1
        for position in range(votes):
            SynthesisVote.objects.create(
                draw=draw,
                position=position,
                judge=f"judge{position + 1}",
                agrees=spec.outcome == DrawOutcome.KEPT,
                slot_order="ab",
                answers=[f'{{"reasoning": "{VOTE_MARK}", "answer": "B"}}'],
            )
    return synthesis
