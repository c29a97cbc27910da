"""verl: the reward files of docs/trainers.md, as written, in verl 0.9's own reward loop.

tests/trainers/scripts/verl_reward_loop.py runs in the verl venv (.ci/trainer-venvs builds it;
these tests skip naming the reason when it is not built): it composes verl's ppo_trainer.yaml
with the guide's command-line overrides, builds RewardLoopWorker in-process (no Ray actor, no
GPU, no rollout engine) and scores two prompts' responses the way RewardLoopManager hands a
worker its chunk. The scores must equal the workbench's grading of the same responses
(tests/trainers/bundles.py); what cannot work must be refused when the worker is built."""

import asyncio
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from graders.engine.runtime import load_bundle, verl_compute_score, verl_compute_score_async
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_trainer_docs import DOC, block
from tests.trainers.bundles import in_app_rewards, write_bundle
from tests.trainers.harness import run_in_trainer

SCRIPT = Path(__file__).parent / "scripts" / "verl_reward_loop.py"
PER_SAMPLE_FILE = "workbench_reward.py"
GROUP_FILE = "workbench_pairwise_reward.py"
GROUP_SIZE = 8  # the guide's actor_rollout_ref.rollout.n
# Two prompts' responses, "|" between responses.
GROUPS = [
    line.split("|")
    for line in (
        "excellent notice|good|poor unreadable|fair days|the tenant|good notice|poor|excellent",
        "notice the days|fair|good fair|poor poor|excellent good|unreadable|the landlord|fair",
    )
]


def command_overrides(marker: str) -> list[str]:
    """The hydra overrides of the guide's one verl command that contains `marker`."""
    commands = [
        code
        for code in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
        if "verl.trainer.main_ppo" in code and marker in code
    ]
    assert len(commands) == 1, f"{len(commands)} verl commands contain {marker!r}"
    return re.findall(r"^\s*(\+?[\w.]+=\S+)", commands[0], flags=re.MULTILINE)


def reward_file(folder: Path, name: str, marker: str) -> Path:
    """The guide's reward file, its absolute paths pointed at `folder`."""
    code = re.sub(r'"/(shared|tmp)/', f'"{folder}/', block(marker))
    path = folder / name
    path.write_text(code)
    return path


def verl_scores(
    python: Path,
    folder: Path,
    overrides: list[str],
    files: dict[str, Path],
    groups: list[list[str]] = GROUPS,
) -> dict[str, Any]:
    for name, path in files.items():  # the guide names reward files relative to its job
        overrides = [o.replace(f"={name}", f"={path}") for o in overrides]
    request = folder / "request.json"
    request.write_text(json.dumps({"overrides": overrides, "groups": groups}))
    out = folder / "verl.json"
    run_in_trainer(python, SCRIPT, str(request), str(out), timeout=300)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture
def verl_python(trainer_python: Any) -> Path:
    python: Path = trainer_python("verl")
    return python


def bundle(folder: Path, kind: str, judge: FakeJudgeServer) -> None:
    write_bundle(folder, kind, judge).rename(folder / "grader-bundle.json")


def expected_scores(kind: str, judge: FakeJudgeServer) -> tuple[list[float], list[float]]:
    rewards = [reward for group in GROUPS for reward in in_app_rewards(kind, judge, group)]
    return [0.0 if r is None else r for r in rewards], [float(r is None) for r in rewards]


def per_sample(folder: Path, form: str = "async") -> dict[str, Path]:
    path = reward_file(folder, PER_SAMPLE_FILE, "_grader, failure_reward")
    if form == "sync":  # the guide's plain-function variant, which verl runs in a thread
        path.write_text(path.read_text().replace("verl_compute_score_async", "verl_compute_score"))
    return {PER_SAMPLE_FILE: path}


def grouped(folder: Path) -> dict[str, Path]:
    return {GROUP_FILE: reward_file(folder, GROUP_FILE, "_grader, batch=True")}


@pytest.mark.parametrize(
    ("kind", "manager", "form"),
    [
        ("scalar", "naive", "async"),
        ("scalar", "naive", "sync"),
        ("rubric", "rate_limited", "async"),
    ],
)
def test_per_sample_scores_equal_the_workbench_grading(
    verl_python: Path,
    tmp_path: Path,
    fake_judge: FakeJudgeServer,
    kind: str,
    manager: str,
    form: str,
) -> None:
    bundle(tmp_path, kind, fake_judge)
    overrides = command_overrides("reward.reward_manager.name=naive")
    if manager == "rate_limited":  # as the guide's note spells it
        overrides = [o for o in overrides if not o.startswith("reward.reward_manager.name=")]
        overrides += ["reward.reward_manager.name=rate_limited", "+reward.max_concurrent=32"]

    result = verl_scores(verl_python, tmp_path, overrides, per_sample(tmp_path, form))

    scores, failed = expected_scores(kind, fake_judge)
    assert result["manager"] == {"naive": "NaiveRewardManager"}.get(
        manager, "RateLimitedRewardManager"
    )
    assert result["scores"] == pytest.approx(scores)
    assert result["rm_scores"] == pytest.approx(scores)  # verl's own placement in rm_scores
    assert [extra["grader_failed"] for extra in result["extra"]] == failed
    assert len(set(scores)) > 1
    if kind == "scalar":
        assert any(failed)  # "unreadable" makes the fake judge's answer unreadable


@pytest.mark.parametrize("kind", ["pairwise", "pairwise_rubric"])
def test_pairwise_groups_by_uid_and_scores_equal_the_workbench_grading(
    verl_python: Path, tmp_path: Path, fake_judge: FakeJudgeServer, kind: str
) -> None:
    bundle(tmp_path, kind, fake_judge)
    overrides = command_overrides("WorkbenchGroupRewardManager")
    assert f"actor_rollout_ref.rollout.n={GROUP_SIZE}" in overrides

    result = verl_scores(verl_python, tmp_path, overrides, grouped(tmp_path))

    scores, failed = expected_scores(kind, fake_judge)
    assert result["manager"] == "WorkbenchGroupRewardManager"
    assert result["scores"] == pytest.approx(scores)
    assert result["rm_scores"] == pytest.approx(scores)
    assert [extra["grader_failed"] for extra in result["extra"]] == failed
    # Win rates within each prompt's group: a group's rewards average one half.
    for start in range(0, len(scores), GROUP_SIZE):
        assert sum(scores[start : start + GROUP_SIZE]) / GROUP_SIZE == pytest.approx(0.5)


def test_a_pairwise_grader_in_the_per_sample_setup_is_refused_when_verl_starts(
    verl_python: Path, tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    bundle(tmp_path, "pairwise", fake_judge)
    overrides = command_overrides("reward.reward_manager.name=naive")

    result = verl_scores(verl_python, tmp_path, overrides, per_sample(tmp_path))

    reasons = " | ".join(result["startup_error"])
    assert "quality-compare is a pairwise grader" in reasons
    assert "WorkbenchGroupRewardManager" in reasons


def test_the_group_manager_refuses_at_startup_what_would_split_groups(
    verl_python: Path, tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    bundle(tmp_path, "pairwise", fake_judge)
    dropped = ("reward.num_workers=", "actor_rollout_ref.rollout.val_kwargs.n=", "data.train_")
    overrides = [
        o for o in command_overrides("WorkbenchGroupRewardManager") if not o.startswith(dropped)
    ]

    result = verl_scores(verl_python, tmp_path, overrides, grouped(tmp_path))

    (reason,) = result["startup_error"]
    assert reason.startswith("ValueError: WorkbenchGroupRewardManager cannot grade whole groups")
    assert "reward.num_workers=8" in reason  # verl's defaults
    assert "data.train_batch_size x rollout.n = 8192 responses" in reason
    assert "val_kwargs.n=1" in reason
    assert fake_judge.call_count == 0


def test_a_group_still_short_after_the_wait_is_graded_as_it_stands(
    verl_python: Path, tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    bundle(tmp_path, "pairwise", fake_judge)
    overrides = command_overrides("WorkbenchGroupRewardManager")
    overrides.append("+reward.reward_kwargs.group_wait_s=1")
    short = [["good", "excellent notice", "poor"]]  # 3 of rollout.n=8 responses ever arrive

    result = verl_scores(verl_python, tmp_path, overrides, grouped(tmp_path), groups=short)

    assert result["scores"] == pytest.approx(in_app_rewards("pairwise", fake_judge, short[0]))
    assert result["scores"] == pytest.approx([0.5, 1.0, 0.0])


@pytest.mark.parametrize("factory", [verl_compute_score, verl_compute_score_async])
def test_the_group_form_called_per_sample_says_which_form_that_manager_needs(
    tmp_path: Path, fake_judge: FakeJudgeServer, factory: Any
) -> None:
    grader = load_bundle(write_bundle(tmp_path, "pairwise", fake_judge))
    compute_score = factory(grader, batch=True)
    try:
        with pytest.raises(ValueError, match="naive, dapo and rate_limited call compute_score per"):
            called = compute_score(data_source="workbench", solution_str="good", ground_truth="")
            if inspect.isawaitable(called):
                asyncio.run(called)
    finally:
        grader.close()
