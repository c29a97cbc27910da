"""OpenRLHF 0.11.2's own SingleTurnAgentExecutor (in its venv, .venv-trainers/openrlhf) with a
pairwise grader, both ways OpenRLHF reaches a reward: --remote_rm_url naming the reward API
served by a real server (each sample its own request, gathered by ?group_size=), and naming a
reward_func file of the runtime (each sample its own call from a thread, gathered in the
process). Each sample's reward equals the in-app grading of the same responses as a group, with
the chat template's EOS text stripped before grading."""
# ruff: noqa: F811 (the fixtures of test_reward_api.py, imported, are arguments here)

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from graders.engine.programs import DocumentInput, TaskInput
from graders.models import JudgeEndpoint
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.test_runtime import (
    LEASE,
    LEASE_TASK,
    PAIRWISE,
    bundle_dict,
    quality_judge,
    reference_rewards,
)
from tests.graders.test_reward_api import (  # noqa: F401 (fixtures)
    grader_of,
    group,
    in_app_rewards,
    judge,
    rate_counts_cleared,
    reward_project,
    token,
)
from tests.trainers.harness import run_in_trainer

SCRIPT = Path(__file__).resolve().parent / "scripts" / "openrlhf_agent.py"
TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def rollouts_run(
    python: Path, tmp_path: Path, rollouts: list[dict[str, Any]], *reward: str
) -> list[list[dict[str, Any]]]:
    (tmp_path / "rollouts.json").write_text(json.dumps(rollouts))
    out = tmp_path / "out.json"
    run_in_trainer(python, SCRIPT, str(tmp_path / "rollouts.json"), str(out), *reward)
    return list(json.loads(out.read_text()))


@pytest.mark.django_db(transaction=True)
def test_remote_rm_url_with_group_size_gathers_a_prompts_requests_like_in_app_grading(
    trainer_python: Callable[[str], Path], tmp_path: Path, live_server: Any,
    reward_project: Project, judge: JudgeEndpoint, token: str,
) -> None:  # fmt: skip
    python = trainer_python("openrlhf")
    grader = grader_of(reward_project, "pairwise")
    rollouts = [
        {"prompt": TEMPLATE.format(task), "label": task,
         "responses": [r["content"] for r in group(task)]}
        for task in ("t0", "t1", "t2")
    ]  # fmt: skip
    # OpenRLHF posts without headers: the token goes as the URL's basic-auth password.
    path = reverse("api-get-reward", args=["acme", grader.pk])
    url = live_server.url.replace("://", f"://openrlhf:{token}@") + path
    url += "?group_size=3&wait_s=60"

    results = rollouts_run(python, tmp_path, rollouts, url)

    expected = in_app_rewards(reward_project, judge, grader)  # after: no answers cached before
    content_ids = {r["content"]: r["id"] for task in ("t0", "t1", "t2") for r in group(task)}
    for samples in results:
        for sample in samples:
            assert sample["response"].endswith("<|im_end|>")  # what reached the reward API
            assert sample["reward"] == [expected[content_ids[sample["response"][:-10]]]]
            assert sample["extra_logs"] == {"grader_failed": [0.0], "group_incomplete": [0.0]}


def test_a_reward_func_file_with_group_size_gathers_the_executors_threads_like_in_app_grading(
    trainer_python: Callable[[str], Path], tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    python = trainer_python("openrlhf")
    fake_judge.responder = quality_judge
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps(bundle_dict(PAIRWISE, fake_judge.base_url)))
    reward_file = tmp_path / "workbench_reward_func.py"
    reward_file.write_text(
        "from graders.engine.runtime import load_bundle, openrlhf_reward_func\n\n"
        f"reward_func = openrlhf_reward_func(load_bundle({str(bundle)!r}), group_size=4, "
        "wait_s=60)\n"
    )
    answers = ["An excellent answer.", "A good answer.", "A fair answer.", "A poor answer."]
    # Three prompts of four samples: twelve threads waiting at once, more than the default
    # executor's min(32, cpus + 4) on a small machine.
    rollouts = [
        {"prompt": TEMPLATE.format(f"{LEASE} ({n})"), "label": "lease",
         "responses": answers[n:] + answers[:n]}
        for n in range(3)
    ]  # fmt: skip

    results = rollouts_run(python, tmp_path, rollouts, str(reward_file))

    task = TaskInput("lease", LEASE, LEASE_TASK["instructions"],
                     tuple(DocumentInput(**d) for d in LEASE_TASK["documents"]))  # fmt: skip
    expected = dict(zip(answers, reference_rewards(PAIRWISE, fake_judge.base_url, task, answers),
                        strict=True))  # fmt: skip
    assert not fake_judge.any_prompt_contains("<|im_end|>")
    for samples in results:
        assert sorted(s["response"] for s in samples) == sorted(a + "<|im_end|>" for a in answers)
        for sample in samples:
            # float32 tensors, as OpenRLHF's examples return
            assert sample["reward"] == [pytest.approx(expected[sample["response"][:-10]])]
            assert sample["extra_logs"] == {  # tensors of one value each, here as lists
                "grader_failed": [0.0], "reward_func_error": [0.0], "group_incomplete": [0.0]
            }  # fmt: skip
