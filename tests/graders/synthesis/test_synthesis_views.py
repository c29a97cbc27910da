"""The synthesis run pages: the list with its empty state and the start form (admins only, its
checks as field errors), the run page and its fragments with the cells paginated, cancel and
resume, and the harness's job export and trajectory import."""

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from graders.models import SynthesisRun
from graders.synthesis import selectors
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.runs import synthesis_start
from labeling.models import Dimension, Job, JobStatus, Project, Synthesis, SynthesisDraw
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import Script, endpoints, start_arguments, synthesis_project


@pytest.fixture
def ready(project: Project, fake_judge: FakeJudgeServer) -> Project:
    fake_judge.responder = Script()
    synthesis_project(project, fake_judge, ("t1", "t2", "t3"))
    return project


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(project: Project, **overrides: Any) -> dict[str, Any]:
    a, b, writer, j1, j2 = endpoints(project, "agent-a", "agent-b", "writer", "judge-1", "judge-2")
    data = {
        "dimensions": [d.pk for d in Dimension.objects.filter(project=project)],
        "agents": [a.pk, b.pk], "writer": writer.pk, "judge_1": j1.pk, "judge_2": j2.pk,
        "retries": 2, "mode": "single", "turn_cap": 8, "seed": 0, "split": "", "domain": "",
    }  # fmt: skip
    return {**data, **overrides}


def test_list_shows_an_empty_state_and_admins_start_a_run(ready: Project, admin_user: User) -> None:
    client = _client(admin_user)
    page = client.get(reverse("synthesis-runs", args=["acme"])).content.decode()
    assert "No synthesis runs yet" in page and "Start run" in page
    assert "No synthesis yet" in page
    response = client.post(reverse("synthesis-runs", args=["acme"]), _form(ready))
    run = SynthesisRun.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/synthesis/{run.pk}/")
    assert [j.endpoint.name for j in run.cascade.all()] == ["judge-1", "judge-2"]
    assert run.synthesis.judges == ["judge-1", "judge-2"] and run.synthesis.cells.count() == 6
    assert run.created_by == admin_user and run.job.created_by == admin_user
    page = client.get(reverse("synthesis-runs", args=["acme"])).content.decode()
    assert f"#{run.pk}" in page and "No synthesis runs yet" not in page
    # The syntheses table: 6 cells, no draw yet, linked to its run, funnel and validation.
    row = page.split('id="syntheses"')[1].split("</table>")[0]
    assert '<td class="num">6</td><td class="num">0</td><td class="num">0</td>' in row
    assert f'href="{reverse("synthesis-run", args=["acme", run.pk])}"' in row
    assert reverse("synthesis-validation", args=["acme", run.synthesis.pk]) in row
    assert "imported" not in row


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"judge_1": ""}, "This field is required"),
        ({"judge_2": "same"}, "appears twice in the cascade"),
        ({"retries": -1}, "greater than or equal to 0"),
        ({"retries": 11}, "less than or equal to 10"),
        ({"max_cost": 0}, "greater than or equal to"),
        ({"max_calls": 0}, "greater than or equal to 1"),
        ({"mode": "webhook"}, "The webhook mode needs a URL"),
        ({"mode": "conversation"}, "A conversation needs a user simulator"),
        ({"split": "meta", "domain": "airline"}, "Choose a split or a domain"),
        ({"split": "eval"}, "no tasks in eval"),
    ],
)
def test_the_form_refuses_bad_settings(
    ready: Project, admin_user: User, overrides: dict[str, Any], error: str
) -> None:
    if overrides.get("judge_2") == "same":
        overrides = {"judge_2": _form(ready)["judge_1"]}
    response = _client(admin_user).post(
        reverse("synthesis-runs", args=["acme"]), _form(ready, **overrides)
    )
    assert response.status_code == 400
    assert error in response.content.decode()
    assert not SynthesisRun.objects.exists()


def test_the_form_refuses_another_projects_endpoint(ready: Project, admin_user: User) -> None:
    other = Project.objects.create(slug="other", name="Other")
    [foreign] = endpoints(ready, "judge-2")
    foreign.pk, foreign.project, foreign.name = None, other, "foreign"
    foreign.save()
    response = _client(admin_user).post(
        reverse("synthesis-runs", args=["acme"]), _form(ready, judge_2=foreign.pk)
    )
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()


def test_reviewers_read_but_do_not_start(ready: Project, reviewer_user: User) -> None:
    client = _client(reviewer_user)
    page = client.get(reverse("synthesis-runs", args=["acme"])).content.decode()
    assert "Start run" not in page and "Synthesis runs" in page
    response = client.post(reverse("synthesis-runs", args=["acme"]), _form(ready))
    assert response.status_code == 403 and not SynthesisRun.objects.exists()
    # The nav links to the page for reviewers and admins, not for experts.
    graders = client.get(reverse("graders", args=["acme"])).content.decode()
    assert f'href="{reverse("synthesis-runs", args=["acme"])}"' in graders


def test_run_page_fragments_and_paginated_cells(
    ready: Project, admin_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "CELLS_PAGE", 4)
    run = synthesis_start(**start_arguments(ready))
    synthesis_run_execute(run_id=run.pk)
    client = _client(admin_user)
    url = reverse("synthesis-run", args=["acme", run.pk])
    page = client.get(url).content.decode()
    assert "Succeeded" in page and "6 of 6 cells finished" in page
    assert "Page 1 of 2 · 6 cells" in page and page.count("<code>airline.") == 4
    second = client.get(
        url, {"page": 2}, headers={"HX-Request": "true", "HX-Target": "synthesis-cells"}
    )
    body = second.content.decode()
    assert (
        body.lstrip().startswith('<section id="synthesis-cells"')
        and body.count("<code>airline.") == 2
    )
    status = client.get(url, headers={"HX-Request": "true", "HX-Target": "synthesis-status"})
    assert status.content.decode().lstrip().startswith('<section id="synthesis-status"')
    assert "synthesis-cells" not in status.content.decode()
    assert "synthesis-finished" in status["HX-Trigger"]  # stopped: the cells refresh once more
    # The job page links back to its run.
    job_page = client.get(reverse("job-detail", args=[run.job_id])).content.decode()
    assert f"synthesis run #{run.pk}" in job_page


def test_cancel_then_resume_with_a_raised_budget(ready: Project, admin_user: User) -> None:
    run = synthesis_start(**start_arguments(ready, max_calls=5))
    client = _client(admin_user)
    synthesis_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.job.status == JobStatus.BUDGET_SPENT
    url = reverse("synthesis-run-resume", args=["acme", run.pk])
    refused = client.post(url, {"max_calls": "5"})
    assert (
        refused.status_code == 400 and "Must be above the current limit" in refused.content.decode()
    )
    assert client.post(url, {"max_calls": "500"}).status_code == 302
    run.refresh_from_db()
    assert run.max_calls == 500 and run.job.status == JobStatus.QUEUED
    client.post(reverse("synthesis-run-cancel", args=["acme", run.pk]))
    assert Job.objects.get(pk=run.job_id).status == JobStatus.CANCELLED


def test_harness_jobs_export_and_trajectories_import(
    ready: Project, admin_user: User, fake_judge: FakeJudgeServer
) -> None:
    fake_judge.responder = Script(err_on={("t1", "warmth")})
    run = synthesis_start(**start_arguments(ready, mode="harness", retries=1))
    synthesis_run_execute(run_id=run.pk)  # steering only: every cell waits for its harness
    run.refresh_from_db()
    assert run.job.status == JobStatus.SUCCEEDED and "Waiting for the harness" in run.job.stage
    # Each cell's first draw is open with its steering call and no rollout, none failed.
    assert _open_draws() == [(0, "pending", "", None, None, ["steer"])] * 6
    client = _client(admin_user)
    export = client.get(reverse("synthesis-harness-jobs", args=["acme", run.pk]))
    jobs = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert len(jobs) == 12 and {j["attempt"] for j in jobs} == {0}
    assert all(j["system_addition"].startswith("<behaviour>") for j in jobs)
    assert all(f"STEER-{j['level'].upper()}" in j["system_addition"] for j in jobs)
    upload = reverse("synthesis-harness-import", args=["acme", run.pk])

    def answer(job: dict[str, Any], **extra: Any) -> dict[str, Any]:
        quality = ["bad", "ok", "good"].index(job["level"])
        content = f"quality={quality} task={job['task']} seed=harness"
        return {"cell": job["cell"], "level": job["level"], "attempt": job["attempt"],
                "content": content, **extra}  # fmt: skip

    bad = [answer(jobs[0]), {**answer(jobs[1]), "attempt": 3}, {**answer(jobs[2]), "messages": []}]
    rejected = client.post(upload, {"file": _jsonl(bad)})
    html = rejected.content.decode()
    assert rejected.status_code == 400 and "nothing was imported" in html
    assert "no open job for cell" in html and "give exactly one of" in html
    assert _open_draws() == [(0, "pending", "", None, None, ["steer"])] * 6
    assert client.post(upload, {"file": _jsonl([answer(j) for j in jobs])}).status_code == 302
    run.refresh_from_db()
    assert run.job.status == JobStatus.QUEUED
    # While the run's job is active, a pass would not see an import: refused, nothing written.
    early = client.post(upload, {"file": _jsonl([answer(j) for j in jobs])})
    assert early.status_code == 400 and "the run is still going" in early.content.decode()
    synthesis_run_execute(run_id=run.pk)  # the cascade runs on the imported trajectories
    # The same file again changes nothing; an empty one is refused.
    assert client.post(upload, {"file": _jsonl([answer(j) for j in jobs])}).status_code == 302
    assert SynthesisDraw.objects.count() == 6
    blank = SimpleUploadedFile("blank.jsonl", b"\n\n", content_type="application/x-ndjson")
    empty = client.post(upload, {"file": blank})
    assert empty.status_code == 400 and "no trajectories in the file" in empty.content.decode()
    assert SynthesisDraw.objects.filter(outcome="kept").count() == 5
    # The vetoed cell owes its next attempt, with the same steering.
    export = client.get(reverse("synthesis-harness-jobs", args=["acme", run.pk]))
    again = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert {(j["cell"], j["attempt"]) for j in again} == {("airline.warmth.t1", 1)}
    assert {j["system_addition"] for j in again} <= {j["system_addition"] for j in jobs}
    assert client.post(upload, {"file": _jsonl([answer(j) for j in again])}).status_code == 302
    synthesis_run_execute(run_id=run.pk)
    assert SynthesisDraw.objects.filter(outcome="kept").count() == 6
    export = client.get(reverse("synthesis-harness-jobs", args=["acme", run.pk]))
    assert b"".join(export.streaming_content) == b""


def _open_draws() -> list[tuple[Any, ...]]:
    return [
        (d.retry, d.outcome, d.error, d.low_response_id, d.high_response_id, sorted(d.usage))
        for d in SynthesisDraw.objects.order_by("pk")
    ]


def _jsonl(records: list[dict[str, Any]]) -> SimpleUploadedFile:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    return SimpleUploadedFile("trajectories.jsonl", body, content_type="application/x-ndjson")


def test_who_may_do_what_on_a_run(
    ready: Project, admin_user: User, reviewer_user: User, outsider: User
) -> None:
    run = synthesis_start(**start_arguments(ready, mode="harness"))
    page = reverse("synthesis-run", args=["acme", run.pk])
    changes = [
        reverse("synthesis-run-cancel", args=["acme", run.pk]),
        reverse("synthesis-run-resume", args=["acme", run.pk]),
        reverse("synthesis-harness-import", args=["acme", run.pk]),
    ]
    jobs = reverse("synthesis-harness-jobs", args=["acme", run.pk])
    reviewer, stranger = _client(reviewer_user), _client(outsider)
    assert reviewer.get(page).status_code == 200
    assert reviewer.get(jobs).status_code == 403  # the export holds the steering text
    assert all(reviewer.post(url).status_code == 403 for url in changes)
    assert stranger.get(page).status_code == 404
    assert all(stranger.post(url).status_code == 404 for url in changes)
    assert Job.objects.get(pk=run.job_id).status == JobStatus.QUEUED  # nothing was cancelled
    # The harness pages exist for harness runs only.
    single = synthesis_start(**start_arguments(ready, name="plain"))
    admin = _client(admin_user)
    assert admin.get(reverse("synthesis-harness-jobs", args=["acme", single.pk])).status_code == 404


def test_the_run_page_links_its_synthesis_pages_and_the_funnel_links_back(
    ready: Project, admin_user: User
) -> None:
    run = synthesis_start(**start_arguments(ready))
    synthesis = run.synthesis
    client = _client(admin_user)
    page = client.get(reverse("synthesis-run", args=["acme", run.pk])).content.decode()
    funnel = reverse("synthesis-funnel", args=["acme"]) + f"?synthesis={synthesis.external_id}"
    validation = reverse("synthesis-validation", args=["acme", synthesis.pk])
    sweeps = reverse("synthesis-sweeps", args=["acme"]) + f"?synthesis={synthesis.pk}"
    for link in (funnel, validation, sweeps):
        assert f'href="{link}"' in page
    # Each link leads to that synthesis: its funnel (linking back), its validation, the sweep
    # form with it chosen.
    back = f'href="{reverse("synthesis-run", args=["acme", run.pk])}"'
    assert back in client.get(funnel).content.decode()
    assert synthesis.external_id in client.get(validation).content.decode()
    form = client.get(sweeps).content.decode()
    assert f'<option value="{synthesis.pk}" selected>' in form
    # A synthesis imported (no run here) has no run to link to.
    Synthesis.objects.create(project=ready, external_id="elsewhere", judges=["j"])
    imported = client.get(reverse("synthesis-funnel", args=["acme"]) + "?synthesis=elsewhere")
    assert imported.status_code == 200 and "Generated here" not in imported.content.decode()
