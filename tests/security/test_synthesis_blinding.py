"""Blinding of synthesis (DESIGN.md section 11, issue 14 point 5): an expert never learns a
response's level, its cell's steering text, the filter judges' votes or the agent that wrote
it, from any page, fragment or API an expert can reach; the run pages themselves are closed
to experts, and steering is shown to admins alone (reviewers see the cells without it)."""

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.models import SynthesisRun
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.runs import synthesis_start
from labeling.models import Project, Response, SynthesisCell
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import Script, start_arguments, synthesis_project

AGENT_AND_JUDGE_NAMES = ("agent-a", "agent-b", "judge-1", "judge-2", "writer")


@pytest.fixture
def synthesized(project: Project, fake_judge: FakeJudgeServer) -> SynthesisRun:
    fake_judge.responder = Script(err_on={("t1", "warmth")})
    synthesis_project(project, fake_judge, ("t1", "t2", "t3"))
    run = synthesis_start(**start_arguments(project))
    synthesis_run_execute(run_id=run.pk)
    return run


def _steering_texts(run: SynthesisRun) -> list[str]:
    texts = [
        text
        for cell in SynthesisCell.objects.filter(synthesis=run.synthesis)
        for text in cell.steering.values()
    ]
    assert texts
    return texts


def _leaks(body: str, run: SynthesisRun) -> list[str]:
    found = [t for t in _steering_texts(run) if t in body]
    found += [name for name in AGENT_AND_JUDGE_NAMES if name in body]
    found += [w for w in ("STEER-", "REASONING-", "<behaviour>", "&lt;behaviour&gt;") if w in body]
    # Contrasts and votes as the run pages word them (the job's stage may count kept cells:
    # a total says nothing of any one response).
    found += re.findall(r"\b(bad|ok|good)\u2013(ok|good)\b", body)
    found += [w for w in ("vetoes", "no verdict", "vetoed", "agrees") if w in body]
    found += [r.external_id for r in Response.objects.all() if r.external_id in body]
    return [str(f) for f in found]


def test_expert_is_refused_every_synthesis_page(
    synthesized: SynthesisRun, expert_user: User
) -> None:
    client = Client()
    client.force_login(expert_user)
    run = synthesized
    for name, method in (
        ("synthesis-run", "get"),
        ("synthesis-run-cancel", "post"),
        ("synthesis-run-resume", "post"),
    ):
        url = reverse(name, args=["acme", run.pk])
        assert getattr(client, method)(url).status_code == 403, name
    assert client.get(reverse("synthesis-runs", args=["acme"])).status_code == 403
    fragment = client.get(
        reverse("synthesis-run", args=["acme", run.pk]), headers={"HX-Request": "true",
                                                                  "HX-Target": "synthesis-cells"}
    )  # fmt: skip
    assert fragment.status_code == 403


def test_no_page_or_api_an_expert_reaches_reveals_synthesis(
    synthesized: SynthesisRun, expert_user: User
) -> None:
    client = Client()
    client.force_login(expert_user)
    run = synthesized
    urls = [
        reverse("project-overview", args=["acme"]),
        reverse("task-list", args=["acme"]),
        reverse("queue", args=["acme"]),
        reverse("label", args=["acme"]),
        reverse("grade", args=["acme"]),
        reverse("agreement", args=["acme"]),
        reverse("api-project", args=["acme"]),
        reverse("api-tasks", args=["acme"]),
        reverse("job-detail", args=[run.job_id]),
        reverse("api-job", args=[run.job_id]),
    ]
    for task in ("t1", "t2", "t3"):
        urls += [
            reverse("task-detail", args=["acme", task]),
            reverse("api-task", args=["acme", task]),
        ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert _leaks(response.content.decode(), run) == [], url
    # The job's status fragment, as its page polls it.
    fragment = client.get(reverse("job-detail", args=[run.job_id]), headers={"HX-Request": "true"})
    assert _leaks(fragment.content.decode(), run) == []
    # The rollouts are there for the expert to read, as text only.
    page = client.get(reverse("task-detail", args=["acme", "t1"])).content.decode()
    assert "quality=" in page


def _run_page(client: Client, run: SynthesisRun, **headers: Any) -> str:
    response = client.get(reverse("synthesis-run", args=["acme", run.pk]), headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def test_steering_is_shown_to_admins_only(
    synthesized: SynthesisRun, admin_user: User, reviewer_user: User
) -> None:
    run = synthesized
    steering = _steering_texts(run)
    admin, reviewer = Client(), Client()
    admin.force_login(admin_user)
    reviewer.force_login(reviewer_user)
    cells = {"HX-Request": "true", "HX-Target": "synthesis-cells"}
    for headers in ({}, cells):
        admin_html = _run_page(admin, run, **headers)
        assert all(text.replace("'", "&#x27;") in admin_html for text in steering)
        reviewer_html = _run_page(reviewer, run, **headers)
        assert not any(text in reviewer_html for text in steering)
        assert "STEER-" not in reviewer_html and "REASONING-" not in reviewer_html
        # The reviewer does see the cells: contrasts, agents and votes.
        assert "vetoes" in reviewer_html and "agent-" in reviewer_html
