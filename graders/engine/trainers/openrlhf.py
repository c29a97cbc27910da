"""OpenRLHF: its reward_func, and the batch scoring behind the reward API's get_reward (module
docstring of graders.engine.trainers)."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graders.engine.bundle import Grader
from graders.engine.programs import TaskInput
from graders.engine.trainers.groups import (
    DOCUMENTS_KEY,
    INSTRUCTIONS_KEY,
    OPENRLHF_PAIRWISE_PER_SAMPLE,
    TASK_ID_KEY,
    GraderSource,
    grader_now,
    groups_grade,
    pairwise_groups_check,
    reward,
    tensor_or_list,
)


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
        grader = grader_now(source)
        scored = grader.run_sync(
            openrlhf_rewards(grader, queries, prompts, labels, failure_reward=failure_reward)
        )
        return {
            "rewards": tensor_or_list(scored["rewards"]),
            "scores": tensor_or_list(scored["scores"]),
            "extra_logs": {"grader_failed": tensor_or_list(scored["extra_logs"]["grader_failed"])},
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
        pairwise_groups_check(grader, tasks, OPENRLHF_PAIRWISE_PER_SAMPLE)
    results = await groups_grade(grader, tasks, responses, tasks)
    rewards = [reward(result, failure_reward) for result in results]
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
