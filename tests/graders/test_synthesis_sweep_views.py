"""The sweep pages: who sees and starts what, the form's errors, the page and its fragment,
the resume form, and the job page's link back."""

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import JudgeEndpoint, SynthesisSweep
from graders.services import metagrader_register
from graders.synthesis.sweep import sweep_start
from graders.synthesis.sweep_run import sweep_execute
from labeling.models import JobStatus, Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis_rows import STEERING_MARK, DrawSpec, synthesis_rows
from tests.graders.test_synthesis_sweep import scoring_responder


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def endpoint(project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = scoring_responder
    return JudgeEndpoint.objects.create(
        project=project, name="small", base_url=fake_judge.base_url, model="tiny-1b",
        is_default=True,
    )  # fmt: skip


def test_experts_see_nothing_reviewers_read_and_admins_start(
    project: Project,
    endpoint: JudgeEndpoint,
    admin_user: Any,
    reviewer_user: Any,
    expert_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    synthesis = synthesis_rows(project, [DrawSpec(), DrawSpec()])
    url = reverse("synthesis-sweeps", args=["acme"])
    assert _client(expert_user).get(url).status_code == 403
    reviewer, admin = _client(reviewer_user), _client(admin_user)
    page = reviewer.get(url).content.decode()
    assert "No sweeps yet." in page and "Start a sweep" not in page
    form = {"synthesis": synthesis.pk, "judges": [endpoint.pk], "runs": 2}
    assert reviewer.post(url, form).status_code == 403
    empty = admin.post(url, {"synthesis": synthesis.pk, "runs": 2})
    assert empty.status_code == 400
    assert "Choose at least one judge endpoint or scalar grader." in empty.content.decode()
    pairwise = metagrader_register(
        project=project, program=baseline_program("pairwise").to_json(), origin="baseline"
    )
    refused = admin.post(url, form | {"graders": [pairwise.pk]})
    assert refused.status_code == 400  # only scalar graders are offered
    with django_capture_on_commit_callbacks() as callbacks:
        started = admin.post(url, form)
    assert started.status_code == 302 and len(callbacks) == 1
    sweep = SynthesisSweep.objects.get()
    assert started["Location"] == reverse("synthesis-sweep", args=["acme", sweep.pk])
    detail = reverse("synthesis-sweep", args=["acme", sweep.pk])
    assert _client(expert_user).get(detail).status_code == 403
    assert "Not scored yet." in reviewer.get(detail).content.decode()
    sweep_execute(sweep_id=sweep.pk)
    page = reviewer.get(detail).content.decode()
    assert "<td>small (tiny-1b)</td>" in page and "evaluator prompt" in page
    assert '<td class="num">2</td><td class="num">1.000</td>' in page  # 2 pairs, all right
    assert STEERING_MARK not in page
    fragment = reviewer.get(detail, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="sweep-live"') and "<html" not in fragment
    listing = reviewer.get(url).content.decode()
    assert f'href="{detail}">#{sweep.pk}</a>' in listing and "padme-test" in listing
    job_page = reviewer.get(reverse("job-detail", args=[sweep.job_id])).content.decode()
    assert f'<a href="{detail}">evaluator sweep #{sweep.pk}</a>' in job_page


def test_a_project_without_a_synthesis_or_a_judge_says_so(
    project: Project, admin_user: Any
) -> None:
    page = _client(admin_user).get(reverse("synthesis-sweeps", args=["acme"])).content.decode()
    assert "No synthesis in this project yet" in page
    assert "No judge endpoint yet" in page
    synthesis_rows(project, [DrawSpec()])
    page = _client(admin_user).get(reverse("synthesis-sweeps", args=["acme"])).content.decode()
    assert "This project has no judge endpoint yet." in page
    assert "This project has no scalar grader yet." in page


def test_a_budget_stopped_sweep_resumes_from_its_page(
    project: Project,
    endpoint: JudgeEndpoint,
    admin_user: Any,
    reviewer_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    synthesis = synthesis_rows(project, [DrawSpec()])
    sweep = sweep_start(synthesis=synthesis, judges=[endpoint], runs=2, max_calls=1)
    sweep_execute(sweep_id=sweep.pk)
    sweep.refresh_from_db()
    assert sweep.job.status == JobStatus.BUDGET_SPENT
    detail = reverse("synthesis-sweep", args=["acme", sweep.pk])
    assert "Resume" in _client(admin_user).get(detail).content.decode()
    assert "Resume</button>" not in _client(reviewer_user).get(detail).content.decode()
    resume = reverse("synthesis-sweep-resume", args=["acme", sweep.pk])
    assert _client(reviewer_user).post(resume, {}).status_code == 403
    kept = _client(admin_user).post(resume, {"max_calls": "1"})
    assert (
        kept.status_code == 400 and "Must be above the current limit of 1" in kept.content.decode()
    )
    with django_capture_on_commit_callbacks() as callbacks:
        assert _client(admin_user).post(resume, {"max_calls": "10"}).status_code == 302
    assert len(callbacks) == 1
    assert sweep_execute(sweep_id=sweep.pk)["status"] == "succeeded"
