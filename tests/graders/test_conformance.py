"""One set of responses through every way a grader reaches a training job: in-app grading,
the TRL, verl and OpenRLHF functions of the exported bundle, and both HTTP endpoints. All six
must give the same rewards (the fake judge answers deterministically from what it reads)."""

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from graders.bundles import bundle_build
from graders.engine.baseline import baseline_program
from graders.engine.runtime import TRLReward, load_bundle, openrlhf_reward_func, verl_compute_score
from graders.grading import grading_run_execute
from graders.models import Grade, JudgeEndpoint
from graders.services import grading_run_start, metagrader_register
from graders.tokens import token_create
from labeling.models import Project, Response, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_grading import quality_responder

pytestmark = pytest.mark.django_db
TASK = "e0"


def as_list(values: Any) -> list[float]:
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


@pytest.mark.parametrize("kind", ["scalar", "pairwise", "rubric"])
def test_every_path_to_a_trainer_gives_the_in_app_rewards(
    kind: str,
    search_project: Project,
    search_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
) -> None:
    fake_judge.responder = quality_responder
    grader = metagrader_register(
        project=search_project, program=baseline_program(kind).to_json(), origin="baseline"
    )
    run = grading_run_start(
        project=search_project, metagrader=grader, endpoint=search_judge, task_ids=[TASK]
    )
    grading_run_execute(run_id=run.pk)
    responses = list(Response.objects.filter(task__external_id=TASK).order_by("external_id"))
    in_app = dict(Grade.objects.filter(run=run).values_list("response_id", "reward"))
    expected = [in_app[r.pk] for r in responses]
    assert len(set(expected)) > 1  # the responses differ, so agreement means something

    prompt = Task.objects.get(external_id=TASK).prompt
    contents = [r.content for r in responses]
    n = len(responses)
    bundle = load_bundle(json.loads(json.dumps(bundle_build(metagrader=grader))))
    trl = TRLReward(bundle, num_generations=n)(
        prompts=[prompt] * n, completions=contents, task_id=[TASK] * n
    )
    verl = [
        row["score"]
        for row in verl_compute_score(bundle, batch=True)(
            data_sources=["workbench"] * n,
            solution_strs=contents,
            ground_truths=[None] * n,
            extra_infos=[{"task_id": TASK}] * n,
        )
    ]
    openrlhf = openrlhf_reward_func(bundle, group_size=n)(
        queries=[prompt + c for c in contents], prompts=[prompt] * n, labels=[TASK] * n
    )
    bundle.close()

    _, raw = token_create(project=search_project, name="trainer", scopes=["reward"])
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    reward = client.post(
        reverse("api-reward", args=[search_project.slug, grader.pk]),
        {"task_id": TASK, "responses": [{"id": r.external_id, "content": r.content} for r in responses]},
        content_type="application/json",
    )  # fmt: skip
    get_reward = client.post(
        reverse("api-get-reward", args=[search_project.slug, grader.pk]),
        {"query": [prompt + c for c in contents], "prompts": [prompt] * n, "labels": [TASK] * n},
        content_type="application/json",
    )
    assert reward.status_code == 200 and get_reward.status_code == 200, (
        reward.content,
        get_reward.content,
    )
    assert as_list(trl) == expected
    assert as_list(verl) == expected
    assert as_list(openrlhf["rewards"]) == expected
    assert reward.json()["rewards"] == expected
    assert as_list(get_reward.json()["rewards"]) == expected
