"""The judge cache is one table for every project (issue 13, item 8): keyed by the request
alone, project B's identical call was answered from project A's, so B learned that A had
graded that text and read A's answer, without a judge call. Rows are now keyed by the
endpoint too; reruns through one endpoint still hit (tests/graders/test_grading.py)."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.grading import grading_run_execute
from graders.models import GradingRun, JudgeEndpoint, Metagrader
from graders.services import grading_run_start, metagrader_register
from graders.tokens import token_create
from labeling.imports import jsonl_import
from labeling.models import Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

RECORDS: list[dict[str, Any]] = [
    {"type": "task", "id": "t0", "prompt": "Review the contract", "split": "eval"},
    {"type": "response", "id": "t0/r0", "task": "t0", "content": "A confidential answer"},
    {"type": "response", "id": "t0/r1", "task": "t0", "content": "Another one"},
]


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


def project_with_judge(
    slug: str, fake_judge: FakeJudgeServer, tmp_path: Path
) -> tuple[Project, Metagrader, JudgeEndpoint]:
    """A project holding the same task, the same grader and an identical judge endpoint."""
    project = Project.objects.create(slug=slug, name=slug)
    jsonl_import(project=project, path=write_jsonl(tmp_path / f"{slug}.jsonl", RECORDS))
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="judge", base_url=fake_judge.base_url, model="m", is_default=True
    )
    return project, grader, endpoint


def graded(project: Project, grader: Metagrader, endpoint: JudgeEndpoint) -> GradingRun:
    run = grading_run_start(project=project, metagrader=grader, endpoint=endpoint, split="eval")
    grading_run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def test_another_project_gets_no_answer_from_the_cache(
    fake_judge: FakeJudgeServer, tmp_path: Path
) -> None:
    fake_judge.responder = lambda body: json.dumps({"score": 0.7})
    a, a_grader, a_judge = project_with_judge("a", fake_judge, tmp_path)
    b, b_grader, b_judge = project_with_judge("b", fake_judge, tmp_path)
    first = graded(a, a_grader, a_judge)
    assert (first.usage["calls"], first.usage["cache_hits"]) == (2, 0)
    again = graded(a, a_grader, a_judge)  # the same endpoint: answered from the cache
    assert (again.usage["calls"], again.usage["cache_hits"], fake_judge.call_count) == (0, 2, 2)

    other = graded(b, b_grader, b_judge)
    assert (other.usage["calls"], other.usage["cache_hits"], fake_judge.call_count) == (2, 0, 4)


def test_the_reward_api_of_another_project_gets_no_answer_from_the_cache(
    fake_judge: FakeJudgeServer, tmp_path: Path
) -> None:
    fake_judge.responder = lambda body: json.dumps({"score": 0.7})
    a, a_grader, a_judge = project_with_judge("a", fake_judge, tmp_path)
    b, b_grader, _ = project_with_judge("b", fake_judge, tmp_path)
    graded(a, a_grader, a_judge)
    assert fake_judge.call_count == 2
    raw = token_create(project=b, name="trainer", scopes=["reward"])[1]
    answer = Client().post(
        reverse("api-reward", args=["b", b_grader.pk]),
        {"task_id": "t0", "responses": [{"id": "x", "content": "A confidential answer"}]},
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert answer.status_code == 200 and answer.json()["rewards"] == [0.7]
    assert fake_judge.call_count == 3  # B's own call, not A's answer
