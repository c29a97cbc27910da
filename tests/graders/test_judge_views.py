"""The Judges page's admin actions: edit (what decides a judge's answers is fixed once runs
used the endpoint), make default, delete (refused while anything refers to the endpoint)."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import GradingRun, JudgeEndpoint, SearchRun
from graders.services import metagrader_register
from labeling.models import Job, Project, Task

pytestmark = pytest.mark.django_db

SETTINGS = {"base_url": "https://api.example.com/v1", "model": "gpt-x", "temperature": 0,
            "max_tokens": 512, "max_concurrency": 16, "timeout_s": 60, "price_in_per_mtok": 1,
            "price_out_per_mtok": 2, "response_format": "json_schema"}  # fmt: skip


def endpoint(project: Project, name: str, **changes: Any) -> JudgeEndpoint:
    return JudgeEndpoint.objects.create(project=project, name=name, **(SETTINGS | changes))


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(name: str, judge: JudgeEndpoint) -> str:
    return reverse(name, args=[judge.project.slug, judge.pk])


def used_by_a_run(judge: JudgeEndpoint) -> None:
    grader = metagrader_register(
        project=judge.project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    job = Job.objects.create(project=judge.project, kind="grading")
    GradingRun.objects.create(project=judge.project, metagrader=grader, endpoint=judge, job=job)


def form(judge: JudgeEndpoint, **changes: Any) -> dict[str, Any]:
    return {"name": judge.name, **SETTINGS, "is_default": ""} | changes


def test_an_unused_endpoint_can_be_edited_in_full(project: Project, admin_user: User) -> None:
    judge = endpoint(project, "gpt")
    page = client_for(admin_user).get(url("judge-edit", judge)).content.decode()
    assert 'name="model"' in page and "Fixed:" not in page

    saved = client_for(admin_user).post(url("judge-edit", judge), form(judge, model="gpt-y"))

    assert saved.status_code == 302 and saved["Location"] == reverse("judges", args=["acme"])
    judge.refresh_from_db()
    assert judge.model == "gpt-y"


def test_a_used_endpoint_keeps_what_decides_its_answers(project: Project, admin_user: User) -> None:
    judge = endpoint(project, "gpt")
    used_by_a_run(judge)
    page = client_for(admin_user).get(url("judge-edit", judge)).content.decode()
    assert "Fixed: 1 grading run used this endpoint." in page

    changes = {"name": "gpt-prod", "model": "gpt-y", "base_url": "https://other.example/v1",
               "temperature": 1, "price_in_per_mtok": 3, "max_concurrency": 4}  # fmt: skip
    saved = client_for(admin_user).post(url("judge-edit", judge), form(judge, **changes))

    assert saved.status_code == 302
    judge.refresh_from_db()
    assert (judge.name, judge.price_in_per_mtok, judge.max_concurrency) == ("gpt-prod", 3, 4)
    assert (judge.model, judge.base_url, judge.temperature) == (
        "gpt-x",
        "https://api.example.com/v1",
        0,
    )


def test_make_default_moves_the_default(project: Project, admin_user: User) -> None:
    first = endpoint(project, "first", is_default=True)
    second = endpoint(project, "second")

    client_for(admin_user).post(url("judge-default", second))

    assert list(JudgeEndpoint.objects.filter(is_default=True)) == [second]
    edited = client_for(admin_user).post(url("judge-edit", first), form(first, is_default="on"))
    assert edited.status_code == 302
    assert list(JudgeEndpoint.objects.filter(is_default=True)) == [first]


def test_delete_removes_an_unused_endpoint_and_refuses_a_used_one(
    project: Project, admin_user: User
) -> None:
    unused, used = endpoint(project, "unused"), endpoint(project, "used")
    used_by_a_run(used)
    admin = client_for(admin_user)
    listing = admin.get(reverse("judges", args=["acme"])).content.decode()
    assert url("judge-delete", unused) in listing  # offered only where it can succeed
    assert url("judge-delete", used) not in listing and ">in use</span>" in listing

    admin.post(url("judge-delete", unused))
    refused = admin.post(url("judge-delete", used), follow=True).content.decode()

    assert list(JudgeEndpoint.objects.values_list("name", flat=True)) == ["used"]
    assert "Judge used was not deleted: 1 grading run used it" in refused
    assert Task.objects.count() == 0  # nothing else went with it


def test_only_the_projects_admins_change_judges(
    project: Project, reviewer_user: User, outsider: User, admin_user: User
) -> None:
    judge = endpoint(project, "gpt")
    for user, status in ((reviewer_user, 403), (outsider, 404)):
        client = client_for(user)
        assert client.get(url("judge-edit", judge)).status_code == status
        assert client.post(url("judge-edit", judge), form(judge, model="y")).status_code == status
        assert client.post(url("judge-default", judge)).status_code == status
        assert client.post(url("judge-delete", judge)).status_code == status
    judge.refresh_from_db()
    assert judge.model == "gpt-x" and not judge.is_default
    listing = client_for(reviewer_user).get(reverse("judges", args=["acme"])).content.decode()
    assert "Make default" not in listing and url("judge-edit", judge) not in listing
    admin_listing = client_for(admin_user).get(reverse("judges", args=["acme"])).content.decode()
    assert "Make default" in admin_listing and url("judge-edit", judge) in admin_listing


def test_every_kind_of_use_keeps_an_endpoint_and_is_named(
    project: Project, admin_user: User
) -> None:
    from reviews.models import AuditRun

    judged, proposed, audited, free = (endpoint(project, n) for n in ("a", "b", "c", "free"))

    def job(**params: Any) -> Job:
        # Active, so only the run it belongs to may count it (not a second time as a job).
        return Job.objects.create(project=project, kind="search", params=params)

    SearchRun.objects.create(project=project, job=job(endpoint=judged.pk), kind="scalar",
                             mode="structured", endpoint=judged, proposer=proposed, n=1)  # fmt: skip
    AuditRun.objects.create(project=project, job=job(endpoint=audited.pk), endpoint=audited)
    Job.objects.create(project=project, kind="rubric_generation", params={"endpoint": audited.pk})
    listing = client_for(admin_user).get(reverse("judges", args=["acme"])).content.decode()

    assert listing.count(">in use</span>") == 3 and url("judge-delete", free) in listing
    for judge, words in ((judged, "1 search"), (proposed, "1 search"),
                         (audited, "1 audit and 1 job at work")):  # fmt: skip
        refused = client_for(admin_user).post(url("judge-delete", judge), follow=True)
        assert f"Judge {judge.name} was not deleted: {words} used it" in refused.content.decode()
    assert JudgeEndpoint.objects.count() == 4


def test_a_judge_a_queued_job_names_is_not_deleted(project: Project, admin_user: User) -> None:
    judge = endpoint(project, "writer")
    Job.objects.create(project=project, kind="rubric_generation", params={"endpoint": judge.pk})
    listing = client_for(admin_user).get(reverse("judges", args=["acme"])).content.decode()
    assert url("judge-delete", judge) not in listing  # the page knows it is in use

    refused = client_for(admin_user).post(url("judge-delete", judge), follow=True)

    assert "Judge writer was not deleted: 1 job at work used it" in refused.content.decode()
    assert JudgeEndpoint.objects.filter(pk=judge.pk).exists()
    Job.objects.update(status="succeeded")
    client_for(admin_user).post(url("judge-delete", judge))
    assert not JudgeEndpoint.objects.filter(pk=judge.pk).exists()  # finished jobs keep no hold


def test_a_run_started_while_the_form_was_open_keeps_the_model(
    project: Project, admin_user: User
) -> None:
    judge = endpoint(project, "gpt")
    admin = client_for(admin_user)
    assert "Fixed:" not in admin.get(url("judge-edit", judge)).content.decode()
    used_by_a_run(judge)  # meanwhile

    page = admin.post(url("judge-edit", judge), form(judge, model="gpt-y", name="renamed"))

    # The fields were built fixed for this request, so the post cannot change the model.
    judge.refresh_from_db()
    assert page.status_code == 302 and (judge.name, judge.model) == ("renamed", "gpt-x")


def test_a_run_started_between_the_form_and_the_save_is_seen_under_the_lock(
    project: Project, admin_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graders import judge_views

    judge = endpoint(project, "gpt")
    real_uses = judge_views._uses
    calls = []

    def uses_later(endpoint: JudgeEndpoint) -> str:
        # Nothing has used the judge when the form is made; a run starts right after.
        calls.append(endpoint.pk)
        if len(calls) == 1:
            used_by_a_run(judge)
            return ""
        return real_uses(endpoint)

    monkeypatch.setattr(judge_views, "_uses", uses_later)

    page = client_for(admin_user).post(url("judge-edit", judge), form(judge, model="gpt-y"))

    assert page.status_code == 400
    assert "Not saved: 1 grading run used this endpoint meanwhile" in page.content.decode()
    judge.refresh_from_db()
    assert judge.model == "gpt-x"


def test_a_running_grading_job_counts_once_as_its_run(project: Project, admin_user: User) -> None:
    judge = endpoint(project, "gpt")
    used_by_a_run(judge)
    Job.objects.filter(kind="grading").update(status="running", params={"endpoint": judge.pk})

    refused = client_for(admin_user).post(url("judge-delete", judge), follow=True)

    message = "Judge gpt was not deleted: 1 grading run used it, and their records name it."
    assert message in refused.content.decode()
