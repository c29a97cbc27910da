"""A grading run stopped by its budget says so after a reload, everywhere ("Stopped: budget
spent", with the calls and cost at the stop), resumes with a higher budget from the stored
grades (only the remaining calls), refuses a budget that would stop it again with a field
error, and shows its grades while it runs (the run page polls them until the run ends)."""

import io
import re
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from graders.grading import grading_run_execute
from graders.models import Grade, GradingRun, JudgeEndpoint
from graders.search import search_run_execute, search_start, search_usage
from labeling.models import JobStatus, Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_grading import graded_project, judge, quality_responder, run_for

__all__ = ["graded_project", "judge"]  # fixtures, used by name

STOPPED = "Stopped: budget spent"


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def stopped_run(project: Project, endpoint: JudgeEndpoint) -> GradingRun:
    """A scalar run over 3 tasks of 3 responses (9 calls), stopped by a budget of 4 calls."""
    run = run_for(project, endpoint, "scalar", max_calls=4)
    assert grading_run_execute(run_id=run.pk)["status"] == "budget"
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_a_budget_stop_is_its_own_outcome_and_reads_so_after_a_reload(
    graded_project: Project, judge: JudgeEndpoint, admin_user: User
) -> None:
    run = stopped_run(graded_project, judge)
    assert run.job.status == "budget_spent" and run.usage["calls"] == 4
    admin = logged_in(admin_user)
    at_stop = "4 judge calls and $0.0000 at the stop"

    run_page = admin.get(reverse("grading-run", args=["acme", run.pk])).content.decode()
    assert f"Job #{run.job_id}: {STOPPED}" in run_page and "Failed" not in run_page
    job_page = admin.get(reverse("job-detail", args=[run.job_id])).content.decode()
    assert f"<b>{STOPPED}</b>" in job_page and at_stop in job_page
    status = admin.get(reverse("job-detail", args=[run.job_id]), headers={"HX-Request": "true"})
    assert f"<b>{STOPPED}</b>" in status.content.decode() and at_stop in status.content.decode()
    graders_page = admin.get(reverse("graders", args=["acme"])).content.decode()
    assert f"<td>{STOPPED}</td>" in graders_page


@pytest.mark.django_db
def test_resume_with_a_higher_budget_finishes_making_only_the_remaining_calls(
    graded_project: Project,
    judge: JudgeEndpoint,
    admin_user: User,
    fake_judge: FakeJudgeServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = stopped_run(graded_project, judge)
    page = logged_in(admin_user).get(reverse("grading-run", args=["acme", run.pk])).content
    assert b"Now 4; a higher limit" in page and b"Spent so far: 4 calls." in page
    with django_capture_on_commit_callbacks() as queued:
        response = logged_in(admin_user).post(
            reverse("grading-run-resume", args=["acme", run.pk]), {"max_calls": 20}
        )
    assert response.status_code == 302 and len(queued) == 1
    run.refresh_from_db()
    assert run.max_calls == 20 and run.job.status == JobStatus.QUEUED and not run.job.error

    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    run.refresh_from_db()
    # 9 responses, one call each: the 4 answered before the stop were neither asked again nor
    # graded again.
    assert fake_judge.call_count == 9 and run.usage["calls"] == 9
    assert Grade.objects.filter(run=run).count() == 9


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        ({"max_calls": 3}, "max_calls", "Must be above the current limit of 4."),
        ({}, "max_calls", "The limit of 4 is spent (4 calls): give a higher one to resume."),
        ({"max_calls": 2**31}, "max_calls", "less than or equal to 2147483647"),
        ({"max_calls": 20, "max_cost": "1e12"}, "max_cost", "less than or equal to 1000000"),
        ({"max_calls": 20, "max_cost": "inf"}, "max_cost", "Enter a number."),
    ],
)
def test_resume_with_an_invalid_budget_shows_a_field_error_and_changes_nothing(
    graded_project: Project,
    judge: JudgeEndpoint,
    admin_user: User,
    posted: dict[str, Any],
    field: str,
    message: str,
) -> None:
    run = stopped_run(graded_project, judge)
    response = logged_in(admin_user).post(
        reverse("grading-run-resume", args=["acme", run.pk]), posted
    )
    assert response.status_code == 400
    assert message in str(response.context["resume_form"].errors[field])
    assert message in response.content.decode()
    run.refresh_from_db()
    assert run.max_calls == 4 and run.job.status == JobStatus.BUDGET_SPENT


@pytest.mark.django_db
def test_manage_py_grade_resumes_with_a_new_budget_and_refuses_one_that_is_spent(
    graded_project: Project, judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = stopped_run(graded_project, judge)
    with pytest.raises(CommandError, match="--max-calls: Must be above the current limit of 4"):
        call_command("grade", project="acme", resume=run.pk, max_calls=4)
    with pytest.raises(CommandError, match="--max-calls: The limit of 4 is spent"):
        call_command("grade", project="acme", resume=run.pk)
    out = io.StringIO()
    call_command("grade", project="acme", resume=run.pk, max_calls=9, stdout=out)
    assert f"Grading run {run.pk} resumed as job {run.job_id}." in out.getvalue()
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert fake_judge.call_count == 9
    with pytest.raises(CommandError, match="only a stopped run"):
        call_command("grade", project="acme", resume=run.pk, max_calls=30)


@pytest.mark.django_db(transaction=True)
def test_the_grades_table_shows_the_grades_stored_while_the_run_goes(
    graded_project: Project, judge: JudgeEndpoint, admin_user: User, fake_judge: FakeJudgeServer
) -> None:
    """One task per chunk (max_concurrency 4): when the second task's first call arrives,
    the first task's three grades are stored, and the polled part of the page shows them."""
    JudgeEndpoint.objects.filter(pk=judge.pk).update(max_concurrency=4)
    run = run_for(graded_project, judge, "scalar")
    url = reverse("grading-run", args=["acme", run.pk])
    seen: dict[str, str] = {}

    def fetch() -> None:
        try:
            admin = logged_in(admin_user)
            seen["page"] = admin.get(url).content.decode()
            seen["fragment"] = (
                admin.get(url, headers={"HX-Request": "true"}).content.decode().strip()
            )
        finally:
            connection.close()

    def responder(body: dict[str, Any]) -> str:
        # Responses read "GOOD answer 0" and so on: the first call about a second task comes
        # once the first task's chunk is stored.
        task = re.findall(r"answer (\d)", str(body["messages"][-1]["content"]))[0]
        seen.setdefault("first task", task)
        if task != seen["first task"] and "page" not in seen:
            thread = threading.Thread(target=fetch)  # the ORM refuses the server's event loop
            thread.start()
            thread.join()
        return quality_responder(body)

    fake_judge.responder = responder
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"

    polling = f'<section id="run-live" hx-get="{url}" hx-trigger="every 2s"'
    assert polling in seen["page"] and seen["fragment"].startswith(polling)
    assert seen["fragment"].count('<a href="/p/acme/grades/') == 3  # the first task's responses
    assert "No grades yet" not in seen["fragment"]
    done = logged_in(admin_user).get(url, headers={"HX-Request": "true"}).content.decode().strip()
    assert done.startswith('<section id="run-live">')  # the run is over: no more polling
    assert done.count('<a href="/p/acme/grades/') == 9


@pytest.mark.django_db
def test_a_search_stopped_by_its_budget_reads_the_same_with_what_it_spent(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: User
) -> None:
    search = search_start(project=search_project, kind="scalar", mode="best_of_n",
                          endpoint=search_judge, n=3, seed=1, max_calls=12)  # fmt: skip
    assert search_run_execute(search_id=search.pk)["status"] == "budget"
    calls = int(search_usage(search)["calls"])
    page = logged_in(admin_user).get(reverse("search", args=["acme", search.pk])).content.decode()
    assert f"<b>{STOPPED}</b>" in page and "Failed" not in page
    assert f"The budget is spent: {calls} judge calls and $" in page and 0 < calls <= 12
    stopped_runs = GradingRun.objects.filter(search=search, job__status=JobStatus.BUDGET_SPENT)
    assert stopped_runs.count() == 1  # the candidate's run it stopped in
