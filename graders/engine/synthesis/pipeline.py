"""Synthesis generation, cell by cell: steer, roll both levels, filter through the cascade,
retry what was vetoed (DESIGN.md section 11, PADME Algorithm 1)."""

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from graders.engine.judge import ChatResult
from graders.engine.programs import Judge, gather_all
from graders.engine.slots import call_priority
from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.prompts import (
    Choice,
    SteerInvalid,
    filter_parse,
    filter_request,
    steer_parse,
    steer_request,
    steering_wrap,
)
from graders.engine.synthesis.rollout import Roller, RolloutDeferred, RolloutFailed
from graders.engine.synthesis.types import (
    DimensionSpec,
    Rollout,
    SlotOrder,
    Steering,
    SynthesisTask,
    Vote,
    spent_fields,
)

# A judge that states no verdict is asked this many more times before it counts as a veto.
FILTER_REASKS = 2


class CellStore(Protocol):
    """Where the pipeline keeps what it produced, so a resumed run never asks for it again.
    Called from the event loop; every put must be idempotent (a put of something already
    stored changes nothing). `level` is "bad", "ok" or "good"; `position` is the judge's index
    in the cascade, 0 for the first; draw_end(kept=False) is a veto (or no verdict) by the
    draw's last vote. cell_fail's reason names the stage (steering writer, rollout <level>
    (retry r), filter judge <name>); its `retry` is the draw the cell failed in (None when it
    failed before its first draw, at the steering), which gets no draw_end. A cell whose
    rollout is deferred (RolloutDeferred) gets neither: it stops without an outcome."""

    def steering(self, cell: CellPlan) -> Steering | None: ...

    def steering_put(self, cell: CellPlan, steering: Steering) -> None: ...

    def rollout(self, cell: CellPlan, retry: int, level: str) -> Rollout | None: ...

    def rollout_put(self, cell: CellPlan, retry: int, level: str, rollout: Rollout) -> None: ...

    def vote(self, cell: CellPlan, retry: int, position: int) -> Vote | None: ...

    def vote_put(self, cell: CellPlan, retry: int, vote: Vote) -> None: ...

    def draw_end(self, cell: CellPlan, retry: int, kept: bool) -> None: ...

    def cell_fail(self, cell: CellPlan, retry: int | None, reason: str) -> None: ...


async def cells_run(
    cells: Sequence[CellPlan],
    *,
    tasks: Mapping[str, SynthesisTask],
    dimensions: Mapping[str, DimensionSpec],
    writer: Judge,
    judges: Sequence[tuple[str, Judge]],
    roller: Roller,
    store: CellStore,
    retries: int,
    seed: int,
) -> None:
    """Fill every cell, each as its own task, so no cell or stage waits for another cell.

    Per cell: the steering (stored once), then for retry 0..`retries`: both levels rolled out
    concurrently, then the cascade `judges` in order, each vote stored; a veto (or no verdict)
    ends the draw and starts the next retry, a draw every judge agreed with is kept and ends
    the cell. Whatever the store already holds is used as it is, never asked again.

    A cell that cannot go on (steering still invalid after its re-ask, a failed rollout, a
    failed judge call) is reported with store.cell_fail and the others go on. A cell whose
    roller defers a rollout (RolloutDeferred: a harness sends it later) stops quietly, with
    nothing stored as failed and no draw_end, so a later pass resumes its draw. When a call
    raises (BudgetExhausted, CallsStopped), every cell still finishes the calls it has in flight
    and stores them, then the first such exception is raised.

    Concurrency is each endpoint's own (JudgeClient's max_concurrency); a cell's calls wait for
    its slots with graders.engine.slots.call_priority set from how far the cell has come, so
    one slow call delays its own cell only.
    """
    if not judges:
        raise ValueError("the cascade needs at least one filter judge")
    if retries < 0:
        raise ValueError("retries must be 0 or more")
    run = _Run(tasks, dimensions, writer, tuple(judges), roller, store, retries, seed)
    keys: set[str] = set()
    for cell in cells:
        run.require(cell)
        if cell.key in keys:
            raise ValueError(f"cell {cell.key} appears twice")
        keys.add(cell.key)
    await gather_all(run.cell(cell) for cell in cells)


def slot_order(seed: int, cell: CellPlan, retry: int, position: int) -> SlotOrder:
    """Whether the judge at `position` sees the lower level first ("ab") on this draw: a fair
    coin seeded by (seed, cell, retry, position), so it is the same again on a resume."""
    coin = random.Random(f"{seed}:slot:{cell.key}:{retry}:{position}").random()
    return "ab" if coin < 0.5 else "ba"


def rollout_seed(seed: int, cell: CellPlan, retry: int) -> int:
    """The sampling seed of a draw's two rollouts: new for every retry (a fresh rollout), the
    same again on a resume."""
    return random.Random(f"{seed}:rollout:{cell.key}:{retry}").randrange(2**31)


class _Progress:
    """How far a cell's chain has come in call time (queueing excluded). Its calls wait for an
    endpoint's slots with call_priority = minus that, so a cell a slow call held up does not
    queue again behind cells that are far from done: the run ends near its longest chain."""

    def __init__(self) -> None:
        self.seconds = 0.0
        call_priority.set(0.0)

    def add(self, seconds: float) -> None:
        self.seconds += seconds
        call_priority.set(-self.seconds)


class _CellFailed(Exception):
    """The cell cannot go on; the message is its error."""


@dataclass(frozen=True)
class _Run:
    tasks: Mapping[str, SynthesisTask]
    dimensions: Mapping[str, DimensionSpec]
    writer: Judge
    judges: tuple[tuple[str, Judge], ...]
    roller: Roller
    store: CellStore
    retries: int
    seed: int

    def require(self, cell: CellPlan) -> None:
        if cell.task_id not in self.tasks:
            raise ValueError(f"cell {cell.key}: unknown task {cell.task_id!r}")
        if cell.dimension not in self.dimensions:
            raise ValueError(f"cell {cell.key}: unknown dimension {cell.dimension!r}")

    async def cell(self, cell: CellPlan) -> None:
        """One cell, in its own task: the call_priority it sets holds for its calls only."""
        progress = _Progress()
        retry: int | None = None  # the draw in progress
        try:
            steering = self.store.steering(cell)
            if steering is None:
                steering = await self.steer(cell)
                self.store.steering_put(cell, steering)
            progress.add(steering.latency_s)
            for retry in range(self.retries + 1):
                kept = await self.draw(cell, retry, steering, progress)
                self.store.draw_end(cell, retry, kept)
                if kept:
                    return
        except _CellFailed as failure:
            self.store.cell_fail(cell, retry, str(failure))
        except RolloutDeferred:
            return

    async def steer(self, cell: CellPlan) -> Steering:
        """WriteSteer, asked once more with the validation error if the first answer is
        unusable."""
        dimension, task = self.dimensions[cell.dimension], self.tasks[cell.task_id]
        results: list[ChatResult] = []
        error: str | None = None
        for _ in range(2):
            result = await self.writer.complete(
                steer_request(dimension=dimension, task=task, error=error)
            )
            results.append(result)
            if result.text is None:
                raise _CellFailed(f"steering writer: {result.error or 'no content'}")
            try:
                steering = steer_parse(result.text)
            except SteerInvalid as invalid:
                error = str(invalid)
                continue
            return replace(steering, **spent_fields(results))
        raise _CellFailed(f"steering writer: {error} (still after one re-ask)")

    async def draw(
        self, cell: CellPlan, retry: int, steering: Steering, progress: "_Progress"
    ) -> bool:
        """One draw: both rollouts, then the cascade; True when every judge agreed."""
        low, high = await gather_all(
            self.rollout(cell, retry, level, steering) for level in (cell.low, cell.high)
        )
        progress.add(max(low.latency_s, high.latency_s))
        for position, (name, judge) in enumerate(self.judges):
            vote = self.store.vote(cell, retry, position)
            if vote is None:
                vote = await self.vote(cell, retry, position, name, judge, low, high)
                self.store.vote_put(cell, retry, vote)
            progress.add(vote.latency_s)
            if not vote.keeps:
                return False
        return True

    async def rollout(self, cell: CellPlan, retry: int, level: str, steering: Steering) -> Rollout:
        stored = self.store.rollout(cell, retry, level)
        if stored is not None:
            return stored
        try:
            rollout = await self.roller.roll(
                self.tasks[cell.task_id],
                steering_wrap(steering.for_level(level)),
                agent=cell.agent,
                seed=rollout_seed(self.seed, cell, retry),
            )
        except RolloutFailed as failure:
            raise _CellFailed(f"rollout {level} (retry {retry}): {failure}") from None
        self.store.rollout_put(cell, retry, level, rollout)
        return rollout

    async def vote(
        self,
        cell: CellPlan,
        retry: int,
        position: int,
        name: str,
        judge: Judge,
        low: Rollout,
        high: Rollout,
    ) -> Vote:
        """The judge's forced choice, asked up to FILTER_REASKS more times while it states
        none; agrees is None when it never did."""
        order = slot_order(self.seed, cell, retry, position)
        first, second = (low, high) if order == "ab" else (high, low)
        higher: Choice = "B" if order == "ab" else "A"
        dimension, task = self.dimensions[cell.dimension], self.tasks[cell.task_id]
        results: list[ChatResult] = []
        choice: Choice | None = None
        for reask in range(FILTER_REASKS + 1):
            result = await judge.complete(
                filter_request(
                    dimension=dimension, task=task, first=first, second=second, reask=reask
                )
            )
            results.append(result)
            if result.text is None:
                raise _CellFailed(f"filter judge {name}: {result.error or 'no content'}")
            choice = filter_parse(result.text)
            if choice is not None:
                break
        agrees = None if choice is None else choice == higher
        answers = tuple(result.text or "" for result in results)
        return Vote(position, name, agrees, order, answers, **spent_fields(results))
