"""TRL: GRPOTrainer's reward function (module docstring of graders.engine.trainers)."""

import asyncio
import inspect
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from graders.engine.bundle import Grader, GradeResult
from graders.engine.trainers.groups import (
    DOCUMENTS_KEY,
    INSTRUCTIONS_KEY,
    TASK_ID_KEY,
    TRL_SPLIT_GROUPS,
    GraderSource,
    column,
    function_name,
    grader_loaded,
    grader_now,
    grader_now_async,
    groups_grade,
    pairwise_groups_check,
)


class TRLReward:
    """A TRL GRPOTrainer reward function: `reward_funcs=TRLReward(grader, num_generations=8)`.

    Called as `(prompts, completions, **kwargs) -> list[float]`. Completions are strings or, for
    conversational datasets, lists of message dicts. Blocks of `num_generations` consecutive
    completions must share their prompt (ValueError otherwise: the count does not match
    GRPOConfig.num_generations, or num_generations_eval during evaluation) and are graded as
    one group. Dataset columns `task_id` (a task of the bundle), `documents` (strings or
    {"id", "title", "text"} objects) and `instructions` are read when present.

    A failed grade gets `failure_reward`; None makes TRL leave this function out of that
    completion's reward. `last_failures` counts the failed grades of the latest call; each
    failure is also logged by the grader, and when TRL passes `log_metric` (TRL 1.16 does) the
    call's share of failed grades goes there as `<__name__>/grader_failed`, which TRL averages
    into its logged metrics. `__name__` (default `grader_<bundle name>`) is what TRL logs the
    reward under.
    """

    def __init__(
        self,
        grader: GraderSource,
        num_generations: int,
        *,
        failure_reward: float | None = 0.0,
        name: str | None = None,
    ) -> None:
        if num_generations < 1:
            raise ValueError("num_generations must be at least 1")
        self.grader = grader
        self.num_generations = num_generations
        self.failure_reward = failure_reward
        self.__name__ = name or function_name(grader_loaded(grader))
        self.last_failures = 0

    def __repr__(self) -> str:
        return f"TRLReward({self.grader!r}, num_generations={self.num_generations})"

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        grader = grader_now(self.grader)
        return grader.run_sync(self._score(grader, prompts, completions, **kwargs))

    def as_async(self) -> "TRLAsyncReward":
        """The same reward as an async callable (TRLAsyncReward), which TRL awaits on its
        event loop beside its other async reward functions."""
        return TRLAsyncReward(self)

    async def score(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        grader = await grader_now_async(self.grader)
        return await self._score(grader, prompts, completions, **kwargs)

    async def _score(
        self, grader: Grader, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        results = await self._grade(grader, prompts, completions, **kwargs)
        self.last_failures = sum(not result.ok for result in results)
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None and results:
            log_metric(f"{self.__name__}/grader_failed", self.last_failures / len(results))
        return [
            self.failure_reward if result.reward is None else result.reward for result in results
        ]

    async def grade(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[GradeResult]:
        """The detailed results (reward None on failure), in completion order."""
        grader = await grader_now_async(self.grader)
        return await self._grade(grader, prompts, completions, **kwargs)

    async def _grade(
        self, grader: Grader, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[GradeResult]:
        size = len(completions)
        if len(prompts) != size:
            raise ValueError(f"{len(prompts)} prompts for {size} completions")
        groups = self._groups(grader, prompts)
        pairwise_groups_check(
            grader, groups, "num_generations=1 leaves each completion alone in its group"
        )
        task_ids = column(kwargs, TASK_ID_KEY, size)
        documents = column(kwargs, DOCUMENTS_KEY, size)
        instructions = column(kwargs, INSTRUCTIONS_KEY, size)
        tasks = [
            grader.resolve_task(
                prompt=prompts[row],
                task_id=task_ids[row],
                documents=documents[row],
                instructions=instructions[row],
            )
            for row in range(size)
        ]
        return await groups_grade(grader, tasks, completions, groups)

    def _groups(self, grader: Grader, prompts: Sequence[Any]) -> list[Hashable]:
        size, block = len(prompts), self.num_generations
        if size % block == 0:
            for start in range(0, size, block):
                if any(prompt != prompts[start] for prompt in prompts[start : start + block]):
                    raise ValueError(
                        f"{self.__name__}: completions {start} to {start + block - 1} should be "
                        f"the {block} generations of one prompt, but their prompts differ; "
                        "num_generations must equal GRPOConfig.num_generations (and "
                        "num_generations_eval, if evaluation uses another)"
                    )
            return [row // block for row in range(size)]
        if grader.is_pairwise:
            raise ValueError(
                f"{self.__name__}: {size} completions is not a multiple of num_generations="
                f"{block}: {TRL_SPLIT_GROUPS}"
            )
        # Part of a group: scalar and rubric rewards do not depend on the group, so rows are
        # grouped by runs of one prompt only to share the task's rubric.
        groups: list[Hashable] = []
        for row, prompt in enumerate(prompts):
            groups.append(row if row == 0 or prompt != prompts[row - 1] else groups[-1])
        return groups


class TRLAsyncReward:
    """A TRLReward as an object with `async def __call__`: `reward_funcs=reward.as_async()`.

    TRL awaits it on its event loop (TRL 1.16 recognizes an async callable by its `__call__`;
    older releases and asyncio.iscoroutinefunction by a coroutine-function mark, which this
    object carries too). Unlike a closure it pickles, with its grader, for AsyncGRPOTrainer's
    spawned rollout worker; the mark is set again when it is unpickled. Results, failures and
    `__name__` are those of the TRLReward it wraps (`.reward`).
    """

    def __init__(self, reward: TRLReward) -> None:
        self.reward = reward
        self.__name__ = reward.__name__
        _mark_coroutine_function(self)

    def __repr__(self) -> str:
        return f"TRLAsyncReward({self.reward!r})"

    async def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        return await self.reward.score(prompts, completions, **kwargs)

    def __reduce__(self) -> tuple[type["TRLAsyncReward"], tuple[TRLReward]]:
        # Rebuilt by its constructor: the mark is a sentinel object of this process.
        return TRLAsyncReward, (self.reward,)


def _mark_coroutine_function(callable_object: TRLAsyncReward) -> None:
    """Make asyncio.iscoroutinefunction (and, from Python 3.12, inspect.iscoroutinefunction)
    true for an object whose `__call__` is a coroutine function."""
    if sys.version_info >= (3, 12):
        inspect.markcoroutinefunction(callable_object)
    else:  # Python 3.10 and 3.11: the marker asyncio.iscoroutinefunction looks for
        callable_object.__dict__["_is_coroutine"] = vars(asyncio.coroutines)["_is_coroutine"]
