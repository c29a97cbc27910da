"""Rollouts: an agent doing a task with a steering instruction added to its system prompt.

A Roller is whatever produces one rollout; the engine has two (below), the Django side adds the
user's own harness (exported jobs, a webhook) implementing the same protocol.
"""

from typing import Protocol

from graders.engine.synthesis.types import Rollout, SynthesisTask


class Roller(Protocol):
    """Produces one rollout of `task` by `agent` with `system_addition` (the wrapped steering
    instruction, prompts.steering_wrap) appended to the agent's system prompt. `seed` tells
    attempts apart: the same (task, addition, agent, seed) may be answered from a cache, a new
    seed asks for a fresh rollout. A failed rollout raises RolloutFailed with the reason."""

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout: ...


class RolloutFailed(Exception):
    """A rollout could not be produced; the message says why (it becomes the draw's error)."""
