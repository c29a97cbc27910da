"""The engine's CellStore on the labeling rows: steering on SynthesisCell, one SynthesisDraw per
(cell, retry) whose two rollouts are Responses of the cell's task, SynthesisVote per judge, and
a synthetic Preference for the higher response of each draw (its constructed label). Each draw
also keeps its calls and tokens per stage (SynthesisDraw.usage: "rollout" and "filter", and on
retry 0 the cell's "steer"), which the funnel's stage table adds up.

The engine calls the store from its event loop, where the ORM may not run: reads are answered
from what the pass loaded at its start (and kept up to date by its own writes, as one worker
holds the run's lease), writes go to the thread that owns the database through the judge
cache's bridge (DatabaseJudgeCache.call). Every write is an upsert under a unique constraint,
so a write repeated by a second delivery changes nothing.

Once the pass is told to stop (a cancel, a lost lease, the budget), the store writes nothing
more: a call cut short must not be recorded as a failure or a veto. Whatever was answered
meanwhile is in the judge cache, so a resume gets it again for free."""

import hashlib
from collections.abc import Callable
from typing import Any

from django.db import transaction

from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.types import Rollout, Spent, Steering, Vote
from graders.judge_cache import DatabaseJudgeCache
from graders.models import RolloutMode, SynthesisRun
from labeling.models import (
    Annotator,
    Choice,
    DrawOutcome,
    Preference,
    Provider,
    Response,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
)


def rollout_response_id(run: SynthesisRun, cell: str, retry: int, level: str) -> str:
    """A rollout's Response id: the synthesis, cell and retry, then a tag drawn from the level
    rather than the level itself. Task pages list a task's responses in id order, and a level
    in the id would put the lower level first in two contrasts of three."""
    material = f"{run.synthesis_id}:{cell}:{retry}:{level}:{run.seed}".encode()
    return f"{run.synthesis.external_id}/{cell}/{retry}/{hashlib.sha256(material).hexdigest()[:10]}"


def synthetic_annotator(synthesis: Synthesis) -> Annotator:
    """The constructed labels' annotator: the synthesis, by its id (FORMATS.md)."""
    annotator, _ = Annotator.objects.get_or_create(
        project_id=synthesis.project_id, name=synthesis.external_id
    )
    return annotator


class RowCellStore:
    """See the module docstring. `changed()` runs on the database thread after each write of
    the engine's (the pass's progress, which it throttles); `stopped()` says whether the pass
    must stop."""

    def __init__(
        self,
        run: SynthesisRun,
        bridge: DatabaseJudgeCache | None,
        *,
        changed: Callable[[], None],
        stopped: Callable[[], bool],
    ) -> None:
        self.run, self._bridge = run, bridge
        self._changed, self._stopped = changed, stopped
        cells = SynthesisCell.objects.filter(synthesis=run.synthesis).select_related(
            "task", "dimension"
        )
        self.cells: dict[str, SynthesisCell] = {c.external_id: c for c in cells}
        self.draws: dict[tuple[str, int], SynthesisDraw] = {}
        self._rollouts: dict[tuple[str, int, str], Rollout] = {}
        self._votes: dict[tuple[str, int, int], Vote] = {}
        # A harness's rollouts (webhook or imported) report no tokens: unknown, not zero.
        self._rollout_tokens_known = run.mode in (RolloutMode.SINGLE, RolloutMode.CONVERSATION)
        self._annotator: Annotator | None = None  # the constructed labels', on first need
        self._load()

    def _load(self) -> None:
        keys = {c.pk: c.external_id for c in self.cells.values()}
        draws = SynthesisDraw.objects.filter(cell__synthesis=self.run.synthesis)
        responses = Response.objects.in_bulk(
            [pk for d in draws for pk in (d.low_response_id, d.high_response_id) if pk]
        )
        for draw in draws:
            cell = self.cells[keys[draw.cell_id]]
            self.draws[(cell.external_id, draw.retry)] = draw
            for level, pk in ((cell.low_level, draw.low_response_id),
                              (cell.high_level, draw.high_response_id)):  # fmt: skip
                if pk is not None:
                    self._rollouts[(cell.external_id, draw.retry, level)] = _rollout(responses[pk])
            for level, held in draw.held.items():
                self._rollouts[(cell.external_id, draw.retry, level)] = _rollout_read(held)
        by_pk = {draw.pk: (keys[draw.cell_id], draw.retry) for draw in draws}
        for vote in SynthesisVote.objects.filter(draw__cell__synthesis=self.run.synthesis):
            key, retry = by_pk[vote.draw_id]
            self._votes[(key, retry, vote.position)] = Vote(
                position=vote.position,
                judge=vote.judge,
                agrees=vote.agrees,
                slot_order=vote.slot_order,  # type: ignore[arg-type]
                answers=tuple(vote.answers),
            )

    # Reads: from memory, on the event loop ---------------------------------------------------

    def steering(self, cell: CellPlan) -> Steering | None:
        stored = self.cells[cell.key].steering
        return Steering(**stored) if stored else None

    def rollout(self, cell: CellPlan, retry: int, level: str) -> Rollout | None:
        return self._rollouts.get((cell.key, retry, level))

    def vote(self, cell: CellPlan, retry: int, position: int) -> Vote | None:
        return self._votes.get((cell.key, retry, position))

    def rollout_held(self, key: str, retry: int, level: str) -> Rollout | None:
        return self._rollouts.get((key, retry, level))

    def draw_outcome(self, key: str, retry: int) -> str | None:
        draw = self.draws.get((key, retry))
        return None if draw is None else draw.outcome

    # Writes: on the database thread ----------------------------------------------------------

    def _write(self, function: Callable[..., None], key: str, *args: Any) -> None:
        assert self._bridge is not None, "a store without a bridge is written from its thread"
        self._bridge.call(self._guarded, function, key, *args)

    def _guarded(self, function: Callable[..., None], key: str, *args: Any) -> None:
        if self._stopped():
            return
        function(key, *args)
        self._changed()

    def steering_put(self, cell: CellPlan, steering: Steering) -> None:
        self._write(self.steering_save, cell.key, steering)

    def rollout_put(self, cell: CellPlan, retry: int, level: str, rollout: Rollout) -> None:
        self._write(self.rollout_save, cell.key, retry, level, rollout)

    def vote_put(self, cell: CellPlan, retry: int, vote: Vote) -> None:
        self._write(self._vote_save, cell.key, retry, vote)

    def draw_end(self, cell: CellPlan, retry: int, kept: bool) -> None:
        self._write(self._draw_end_save, cell.key, retry, kept)

    def cell_fail(self, cell: CellPlan, retry: int | None, reason: str) -> None:
        self._write(self._cell_fail_save, cell.key, retry, reason)

    # The database thread's side: also called directly by an import of harness rollouts.

    @transaction.atomic
    def steering_save(self, key: str, steering: Steering) -> None:
        """The cell's steering, and its first draw (pending until its rollouts come) holding
        what the steering took, so the stage is counted even if the run stops right here."""
        row = self.cells[key]
        if row.steering:  # written once; a retry keeps the cell's first steering
            return
        row.steering = steering.as_dict()
        SynthesisCell.objects.filter(pk=row.pk).update(steering=row.steering)
        # The writer's calls count on the first draw (FORMATS.md), which starts now.
        draw = self._draw(key, 0)
        _stage_add(draw, "steer", steering.calls, _tokens(steering))
        draw.save(update_fields=["usage"])

    def _draw(self, key: str, retry: int) -> SynthesisDraw:
        draw = self.draws.get((key, retry))
        if draw is None:
            draw, _ = SynthesisDraw.objects.get_or_create(cell=self.cells[key], retry=retry)
            self.draws[(key, retry)] = draw
        return draw

    @transaction.atomic
    def rollout_save(self, key: str, retry: int, level: str, rollout: Rollout) -> None:
        """Hold a draw's first rollout on the draw; with the second, create both Responses at
        once, in the order of their hashed ids: their primary keys then follow neither the
        levels nor which rollout came back first."""
        cell = self.cells[key]
        draw = self._draw(key, retry)
        if (key, retry, level) in self._rollouts:
            return
        draw.cost += rollout.cost
        tokens = _tokens(rollout) if self._rollout_tokens_known else None
        _stage_add(draw, "rollout", rollout.calls, tokens)
        self._rollouts[(key, retry, level)] = rollout
        other = cell.high_level if level == cell.low_level else cell.low_level
        if other not in draw.held:
            draw.held[level] = _rollout_json(rollout)
            draw.save(update_fields=["held", "cost", "usage"])
            return
        both = {level: rollout, other: _rollout_read(draw.held.pop(other))}
        ids = {lvl: rollout_response_id(self.run, key, retry, lvl) for lvl in both}
        for lvl in sorted(both, key=ids.__getitem__):
            field = "low_response" if lvl == cell.low_level else "high_response"
            setattr(draw, field, self._response_put(cell, ids[lvl], both[lvl]))
        draw.save(update_fields=["low_response", "high_response", "held", "cost", "usage"])
        self._label_put(cell, draw)

    def _response_put(self, cell: SynthesisCell, external_id: str, rollout: Rollout) -> Response:
        stored = _rollout_json(rollout)
        response, _ = Response.objects.get_or_create(
            project=self.run.project,
            external_id=external_id,
            defaults={
                "task": cell.task,
                "content": stored.pop("content") or "",
                "messages": stored.pop("messages"),
                # No agent name: the source is what a reader must not learn.
                "source_model": "",
                "metadata": {"rollout": stored},
            },
        )
        return response

    @transaction.atomic
    def _vote_save(self, key: str, retry: int, vote: Vote) -> None:
        draw = self._draw(key, retry)
        _, created = SynthesisVote.objects.get_or_create(
            draw=draw,
            position=vote.position,
            defaults={
                "judge": vote.judge,
                "agrees": vote.agrees,
                "slot_order": vote.slot_order,
                "answers": list(vote.answers),
            },
        )
        if created:
            draw.cost += vote.cost
            _stage_add(draw, "filter", vote.calls, _tokens(vote))
            draw.save(update_fields=["cost", "usage"])
        self._votes[(key, retry, vote.position)] = vote

    @transaction.atomic
    def _draw_end_save(self, key: str, retry: int, kept: bool) -> None:
        draw = self._draw(key, retry)
        if draw.outcome != DrawOutcome.PENDING:
            return
        draw.outcome = DrawOutcome.KEPT if kept else DrawOutcome.VETOED
        draw.save(update_fields=["outcome"])

    def _label_put(self, cell: SynthesisCell, draw: SynthesisDraw) -> None:
        """The constructed label a draw implies once it has both rollouts, whatever the
        judges make of it (FORMATS.md, as an import of the draw writes it): the higher
        level's response is preferred. The validation reads it for vetoed draws too."""
        if self._annotator is None:
            self._annotator = synthetic_annotator(self.run.synthesis)
        annotator = self._annotator
        if not Preference.objects.filter(
            response_a_id=draw.low_response_id,
            response_b_id=draw.high_response_id,
            dimension_id=cell.dimension_id,
            annotator=annotator,
            is_current=True,
        ).exists():
            Preference.objects.create(
                task_id=cell.task_id,
                response_a_id=draw.low_response_id,
                response_b_id=draw.high_response_id,
                choice=Choice.B,
                dimension_id=cell.dimension_id,
                provider=Provider.SYNTHETIC,
                annotator=annotator,
            )

    @transaction.atomic
    def _cell_fail_save(self, key: str, retry: int | None, reason: str) -> None:
        row = self.cells[key]
        row.error = reason[:2000]
        SynthesisCell.objects.filter(pk=row.pk).update(error=row.error)
        # The draw it failed in (a rollout or a judge call), if any, ends failed with the
        # reason, a row even when neither rollout came back.
        if retry is not None:
            draw = self._draw(key, retry)
            if draw.outcome == DrawOutcome.PENDING:
                draw.outcome, draw.error = DrawOutcome.FAILED, row.error
                draw.save(update_fields=["outcome", "error"])


def _tokens(spent: Spent | Rollout) -> int:
    return spent.tokens_in + spent.tokens_out


def _stage_add(draw: SynthesisDraw, stage: str, calls: int, tokens: int | None) -> None:
    """Add a stage's calls and tokens to the draw's usage, as an import stores it (FORMATS.md
    synthesis_draw "usage"): tokens are left out, unknown, once any part of the stage did not
    report them. A value that made no call (an imported trajectory) adds nothing, so the
    stage is left out rather than claiming 0 calls."""
    if not calls:
        return
    held = (draw.usage or {}).get(stage, {"calls": 0, "tokens": 0})
    usage = {"calls": held["calls"] + calls}
    if tokens is not None and held.get("tokens") is not None:
        usage["tokens"] = held["tokens"] + tokens
    draw.usage = {**(draw.usage or {}), stage: usage}


def _rollout_json(rollout: Rollout) -> dict[str, Any]:
    """A rollout as held on its draw (and, without its text, in its Response's metadata)."""
    return {
        "content": rollout.content,
        "messages": rollout.messages,
        "cost": rollout.cost,
        "calls": rollout.calls,
        "tokens_in": rollout.tokens_in,
        "tokens_out": rollout.tokens_out,
    }


def _rollout_read(stored: dict[str, Any]) -> Rollout:
    return Rollout(
        content=stored.get("content"),
        messages=stored.get("messages"),
        cost=float(stored.get("cost", 0.0)),
        calls=int(stored.get("calls", 0)),
        tokens_in=int(stored.get("tokens_in", 0)),
        tokens_out=int(stored.get("tokens_out", 0)),
    )


def _rollout(response: Response) -> Rollout:
    stored = (response.metadata or {}).get("rollout", {})
    text = response.content if response.messages is None else None
    return _rollout_read({**stored, "content": text, "messages": response.messages})
