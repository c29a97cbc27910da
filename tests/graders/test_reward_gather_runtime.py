"""The runtime's OpenRLHF reward_func with group_size (graders/engine/trainers/openrlhf.py):
one sample per call from concurrent threads, as OpenRLHF's SingleTurnAgentExecutor calls it
(asyncio.to_thread), gathered by prompt into groups graded once each, against the fake judge;
special-token text out of responses. No Django: the engine alone."""
# ruff: noqa: F811 (the fixtures of test_runtime.py, imported, are arguments here)

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graders.engine.bundle import Grader
from graders.engine.trainers.openrlhf import GATHER_THREADS, openrlhf_reward_func
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import (  # noqa: F401 (fixtures)
    PAIRWISE,
    SCALAR,
    judge,
    make_grader,
    reference_rewards,
)

PROMPT = "<|im_start|>user\nHow can the tenant end the lease?<|im_end|>\n<|im_start|>assistant\n"
ANSWERS = ["An excellent answer.", "A good answer.", "A fair answer.", "A poor answer."]


def one_per_thread(reward_func: Callable[..., Any], queries: Sequence[str]) -> list[Any]:
    with ThreadPoolExecutor(len(queries)) as pool:
        return list(pool.map(lambda q: reward_func([q], [PROMPT], ["lease"]), queries))


def logs(result: dict[str, Any]) -> dict[str, float]:
    return {key: value[0] for key, value in result["extra_logs"].items()}


def test_samples_from_threads_fill_a_group_that_is_graded_once_like_a_whole_batch(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    expected = reference_rewards(PAIRWISE, judge.base_url, grader.tasks["lease"], ANSWERS)
    calls = judge.call_count
    reward_func = openrlhf_reward_func(grader, group_size=4, wait_s=30)

    results = one_per_thread(reward_func, [PROMPT + a + "<|im_end|>" for a in ANSWERS])

    assert [r["rewards"][0] for r in results] == expected
    assert {tuple(logs(r).values()) for r in results} == {(0.0, 0.0, 0.0)}
    # The judge calls of one grading of the group: reference_rewards made the same ones.
    assert judge.call_count - calls == calls
    assert not judge.any_prompt_contains("<|im_end|>\n\n") and not any(
        judge.any_prompt_contains(a + "<|im_end|>") for a in ANSWERS
    )


def test_a_group_not_filled_in_time_is_graded_as_it_stands(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    reward_func = openrlhf_reward_func(grader, group_size=4, wait_s=0.3)

    results = one_per_thread(reward_func, [PROMPT + a for a in ANSWERS[:2]])

    expected = reference_rewards(PAIRWISE, judge.base_url, grader.tasks["lease"], ANSWERS[:2])
    assert [r["rewards"][0] for r in results] == expected == [1.0, 0.0]
    assert [logs(r)["group_incomplete"] for r in results] == [1.0, 1.0]


def test_a_group_not_filled_in_time_is_refused_when_asked_without_a_judge_call(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    reward_func = openrlhf_reward_func(
        make_grader(PAIRWISE), group_size=4, wait_s=0.2, partial="refuse", failure_reward=-1.0
    )
    calls = judge.call_count

    results = one_per_thread(reward_func, [PROMPT + a for a in ANSWERS[:3]])

    assert [r["rewards"][0] for r in results] == [-1.0] * 3
    assert {tuple(logs(r).items()) for r in results} == {
        (("grader_failed", 1.0), ("reward_func_error", 0.0), ("group_incomplete", 1.0))
    }
    assert judge.call_count == calls


def test_two_prompts_samples_interleaved_form_two_groups(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(PAIRWISE)
    reward_func = openrlhf_reward_func(grader, group_size=2, wait_s=30)
    other = PROMPT.replace("lease", "contract")
    rows = [(PROMPT, ANSWERS[0]), (other, ANSWERS[3]), (PROMPT, ANSWERS[3]), (other, ANSWERS[0])]
    with ThreadPoolExecutor(len(rows)) as pool:
        results = list(pool.map(lambda row: reward_func([row[0] + row[1]], [row[0]]), rows))
    assert [r["rewards"][0] for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert {logs(r)["group_incomplete"] for r in results} == {0.0}


def test_special_token_text_is_kept_when_asked(
    judge: FakeJudgeServer, make_grader: Callable[..., Grader]
) -> None:
    reward_func = openrlhf_reward_func(make_grader(SCALAR), special_tokens=())
    reward_func([PROMPT + "A good answer.</s>"], [PROMPT], ["lease"])
    assert judge.any_prompt_contains("A good answer.</s>")
    openrlhf_reward_func(make_grader(SCALAR))([PROMPT + "A fair answer.</s>"], [PROMPT], ["lease"])
    assert not judge.any_prompt_contains("A fair answer.</s>")


def test_made_on_a_running_loop_it_gives_the_loop_threads_for_waiting_samples(
    make_grader: Callable[..., Grader],
) -> None:
    """OpenRLHF loads the reward_func file in its rollout actor's async __init__ and runs each
    call with asyncio.to_thread: more waiting samples than the default executor's
    min(32, cpus + 4) threads must still all run at once."""
    grader = make_grader(PAIRWISE)
    waiting = 40
    assert waiting <= GATHER_THREADS

    async def actor() -> None:
        openrlhf_reward_func(grader, group_size=8)  # what loading the file does
        everyone = threading.Barrier(waiting, timeout=10)
        await asyncio.gather(*[asyncio.to_thread(everyone.wait) for _ in range(waiting)])

    asyncio.run(actor())
