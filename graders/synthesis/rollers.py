"""Rollouts by the user's own harness, as engine Rollers (graders.engine.synthesis.rollout):
the steering jobs exported and their trajectories imported back (HarnessRoller, with
graders.synthesis.harness), or each job POSTed to a rollout webhook (WebhookRoller, with
graders.synthesis.webhook).

A Roller is asked for (task, system addition, agent, seed); a harness needs the job as the
product names it (cell, level, attempt), so `RolloutJobs` finds it back: the cell of that task
and agent whose steering for one of its two levels wraps to that addition, at its first
attempt whose seed is the engine's for that retry (pipeline.rollout_seed)."""

from dataclasses import dataclass
from typing import Any

from graders.engine.synthesis.pipeline import rollout_seed
from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.prompts import steering_wrap
from graders.engine.synthesis.rollout import RolloutDeferred, RolloutFailed
from graders.engine.synthesis.types import Rollout, SynthesisTask
from graders.models import SynthesisRun
from graders.synthesis.store import RowCellStore


@dataclass(frozen=True)
class RolloutJob:
    """One rollout the harness is asked for. `attempt` is the draw's retry (0 first)."""

    cell: str
    task: str
    level: str
    attempt: int
    agent: str
    system_addition: str

    def as_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "task": self.task,
            "level": self.level,
            "attempt": self.attempt,
            "agent": self.agent,
            "system_addition": self.system_addition,
        }


class RolloutJobs:
    """Finds the job a Roller call stands for (see the module docstring)."""

    def __init__(self, run: SynthesisRun, store: RowCellStore) -> None:
        self.run, self.store = run, store
        self._in_flight: set[tuple[str, int, str]] = set()

    def resolve(
        self, task: SynthesisTask, system_addition: str, agent: str, seed: int
    ) -> RolloutJob:
        for key, cell in self.store.cells.items():
            if cell.task.external_id != task.id or cell.agent != agent or not cell.steering:
                continue
            # The engine's seed of a draw names its retry (pipeline.rollout_seed).
            plan = CellPlan(
                key, task.id, cell.dimension.name, cell.low_level, cell.high_level, agent
            )  # type: ignore[arg-type]
            attempts = [
                a
                for a in range(self.run.retries + 1)
                if rollout_seed(self.run.seed, plan, a) == seed
            ]
            for level in (cell.low_level, cell.high_level):
                if steering_wrap(cell.steering[level]) != system_addition:
                    continue
                for attempt in attempts:
                    slot = (key, attempt, level)
                    if (
                        slot in self._in_flight
                        or self.store.rollout_held(key, attempt, level) is not None
                    ):
                        continue
                    self._in_flight.add(slot)
                    return RolloutJob(key, task.id, level, attempt, agent, system_addition)
        raise RolloutFailed(f"no open rollout job of task {task.id} matches this steering")

    def release(self, job: RolloutJob) -> None:
        self._in_flight.discard((job.cell, job.attempt, job.level))


def open_jobs(run: SynthesisRun, store: RowCellStore) -> list[RolloutJob]:
    """The rollouts a harness run owes now: for every cell with steering that is neither
    failed nor finished, both levels of its current attempt (the first not vetoed) that have
    no rollout yet."""
    jobs = []
    for key, cell in sorted(store.cells.items()):
        if cell.error or not cell.steering:
            continue
        attempt = 0
        while attempt <= run.retries and store.draw_outcome(key, attempt) == "vetoed":
            attempt += 1
        if attempt > run.retries or store.draw_outcome(key, attempt) in ("kept", "failed"):
            continue
        for level in (cell.low_level, cell.high_level):
            if store.rollout_held(key, attempt, level) is None:
                jobs.append(
                    RolloutJob(
                        key,
                        cell.task.external_id,
                        level,
                        attempt,
                        cell.agent,
                        steering_wrap(cell.steering[level]),
                    )
                )
    return jobs


class HarnessRoller:
    """Rollouts by the user's harness, two-phase: a pass writes the steering and stops each
    cell at its first rollout not imported yet (RolloutDeferred: no outcome, nothing failed;
    `waiting` collects those cells); the run page exports those jobs, and importing their
    trajectories (graders.synthesis.harness) stores them as rollouts and queues the run again,
    whose next pass goes on to the cascade."""

    def __init__(self, run: SynthesisRun, store: RowCellStore) -> None:
        self.jobs = RolloutJobs(run, store)
        self.waiting: set[str] = set()

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout:
        job = self.jobs.resolve(task, system_addition, agent, seed)
        self.waiting.add(job.cell)
        raise RolloutDeferred(f"waiting for the harness: {job.cell} {job.level} {job.attempt}")
