"""Synthesis generation, cell by cell: steer, roll both levels, filter through the cascade,
retry what was vetoed (DESIGN.md section 11, PADME Algorithm 1)."""

from typing import Protocol

from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.types import Rollout, Steering, Vote


class CellStore(Protocol):
    """Where the pipeline keeps what it produced, so a resumed run never asks for it again.
    Called from the event loop; every put must be idempotent (a put of something already
    stored changes nothing)."""

    def steering(self, cell: CellPlan) -> Steering | None: ...

    def steering_put(self, cell: CellPlan, steering: Steering) -> None: ...

    def rollout(self, cell: CellPlan, retry: int, level: str) -> Rollout | None: ...

    def rollout_put(self, cell: CellPlan, retry: int, level: str, rollout: Rollout) -> None: ...

    def vote(self, cell: CellPlan, retry: int, position: int) -> Vote | None: ...

    def vote_put(self, cell: CellPlan, retry: int, vote: Vote) -> None: ...

    def draw_end(self, cell: CellPlan, retry: int, kept: bool) -> None: ...

    def cell_fail(self, cell: CellPlan, reason: str) -> None: ...
