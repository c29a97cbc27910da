"""What the trainer adapters share: which version grades a call, grading rows grouped by task
concurrently, the dataset columns that name a task, and the checks that refuse a pairwise
grader a call cannot feed whole groups."""

import importlib
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from graders.engine.bundle import Grader, GradeResult, response_input
from graders.engine.follow import FollowedGrader
from graders.engine.programs import TaskInput, gather_all

TASK_ID_KEY = "task_id"
DOCUMENTS_KEY = "documents"
INSTRUCTIONS_KEY = "instructions"
PROMPT_KEYS = ("prompt", "question")

TRL_SPLIT_GROUPS = (
    "this process does not hold whole groups, so win rates cannot be computed; make "
    "per_device_train_batch_size x steps_per_generation (GRPOConfig) a multiple of "
    "num_generations"
)
OPENRLHF_PAIRWISE_PER_SAMPLE = (
    "OpenRLHF calls reward_func with one response per prompt (current releases call it once "
    "per sample), so a pairwise grader has nothing to compare; gather a prompt's samples with "
    "openrlhf_reward_func(..., group_size=N) (N = --rollout.n_samples_per_prompt), or export a "
    "scalar or rubric grader"
)


GraderSource = Grader | FollowedGrader


def grader_now(source: GraderSource) -> Grader:
    """The version to grade one call with: a followed alias is re-checked here, between calls
    (blocking), never while a call's groups are being graded."""
    return source.current() if isinstance(source, FollowedGrader) else source


async def grader_now_async(source: GraderSource) -> Grader:
    return await source.current_async() if isinstance(source, FollowedGrader) else source


def grader_loaded(source: GraderSource) -> Grader:
    """The version in use, without a re-check: for checks made once, when an adapter is set
    up (the kind, which an alias keeps; the name trainers log under)."""
    return source.grader if isinstance(source, FollowedGrader) else source


async def groups_grade(
    grader: Grader,
    tasks: Sequence[TaskInput],
    completions: Sequence[object],
    groups: Sequence[Hashable],
) -> list[GradeResult]:
    """Grade rows grouped by `groups` (one score_group call per group, all concurrently) and
    return the results in row order. Response ids are row positions."""
    members: dict[Hashable, list[int]] = {}
    for row, group in enumerate(groups):
        members.setdefault(group, []).append(row)

    async def group_grade(rows: list[int]) -> list[GradeResult]:
        responses = [response_input(str(row), completions[row]) for row in rows]
        return await grader.score_group(tasks[rows[0]], responses)

    outcomes = await gather_all(group_grade(rows) for rows in members.values())
    results: dict[int, GradeResult] = {}
    for rows, group_results in zip(members.values(), outcomes, strict=True):
        results.update(zip(rows, group_results, strict=True))
    return [results[row] for row in range(len(tasks))]


def pairwise_groups_check(grader: Grader, groups: Sequence[Hashable], problem: str) -> None:
    """A pairwise grader given only groups of one would fail every grade and train on the
    failure reward alone; refuse loudly instead. A lone response beside real groups (a group
    cut by a chunk boundary) fails on its own and is reported like any failed grade."""
    if grader.is_pairwise and groups and len(set(groups)) == len(groups):
        raise ValueError(f"{grader.name} is a {grader.kind} grader: {problem}")


def column(kwargs: Mapping[str, Any], name: str, size: int) -> list[Any]:
    """A per-row keyword argument (a dataset column) as a list, or Nones when absent."""
    values = kwargs.get(name)
    if values is None:
        return [None] * size
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise ValueError(f"{name}: expected one value per completion, got {type(values).__name__}")
    values = list(values)
    if len(values) != size:
        raise ValueError(f"{name}: {len(values)} values for {size} completions")
    return values


def reward(result: GradeResult, failure_reward: float) -> float:
    return failure_reward if result.reward is None else result.reward


def function_name(grader: Grader) -> str:
    """A name trainers can log under (TRL logs reward/<name>/mean)."""
    slug = re.sub(r"[^0-9A-Za-z]+", "_", grader.name).strip("_").lower()
    return f"grader_{slug or grader.kind}"


def tensor_or_list(values: list[float]) -> Any:
    """A float tensor when torch is importable (what OpenRLHF's examples return), else the
    list itself."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.float32)
