"""TRL: TRLReward and TRLAsyncReward (graders/engine/trainers/trl.py) in TRL's own GRPOTrainer,
and the parts of them TRL relies on, checked in the project's venv first.

The GRPOTrainer tests run tests/trainers/scripts/trl_grpo.py in the TRL venv (.ci/trainer-venvs
builds it; they skip naming the reason when it is not built): two training steps of a tiny
random model on CPU against the fake judge of this process, and the rewards TRL computed must
equal the workbench's grading of the same completions (tests/trainers/bundles.py)."""

import asyncio
import inspect
import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from graders.engine.runtime import TRLAsyncReward, TRLReward, load_bundle
from tests.fakes.openai_server import FakeJudgeServer
from tests.trainers.bundles import in_app_rewards, write_bundle
from tests.trainers.harness import run_in_trainer

SCRIPTS = Path(__file__).parent / "scripts"
NUM_GENERATIONS = 4  # as trl_grpo.py trains
PROMPT = "the tenant asks"


def test_failed_grades_reach_trl_through_log_metric(
    tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    grader = load_bundle(write_bundle(tmp_path, "scalar", fake_judge))
    reward = TRLReward(grader, num_generations=2, name="expert")
    logged: list[tuple[str, float]] = []
    try:
        rewards = reward(
            [PROMPT] * 4,
            ["a good answer", "unreadable", "unreadable", "a poor answer"],
            task_id=["lease"] * 4,
            log_metric=lambda name, value: logged.append((name, value)),
        )
    finally:
        grader.close()

    assert rewards == [0.75, 0.0, 0.0, 0.25]
    assert reward.last_failures == 2
    assert logged == [("expert/grader_failed", 0.5)]


def _reward_in_a_spawned_process(
    reward: TRLAsyncReward, prompts: list[str], completions: list[str]
) -> tuple[bool, bool, list[float | None]]:
    """What AsyncGRPOTrainer's rollout worker does with a reward function: it arrives pickled
    in a spawned interpreter and is awaited there."""

    async def call() -> list[float | None]:
        try:
            return await reward(prompts=prompts, completions=completions)
        finally:
            await reward.reward.grader.aclose()

    marked = asyncio.iscoroutinefunction(reward), inspect.iscoroutinefunction(reward)
    return *marked, asyncio.run(call())


def test_the_async_reward_pickles_into_a_spawned_process_and_is_awaited_there(
    tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    grader = load_bundle(write_bundle(tmp_path, "pairwise", fake_judge))
    grader.score_group_sync("lease", [])  # a started loop and client must not stop pickling
    reward = TRLReward(grader, num_generations=2, name="expert_pairwise").as_async()
    completions = ["good", "excellent"]
    try:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            by_asyncio, by_inspect, rewards = pool.apply(
                _reward_in_a_spawned_process, (reward, [PROMPT] * 2, completions)
            )
    finally:
        grader.close()

    assert isinstance(reward, TRLAsyncReward) and reward.__name__ == "expert_pairwise"
    # asyncio's test (older TRL releases) and inspect's (Python 3.12+), on the unpickled copy.
    assert by_asyncio and by_inspect
    assert rewards == in_app_rewards("pairwise", fake_judge, completions) == [0.0, 1.0]


def _grpo(
    trainer_python: Callable[[str], Path],
    tmp_path: Path,
    fake_judge: FakeJudgeServer,
    kind: str,
    mode: str,
) -> dict[str, Any]:
    python = trainer_python("trl")
    bundle = write_bundle(tmp_path, kind, fake_judge)
    out = tmp_path / "trl.json"
    run_in_trainer(python, SCRIPTS / "trl_grpo.py", str(bundle), str(out), mode, timeout=300)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize(
    ("kind", "mode"), [("scalar", "sync"), ("pairwise", "async"), ("rubric", "async")]
)
def test_grpo_rewards_equal_the_workbench_grading_of_the_same_completions(
    trainer_python: Callable[[str], Path],
    tmp_path: Path,
    fake_judge: FakeJudgeServer,
    kind: str,
    mode: str,
) -> None:
    result = _grpo(trainer_python, tmp_path, fake_judge, kind, mode)

    calls = result["calls"]
    assert len(calls) == 2  # one reward call per training step
    failed_shares = []
    for call in calls:
        completions, prompts = call["completions"], call["prompts"]
        assert len(completions) == 2 * NUM_GENERATIONS
        expected: list[float] = []
        for start in range(0, len(completions), NUM_GENERATIONS):
            block = slice(start, start + NUM_GENERATIONS)
            assert len(set(prompts[block])) == 1  # TRL's layout: a prompt's generations together
            in_app = in_app_rewards(kind, fake_judge, completions[block])
            expected += [0.0 if reward is None else reward for reward in in_app]  # failure_reward
            failed_shares += [reward is None for reward in in_app]
        assert call["rewards"] == pytest.approx(expected, abs=1e-6)
    every_reward = [reward for call in calls for reward in call["rewards"]]
    assert len(set(every_reward)) > 1, "the random completions should get different rewards"

    # TRL's logged metric: the share of failed grades of each step's call.
    metric = f"{result['name']}/grader_failed"
    logged = [entry[metric] for entry in result["log_history"] if metric in entry]
    per_call = len(failed_shares) // len(calls)
    expected_shares = [
        sum(failed_shares[i : i + per_call]) / per_call
        for i in range(0, len(failed_shares), per_call)
    ]
    assert logged == pytest.approx(expected_shares)
    if kind == "scalar":  # "unreadable" in a completion makes the fake judge's answer unreadable
        assert any(failed_shares)
