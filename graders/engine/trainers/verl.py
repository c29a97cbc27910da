"""verl: compute_score functions for its reward managers (module docstring of
graders.engine.trainers).

verl >= 0.9 computes rewards in its reward loop: a reward manager ("naive", "rate_limited",
...) calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` once per
response, awaiting it when it is a coroutine function; a returned dict's "score" is the reward
and its other keys become reward_extra_info. That is the per-sample form. The group form
(`batch=True`) takes a list of each and grades responses to one task together, which pairwise
graders need: on verl >= 0.9 our WorkbenchGroupRewardManager (verl_manager.py) calls it with
one prompt's responses, gathered by uid; on verl 0.7-0.8 the "batch" reward manager of the
legacy reward path calls it with a chunk of the batch.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from graders.engine.bundle import Grader
from graders.engine.programs import TaskInput
from graders.engine.trainers.groups import (
    DOCUMENTS_KEY,
    INSTRUCTIONS_KEY,
    PROMPT_KEYS,
    TASK_ID_KEY,
    GraderSource,
    grader_loaded,
    grader_now,
    grader_now_async,
    groups_grade,
    pairwise_groups_check,
    reward,
)

VerlScore = dict[str, float]

VERL_PAIRWISE_NEEDS_GROUPS = (
    "verl calls a per-sample compute_score with one response at a time, so a pairwise grader "
    "cannot compare a prompt's responses; on verl >= 0.9 use the group form "
    "verl_compute_score_async(grader, batch=True) under WorkbenchGroupRewardManager "
    "(reward.reward_manager.source=importlib, reward.reward_manager.name="
    "WorkbenchGroupRewardManager, reward.reward_manager.module.path="
    "pkg://graders.engine.trainers.verl_manager); on verl 0.7-0.8, verl_compute_score(grader, "
    "batch=True) under the batch reward manager (reward_model.reward_manager=batch "
    "reward_model.use_reward_loop=False)"
)
VERL_GROUP_FORM_PER_SAMPLE = (
    "this is the group form of compute_score (batch=True), but it was called with one sample "
    "(solution_str=): verl >= 0.9's reward managers naive, dapo and rate_limited call "
    "compute_score per sample; give them verl_compute_score(grader) or "
    "verl_compute_score_async(grader), or run the group form under WorkbenchGroupRewardManager"
)


def verl_compute_score(
    source: GraderSource, *, batch: bool = False, failure_reward: float = 0.0
) -> Callable[..., Any]:
    """A verl reward function (reward.custom_reward_function.path/name points at it).

    Per sample (default): `compute_score(data_source, solution_str, ground_truth,
    extra_info=None, **kwargs) -> {"score": reward, "grader_failed": 0.0 or 1.0}`; a pairwise
    grader refuses this form when it is built, that is when verl loads the reward file. With
    `batch=True`, the group form: `compute_score(data_sources, solution_strs, ground_truths,
    extra_infos=None, **kwargs)` returning one such dict per response, responses to the same
    task graded as one group. `extra_info` names the task: "task_id", or "prompt" (or
    "question") with optional "documents" and "instructions". `grader_failed` averages to the
    failure rate in verl's metrics.
    """
    if batch:

        def compute_score_batch(
            data_sources: Sequence[Any] = (),
            solution_strs: Sequence[str] | None = None,
            ground_truths: Sequence[Any] = (),
            extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
            **kwargs: Any,
        ) -> list[VerlScore]:
            texts = _group_texts(solution_strs, kwargs)
            grader = grader_now(source)
            return grader.run_sync(_verl_batch_score(grader, texts, extra_infos, failure_reward))

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
        grader = grader_now(source)
        return grader.run_sync(
            _verl_batch_score(grader, [solution_str], [extra_info], failure_reward)
        )[0]

    return compute_score


def verl_compute_score_async(
    source: GraderSource, *, batch: bool = False, failure_reward: float = 0.0
) -> Callable[..., Awaitable[Any]]:
    """verl_compute_score as an `async def` function: verl's reward loop awaits it instead of
    running it in a thread, so many judge calls are in flight at once (the form to use with
    verl >= 0.9, per sample under naive or rate_limited, grouped under
    WorkbenchGroupRewardManager)."""
    if batch:

        async def compute_score_batch(
            data_sources: Sequence[Any] = (),
            solution_strs: Sequence[str] | None = None,
            ground_truths: Sequence[Any] = (),
            extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
            **kwargs: Any,
        ) -> list[VerlScore]:
            texts = _group_texts(solution_strs, kwargs)
            grader = await grader_now_async(source)
            return await _verl_batch_score(grader, texts, extra_infos, failure_reward)

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
        grader = await grader_now_async(source)
        scores = await _verl_batch_score(grader, [solution_str], [extra_info], failure_reward)
        return scores[0]

    return compute_score


def _per_sample_check(source: GraderSource) -> None:
    grader = grader_loaded(source)
    if grader.is_pairwise:
        raise ValueError(f"{grader.name} is a {grader.kind} grader: {VERL_PAIRWISE_NEEDS_GROUPS}")


def _group_texts(solution_strs: Sequence[str] | None, kwargs: Mapping[str, Any]) -> Sequence[str]:
    """The group form's responses; a per-sample call (a manager that calls once per response)
    is refused by name rather than with a TypeError about a missing argument."""
    if solution_strs is None:
        if "solution_str" in kwargs:
            raise ValueError(VERL_GROUP_FORM_PER_SAMPLE)
        raise TypeError("compute_score (group form) needs solution_strs")
    return solution_strs


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
    pairwise_groups_check(grader, tasks, VERL_PAIRWISE_NEEDS_GROUPS)
    results = await groups_grade(grader, tasks, solution_strs, tasks)
    return [
        {"score": reward(result, failure_reward), "grader_failed": float(not result.ok)}
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
