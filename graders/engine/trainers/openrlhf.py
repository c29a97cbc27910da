"""OpenRLHF: its reward_func, and the batch scoring behind the reward API's get_reward (module
docstring of graders.engine.trainers).

OpenRLHF 0.11 calls reward_func once per sample (SingleTurnAgentExecutor, through
asyncio.to_thread, so a prompt's samples arrive concurrently from threads of one process), and
logs an exception it raises at INFO only, leaving the sample without a reward. So the function
made here gathers a prompt's samples into groups when asked to (`group_size`: a pairwise
grader needs it), and answers a failure with `failure_reward` marked in extra_logs instead of
raising, logging it at ERROR."""

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from graders.engine.bundle import Grader
from graders.engine.programs import TaskInput
from graders.engine.trainers.groups import (
    DOCUMENTS_KEY,
    INSTRUCTIONS_KEY,
    OPENRLHF_PAIRWISE_PER_SAMPLE,
    TASK_ID_KEY,
    GraderSource,
    grader_loaded,
    grader_now,
    groups_grade,
    pairwise_groups_check,
    reward,
    tensor_or_list,
)

_log = logging.getLogger(__name__)

# The text of end-of-sequence and end-of-turn tokens as tokenizers decode them with
# skip_special_tokens=False, which is how OpenRLHF decodes a query (ChatML and Qwen, GPT-2 and
# Phi, Llama 3, Llama 2 and Mistral, Gemma). The judge grades the response without them.
SPECIAL_TOKENS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "</s>",
    "<end_of_turn>",
)
# What becomes of a group that has not filled within the wait: graded as it stands, or refused
# (no judge call; the samples get failure_reward, marked group_incomplete).
PARTIAL_GRADE = "grade"
PARTIAL_REFUSE = "refuse"
PARTIAL_CHOICES = (PARTIAL_GRADE, PARTIAL_REFUSE)
# Threads for the loop's default executor when gathering: asyncio.to_thread runs reward_func
# there, a sample waiting for its group holds a thread, and the default of min(32, cpus + 4)
# threads fills with samples of more prompts than it can complete, so no group would fill.
GATHER_THREADS = 1024


class Outcome(NamedTuple):
    """One sample's answer: its reward and what extra_logs says of it."""

    reward: float
    failed: bool = False
    error: bool = False  # an exception replaced grading (logged at ERROR)
    incomplete: bool = False  # its group did not fill within the wait


def strip_special_tokens(text: str, special_tokens: Sequence[str]) -> str:
    for token in special_tokens:
        if token:
            text = text.replace(token, "")
    return text


def openrlhf_reward_func(
    source: GraderSource,
    *,
    failure_reward: float = 0.0,
    group_size: int | None = None,
    wait_s: float = 30.0,
    partial: str = PARTIAL_GRADE,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
) -> Callable[..., dict[str, Any]]:
    """An OpenRLHF reward function: `reward_func(queries, prompts, labels, **kwargs)`.

    Each query is its prompt followed by the response; the response is the query with the
    prompt removed and `special_tokens` taken out (() keeps them). A label names the task when
    it is a task id of the bundle or an object with "task_id" (or "prompt", "documents",
    "instructions"); otherwise the task is the prompt text, chat template included. Returns
    {"rewards", "scores", "extra_logs"} as float tensors when torch is importable, else as
    lists; extra_logs holds grader_failed and reward_func_error (1.0 where an exception, logged
    at ERROR, replaced grading: a query that does not start with its prompt, say), and
    group_incomplete when gathering.

    `group_size`: gather the samples of a prompt (same prompt and label) across calls from
    concurrent threads and grade each group once, when it holds `group_size` samples or
    `wait_s` seconds after its first arrived, when it is graded as it stands (`partial`
    "grade") or not at all ("refuse"). A pairwise grader needs it (ValueError here otherwise,
    at startup rather than on every sample). Made on a running event loop (OpenRLHF loads the
    file in its rollout actor's async __init__), it gives that loop a default executor of
    GATHER_THREADS threads so that waiting samples cannot starve their groups of threads.
    """
    grader = grader_loaded(source)
    if partial not in PARTIAL_CHOICES:
        raise ValueError(f"partial must be one of {PARTIAL_CHOICES}, not {partial!r}")
    if group_size is None and grader.is_pairwise:
        raise ValueError(f"{grader.name} is a {grader.kind} grader: {OPENRLHF_PAIRWISE_PER_SAMPLE}")
    tokens = tuple(special_tokens)

    def grade(rows: Sequence["Sample"], per_sample: bool) -> list[Outcome]:
        now = grader_now(source)
        scored = now.run_sync(
            openrlhf_rewards(
                now,
                [row.query for row in rows],
                [row.prompt for row in rows],
                [row.label for row in rows],
                failure_reward=failure_reward,
                per_sample=per_sample,
                special_tokens=tokens,
            )
        )
        failed = scored["extra_logs"]["grader_failed"]
        return [Outcome(r, bool(f)) for r, f in zip(scored["rewards"], failed, strict=True)]

    gatherer: SampleGatherer | None = None
    if group_size is not None:
        gatherer = SampleGatherer(
            lambda rows: grade(rows, False), group_size, wait_s, partial, failure_reward
        )
        _executor_widen()

    def reward_func(
        queries: Sequence[str],
        prompts: Sequence[str],
        labels: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        try:
            rows = samples(queries, prompts, labels)
            outcomes = grade(rows, True) if gatherer is None else gatherer.submit(rows)
        except Exception as exc:
            _log.error("reward_func could not grade %d queries: %s", len(queries), exc)
            outcomes = [Outcome(failure_reward, True, True)] * len(queries)
        logs = {
            "grader_failed": [float(o.failed) for o in outcomes],
            "reward_func_error": [float(o.error) for o in outcomes],
        }
        if gatherer is not None:
            logs["group_incomplete"] = [float(o.incomplete) for o in outcomes]
        rewards = [o.reward for o in outcomes]
        return {
            "rewards": tensor_or_list(rewards),
            "scores": tensor_or_list(list(rewards)),
            "extra_logs": {key: tensor_or_list(values) for key, values in logs.items()},
        }

    return reward_func


def _executor_widen() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop yet: whoever calls the function sizes its own threads
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=GATHER_THREADS, thread_name_prefix="reward-gather")
    )


class Sample(NamedTuple):
    query: str
    prompt: str
    label: Any

    def group_key(self) -> str:
        """Samples of one group: the same prompt and label (a label may be an object)."""
        return json.dumps([self.prompt, self.label], sort_keys=True, default=repr)


def samples(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any] | None
) -> list[Sample]:
    label_list = list(labels) if labels is not None else [None] * len(queries)
    if len(prompts) != len(queries) or len(label_list) != len(queries):
        raise ValueError(
            f"{len(queries)} queries, {len(prompts)} prompts and {len(label_list)} labels"
        )
    return [Sample(*row) for row in zip(queries, prompts, label_list, strict=True)]


class _Group:
    def __init__(self, key: str, opened: float) -> None:
        self.key = key
        self.opened = opened
        self.rows: list[Sample] = []
        self.outcomes: list[Outcome] = []
        self.done = threading.Event()


class SampleGatherer:
    """Samples of a prompt arriving from concurrent threads, gathered into groups of
    `group_size` and graded once per group by `grade` (rows in arrival order), in the thread
    that filled the group, or in the first member's thread `wait_s` after the group opened."""

    def __init__(
        self,
        grade: Callable[[Sequence[Sample]], list[Outcome]],
        group_size: int,
        wait_s: float,
        partial: str,
        failure_reward: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if group_size < 1 or not wait_s >= 0:
            raise ValueError(f"group_size {group_size} and wait_s {wait_s}: need 1+ and 0+")
        self._grade = grade
        self.group_size = group_size
        self.wait_s = wait_s
        self.partial = partial
        self.failure_reward = failure_reward
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, _Group] = {}

    def submit(self, rows: Sequence[Sample]) -> list[Outcome]:
        """The outcomes of `rows`, in order, once each one's group is graded (blocking)."""
        joined: list[tuple[_Group, int]] = []
        filled: list[_Group] = []
        with self._lock:
            for row in rows:
                key = row.group_key()
                group = self._open.get(key)
                if group is None:
                    group = self._open[key] = _Group(key, self._clock())
                joined.append((group, len(group.rows)))
                group.rows.append(row)
                if len(group.rows) == self.group_size:
                    del self._open[key]
                    filled.append(group)
        for group in filled:
            self._settle(group, complete=True)
        outcomes = []
        for group, index in joined:
            left = group.opened + self.wait_s - self._clock()
            if not group.done.wait(max(left, 0.0)):
                with self._lock:
                    mine = self._open.get(group.key) is group
                    if mine:
                        del self._open[group.key]
                if mine:
                    self._settle(group, complete=False)
                group.done.wait()  # graded in another thread; the judge client has timeouts
            outcomes.append(group.outcomes[index])
        return outcomes

    def _settle(self, group: _Group, *, complete: bool) -> None:
        size = len(group.rows)
        try:
            if not complete and self.partial == PARTIAL_REFUSE:
                _log.warning(
                    "a group of %d/%d samples did not fill in %s s; refused (failure_reward)",
                    size, self.group_size, self.wait_s,
                )  # fmt: skip
                group.outcomes = [Outcome(self.failure_reward, True, False, True)] * size
                return
            graded = self._grade(group.rows)
            group.outcomes = [o._replace(incomplete=not complete) for o in graded]
        except Exception as exc:
            _log.error("grading a group of %d samples failed: %s", size, exc)
            group.outcomes = [Outcome(self.failure_reward, True, True, not complete)] * size
        finally:
            group.done.set()


async def openrlhf_rewards(
    grader: Grader,
    queries: Sequence[str],
    prompts: Sequence[str],
    labels: Sequence[Any] | None,
    *,
    failure_reward: float,
    per_sample: bool = True,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
) -> dict[str, Any]:
    """What OpenRLHF's reward_func and its remote reward model (the reward API's get_reward)
    return, as lists: queries grouped by task, so pairwise graders compare a prompt's
    rollouts with each other. `per_sample`: the caller may be handed one sample at a time,
    where a pairwise grader has nothing to compare, so refuse one (ValueError) rather than
    train on failures; a whole batch (the HTTP API, a gathered group) lets such grades fail
    one by one."""
    size = len(queries)
    label_list = list(labels) if labels is not None else [None] * size
    if len(prompts) != size or len(label_list) != size:
        raise ValueError(f"{size} queries, {len(prompts)} prompts and {len(label_list)} labels")
    responses = [
        strip_special_tokens(
            _response_after_prompt(row, queries[row], prompts[row]), special_tokens
        )
        for row in range(size)
    ]
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
