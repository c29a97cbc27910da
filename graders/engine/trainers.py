"""Reward functions for RL trainers (TRL, verl, OpenRLHF), built on a bundle's Grader.

Each adapter turns a trainer's batch into groups of responses to one task, grades every group
concurrently through the Grader (bundle.py), and maps a failed grade (reward None) to
`failure_reward`, reporting the failures where the trainer can show them. The calling
conventions below are those of the trainers' current documentation and source; docs/trainers.md
has copy-paste examples.

- TRL GRPOTrainer calls each reward function with keyword arguments `prompts`, `completions`,
  `completion_ids`, `trainer_state` and every dataset column except `prompt`, and expects one
  float (or None, "not applicable") per completion. The batch holds `num_generations`
  completions of each prompt side by side; each block is graded as a group, which is what lets
  pairwise programs give win rates. A process may hold only part of a group when
  per-device batches are not multiples of `num_generations`; pairwise programs refuse that.
  TRL runs `async def` reward functions on its own event loop: see TRLReward.as_async.
- verl calls `compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)` once
  per response (reward managers "naive", "dapo", ...), from a thread pool if the function is
  synchronous or on its loop if it is a coroutine function; the "batch" reward manager calls
  `compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)` once per chunk.
  verl does not pass the prompt, so the task comes from `extra_info` ("task_id", or "prompt"
  with optional "documents" and "instructions"). Pairwise programs need the batch form.
- OpenRLHF calls `reward_func(queries, prompts, labels)` where a query is the prompt followed by
  the response, and reads {"rewards", "scores", "extra_logs"}; it loads the function from the
  file given as --remote_rm_url (--reward.remote_url in current releases). Current releases
  call it with one sample at a time, which is enough for scalar and rubric programs only.

Each adapter takes a Grader or a FollowedGrader (follow.py, a workbench alias): the version is
picked once per call (`_grader_now`), before any group of the call is graded, so a switch of
the alias falls between calls. Where a call holds whole groups (TRL, verl's batch form, a
batch given to OpenRLHF's function) every group is graded by one version. A per-sample call
holds one response, so a switch may fall between two responses of one group there: pin the
version (pinned_hash) for per-sample trainers.

The reference answer a trainer may pass (ground_truth, labels) is never shown to the judge: a
label is read only as a task id (or an object with one), as the rubric writer must not see one.
"""

import asyncio
import importlib
import re
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from graders.engine.bundle import Grader, GradeResult, response_input
from graders.engine.follow import FollowedGrader
from graders.engine.programs import TaskInput

TASK_ID_KEY = "task_id"
DOCUMENTS_KEY = "documents"
INSTRUCTIONS_KEY = "instructions"
PROMPT_KEYS = ("prompt", "question")

TRL_SPLIT_GROUPS = (
    "this process does not hold whole groups, so win rates cannot be computed; make "
    "per_device_train_batch_size x steps_per_generation (GRPOConfig) a multiple of "
    "num_generations"
)
VERL_PAIRWISE_NEEDS_BATCH = (
    "verl calls a per-sample compute_score with one response at a time, so a pairwise grader "
    "cannot compare a prompt's responses; use the batch reward manager "
    "(reward.reward_manager.name=batch, or reward_model.reward_manager=batch in older verl) "
    "with verl_compute_score(grader, batch=True)"
)
OPENRLHF_PAIRWISE_PER_SAMPLE = (
    "OpenRLHF called reward_func with one response per prompt (current releases call it once "
    "per sample), so a pairwise grader has nothing to compare; export a scalar or rubric "
    "grader for OpenRLHF"
)


# Shared ---------------------------------------------------------------------------------------

GraderSource = Grader | FollowedGrader


def _grader_now(source: GraderSource) -> Grader:
    """The version to grade one call with: a followed alias is re-checked here, between calls
    (blocking), never while a call's groups are being graded."""
    return source.current() if isinstance(source, FollowedGrader) else source


async def _grader_now_async(source: GraderSource) -> Grader:
    return await source.current_async() if isinstance(source, FollowedGrader) else source


def _grader_loaded(source: GraderSource) -> Grader:
    """The version in use, without a re-check: for checks made once, when an adapter is set
    up (the kind, which an alias keeps; the name trainers log under)."""
    return source.grader if isinstance(source, FollowedGrader) else source


async def _groups_grade(
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

    outcomes = await _gather(group_grade(rows) for rows in members.values())
    results: dict[int, GradeResult] = {}
    for rows, group_results in zip(members.values(), outcomes, strict=True):
        results.update(zip(rows, group_results, strict=True))
    return [results[row] for row in range(len(tasks))]


async def _gather[T](coroutines: Iterable[Awaitable[T]]) -> list[T]:
    # Like programs._gather: if one group raises (BudgetExhausted), the others still finish so
    # that the answers already paid for reach the judge cache; then the first error is raised.
    outcomes = await asyncio.gather(*coroutines, return_exceptions=True)
    results: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results


def _pairwise_groups_check(grader: Grader, groups: Sequence[Hashable], problem: str) -> None:
    """A pairwise grader given only groups of one would fail every grade and train on the
    failure reward alone; refuse loudly instead. A lone response beside real groups (a group
    cut by a chunk boundary) fails on its own and is reported like any failed grade."""
    if grader.is_pairwise and groups and len(set(groups)) == len(groups):
        raise ValueError(f"{grader.name} is a {grader.kind} grader: {problem}")


def _column(kwargs: Mapping[str, Any], name: str, size: int) -> list[Any]:
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


def _reward(result: GradeResult, failure_reward: float) -> float:
    return failure_reward if result.reward is None else result.reward


def _function_name(grader: Grader) -> str:
    """A name trainers can log under (TRL logs reward/<name>/mean)."""
    slug = re.sub(r"[^0-9A-Za-z]+", "_", grader.name).strip("_").lower()
    return f"grader_{slug or grader.kind}"


def _tensor_or_list(values: list[float]) -> Any:
    """A float tensor when torch is importable (what OpenRLHF's examples return), else the
    list itself."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.float32)


# TRL ------------------------------------------------------------------------------------------


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
    failure is also logged by the grader. `__name__` (default `grader_<bundle name>`) is what
    TRL logs the reward under.
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
        self.__name__ = name or _function_name(_grader_loaded(grader))
        self.last_failures = 0

    def __repr__(self) -> str:
        return f"TRLReward({self.grader!r}, num_generations={self.num_generations})"

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        grader = _grader_now(self.grader)
        return grader.run_sync(self._score(grader, prompts, completions, **kwargs))

    def as_async(self) -> Callable[..., Awaitable[list[float | None]]]:
        """The same reward as an `async def` function, for TRL's concurrent async reward
        functions (TRL recognizes them with asyncio.iscoroutinefunction, which a callable
        object does not satisfy)."""

        async def reward(
            prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
        ) -> list[float | None]:
            return await self.score(prompts, completions, **kwargs)

        reward.__name__ = reward.__qualname__ = self.__name__
        return reward

    async def score(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        grader = await _grader_now_async(self.grader)
        return await self._score(grader, prompts, completions, **kwargs)

    async def _score(
        self, grader: Grader, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        results = await self._grade(grader, prompts, completions, **kwargs)
        self.last_failures = sum(not result.ok for result in results)
        return [
            self.failure_reward if result.reward is None else result.reward for result in results
        ]

    async def grade(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[GradeResult]:
        """The detailed results (reward None on failure), in completion order."""
        grader = await _grader_now_async(self.grader)
        return await self._grade(grader, prompts, completions, **kwargs)

    async def _grade(
        self, grader: Grader, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[GradeResult]:
        size = len(completions)
        if len(prompts) != size:
            raise ValueError(f"{len(prompts)} prompts for {size} completions")
        groups = self._groups(grader, prompts)
        _pairwise_groups_check(
            grader, groups, "num_generations=1 leaves each completion alone in its group"
        )
        task_ids = _column(kwargs, TASK_ID_KEY, size)
        documents = _column(kwargs, DOCUMENTS_KEY, size)
        instructions = _column(kwargs, INSTRUCTIONS_KEY, size)
        tasks = [
            grader.resolve_task(
                prompt=prompts[row],
                task_id=task_ids[row],
                documents=documents[row],
                instructions=instructions[row],
            )
            for row in range(size)
        ]
        return await _groups_grade(grader, tasks, completions, groups)

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


# verl -----------------------------------------------------------------------------------------

VerlScore = dict[str, float]


def verl_compute_score(
    source: GraderSource, *, batch: bool = False, failure_reward: float = 0.0
) -> Callable[..., Any]:
    """A verl reward function (custom_reward_function.path/name points at it).

    Per sample (default): `compute_score(data_source, solution_str, ground_truth,
    extra_info=None, **kwargs) -> {"score": reward, "grader_failed": 0.0 or 1.0}`; a pairwise
    grader refuses this form. With `batch=True`, for the "batch" reward manager:
    `compute_score(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs)`
    returning one such dict per response, responses to the same task graded as one group.
    `extra_info` names the task: "task_id", or "prompt" (or "question") with optional
    "documents" and "instructions". `grader_failed` averages to the failure rate in verl's
    metrics.
    """
    if batch:

        def compute_score_batch(
            data_sources: Sequence[Any],
            solution_strs: Sequence[str],
            ground_truths: Sequence[Any],
            extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
            **kwargs: Any,
        ) -> list[VerlScore]:
            grader = _grader_now(source)
            return grader.run_sync(
                _verl_batch_score(grader, solution_strs, extra_infos, failure_reward)
            )

        compute_score_batch.__name__ = compute_score_batch.__qualname__ = "compute_score"
        return compute_score_batch
    _per_sample_check(source)

    def compute_score(
        data_source: Any,
        solution_str: str,
        ground_truth: Any,
        extra_info: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> VerlScore:
        grader = _grader_now(source)
        return grader.run_sync(
            _verl_batch_score(grader, [solution_str], [extra_info], failure_reward)
        )[0]

    return compute_score


def verl_compute_score_async(
    source: GraderSource, *, batch: bool = False, failure_reward: float = 0.0
) -> Callable[..., Awaitable[Any]]:
    """verl_compute_score as an `async def` function: verl awaits it on its reward loop
    instead of running it in a thread, which it recommends for functions that call an API."""
    if batch:

        async def compute_score_batch(
            data_sources: Sequence[Any],
            solution_strs: Sequence[str],
            ground_truths: Sequence[Any],
            extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
            **kwargs: Any,
        ) -> list[VerlScore]:
            grader = await _grader_now_async(source)
            return await _verl_batch_score(grader, solution_strs, extra_infos, failure_reward)

        compute_score_batch.__name__ = compute_score_batch.__qualname__ = "compute_score"
        return compute_score_batch
    _per_sample_check(source)

    async def compute_score(
        data_source: Any,
        solution_str: str,
        ground_truth: Any,
        extra_info: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> VerlScore:
        grader = await _grader_now_async(source)
        scores = await _verl_batch_score(grader, [solution_str], [extra_info], failure_reward)
        return scores[0]

    return compute_score


def _per_sample_check(source: GraderSource) -> None:
    grader = _grader_loaded(source)
    if grader.is_pairwise:
        raise ValueError(f"{grader.name} is a {grader.kind} grader: {VERL_PAIRWISE_NEEDS_BATCH}")


async def _verl_batch_score(
    grader: Grader,
    solution_strs: Sequence[str],
    extra_infos: Sequence[Mapping[str, Any] | None] | None,
    failure_reward: float,
) -> list[VerlScore]:
    size = len(solution_strs)
    infos = list(extra_infos) if extra_infos is not None else [None] * size
    if len(infos) != size:
        raise ValueError(f"{len(infos)} extra_infos for {size} solution_strs")
    tasks = [_verl_task(grader, info) for info in infos]
    _pairwise_groups_check(grader, tasks, VERL_PAIRWISE_NEEDS_BATCH)
    results = await _groups_grade(grader, tasks, solution_strs, tasks)
    return [
        {"score": _reward(result, failure_reward), "grader_failed": float(not result.ok)}
        for result in results
    ]


def _verl_task(grader: Grader, extra_info: Mapping[str, Any] | None) -> TaskInput:
    info = extra_info or {}
    task_id = info.get(TASK_ID_KEY)
    if task_id is not None and str(task_id) in grader.tasks:
        return grader.tasks[str(task_id)]
    prompt = next((info[key] for key in PROMPT_KEYS if info.get(key) is not None), None)
    if prompt is None:
        unknown = f"task_id {str(task_id)!r} is not in the bundle, and " if task_id else ""
        raise ValueError(
            f"verl passes only the response to compute_score; {unknown}extra_info names no "
            f"task: give extra_info['{TASK_ID_KEY}'] (a task of the bundle) or "
            f"extra_info['prompt'] (with optional '{DOCUMENTS_KEY}' and '{INSTRUCTIONS_KEY}') "
            "in your dataset"
        )
    return grader.resolve_task(
        prompt=prompt,
        task_id=task_id,
        documents=info.get(DOCUMENTS_KEY),
        instructions=info.get(INSTRUCTIONS_KEY),
    )


# OpenRLHF -------------------------------------------------------------------------------------


def openrlhf_reward_func(
    source: GraderSource, *, failure_reward: float = 0.0
) -> Callable[..., dict[str, Any]]:
    """An OpenRLHF reward function: `reward_func(queries, prompts, labels, **kwargs)`.

    Each query is its prompt followed by the response; the response is the query with the
    prompt removed (ValueError when the prompt is not a prefix, e.g. after the prompt was
    truncated to fit). A label names the task when it is a task id of the bundle or an object
    with "task_id" (or "prompt", "documents", "instructions"); otherwise the task is the prompt
    text, chat template included. Returns {"rewards", "scores", "extra_logs": {"grader_failed"}}
    as float tensors when torch is importable, else as lists.
    """

    def reward_func(
        queries: Sequence[str],
        prompts: Sequence[str],
        labels: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        grader = _grader_now(source)
        scored = grader.run_sync(
            openrlhf_rewards(grader, queries, prompts, labels, failure_reward=failure_reward)
        )
        return {
            "rewards": _tensor_or_list(scored["rewards"]),
            "scores": _tensor_or_list(scored["scores"]),
            "extra_logs": {"grader_failed": _tensor_or_list(scored["extra_logs"]["grader_failed"])},
        }

    return reward_func


async def openrlhf_rewards(
    grader: Grader,
    queries: Sequence[str],
    prompts: Sequence[str],
    labels: Sequence[Any] | None,
    *,
    failure_reward: float,
    per_sample: bool = True,
) -> dict[str, Any]:
    """What OpenRLHF's reward_func and its remote reward model (the reward API's get_reward)
    return, as lists: queries grouped by task, so pairwise graders compare a prompt's
    rollouts with each other. `per_sample`: the caller may be handed one sample at a time,
    where a pairwise grader has nothing to compare, so refuse one (ValueError) rather than
    train on failures; a whole batch (the HTTP API) lets such grades fail one by one."""
    size = len(queries)
    label_list = list(labels) if labels is not None else [None] * size
    if len(prompts) != size or len(label_list) != size:
        raise ValueError(f"{size} queries, {len(prompts)} prompts and {len(label_list)} labels")
    responses = [_response_after_prompt(row, queries[row], prompts[row]) for row in range(size)]
    tasks = [_openrlhf_task(grader, prompts[row], label_list[row]) for row in range(size)]
    if per_sample:
        _pairwise_groups_check(grader, tasks, OPENRLHF_PAIRWISE_PER_SAMPLE)
    results = await _groups_grade(grader, tasks, responses, tasks)
    rewards = [_reward(result, failure_reward) for result in results]
    return {
        "rewards": rewards,
        "scores": list(rewards),
        "extra_logs": {"grader_failed": [float(not result.ok) for result in results]},
    }


def _response_after_prompt(row: int, query: str, prompt: str) -> str:
    if query.startswith(prompt):
        return query[len(prompt) :]
    differs_at = next(
        (i for i, (a, b) in enumerate(zip(query, prompt, strict=False)) if a != b),
        min(len(query), len(prompt)),
    )
    window = slice(differs_at, differs_at + 20)
    raise ValueError(
        f"queries[{row}] does not start with prompts[{row}]: at position {differs_at} the "
        f"prompt has {prompt[window]!r} and the query {query[window]!r}. OpenRLHF passes "
        "prompt + response as the query, so the response cannot be cut out. Was the prompt "
        "truncated to fit the maximum prompt length, or does the tokenizer not decode it back "
        "to the same text?"
    )


def _openrlhf_task(grader: Grader, prompt: str, label: Any) -> TaskInput:
    if isinstance(label, str) and label in grader.tasks:
        return grader.tasks[label]
    if isinstance(label, Mapping):
        return grader.resolve_task(
            prompt=label.get("prompt", prompt),
            task_id=label.get(TASK_ID_KEY),
            documents=label.get(DOCUMENTS_KEY),
            instructions=label.get(INSTRUCTIONS_KEY),
        )
    return grader.resolve_task(prompt=prompt)
