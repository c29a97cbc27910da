"""Which cells a synthesis run fills, and each cell's contrast and agent (DESIGN.md section 11).

A cell is one (task, dimension). Within each dimension the tasks are put in a seeded order and
dealt the three contrasts in turn, so each contrast gets a third of the dimension's cells (the
counts differ by at most one when the tasks do not divide by three). The turn starts one contrast
later in each next dimension, so the leftover cells of different dimensions go to different
contrasts and the run as a whole stays balanced too. The agent is drawn per cell from the cell's
own seeded stream, so adding a task or an agent draw elsewhere never changes another cell's agent.

Seeds are strings hashed by random.Random (SHA-512), not Python's salted hash(), so a plan is the
same in every process: a resumed run finds the cells it planned before.
"""

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graders.engine.synthesis.types import CONTRASTS, Level


@dataclass(frozen=True)
class CellPlan:
    """One cell: the task, the dimension, the two levels rolled out (low < high in bad < ok <
    good) and the agent model both sides come from. `key` names the cell stably and uniquely
    within a run (SynthesisCell.external_id)."""

    key: str
    task_id: str
    dimension: str
    low: Level
    high: Level
    agent: str

    @property
    def contrast(self) -> str:
        return f"{self.low}-{self.high}"


class PlanInvalid(ValueError):
    """The plan's inputs cannot make a plan; the message says which and why."""


def cells_plan(
    *,
    tasks: Sequence[str],
    dimensions: Sequence[str],
    agents: Sequence[str],
    seed: int,
    domains: Mapping[str, str] | None = None,
) -> list[CellPlan]:
    """Every (task, dimension) cell, dimension by dimension in the given order and tasks in the
    given order within each. Keys read "{domain}.{dimension}.{task}" when `domains` (task id ->
    domain) is given, else "{dimension}.{task}"."""
    _require_distinct("tasks", tasks)
    _require_distinct("dimensions", dimensions)
    _require_distinct("agents", agents)
    if domains is not None:
        missing = [task for task in tasks if task not in domains]
        if missing:
            raise PlanInvalid(f"domains: no domain for task {', '.join(missing[:5])}")
    cells: list[CellPlan] = []
    for index, dimension in enumerate(dimensions):
        contrasts = contrasts_deal(tasks, dimension, seed, start=index)
        for task in tasks:
            low, high = contrasts[task]
            key = f"{dimension}.{task}"
            if domains is not None:
                key = f"{domains[task]}.{key}"
            agent = random.Random(f"{seed}:agent:{dimension}:{task}").choice(agents)
            cells.append(CellPlan(key, task, dimension, low, high, agent))
    _require_distinct("cell keys", [cell.key for cell in cells])
    return cells


def contrasts_deal(
    tasks: Sequence[str], dimension: str, seed: int, *, start: int = 0
) -> dict[str, tuple[Level, Level]]:
    """One dimension's contrasts by task: the tasks shuffled with (seed, dimension), the k-th of
    them given CONTRASTS[(start + k) % 3]."""
    order = list(tasks)
    random.Random(f"{seed}:contrast:{dimension}").shuffle(order)
    return {
        task: CONTRASTS[(start + position) % len(CONTRASTS)] for position, task in enumerate(order)
    }


def _require_distinct(what: str, values: Sequence[str]) -> None:
    if not values:
        raise PlanInvalid(f"{what}: none given")
    seen: set[str] = set()
    for value in values:
        if not value:
            raise PlanInvalid(f"{what}: an empty name")
        if value in seen:
            raise PlanInvalid(f"{what}: {value!r} appears twice")
        seen.add(value)
