"""The jobs list: filters, pages, rows in words, and who may see which jobs."""

import re
from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from labeling.jobs import job_create, job_finish
from labeling.models import Job, JobStatus, Membership, Project, Role
from tests.conftest import member


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_rows_in_words(project: Project, admin_user: User, expert_user: User) -> None:
    now = timezone.now()
    running = job_create(kind="search", project=project, user=admin_user)
    Job.objects.filter(pk=running.pk).update(
        status=JobStatus.RUNNING, done=340, total=1000, started_at=now - timedelta(seconds=120)
    )
    failed = job_create(kind="import", project=project, user=expert_user)
    Job.objects.filter(pk=failed.pk).update(started_at=now - timedelta(seconds=252), cost=0.0123)
    job_finish(job=failed, status=JobStatus.FAILED, error="ValueError: line 3\nTraceback")
    spent = job_create(kind="audit", project=project)
    job_finish(job=spent, status=JobStatus.BUDGET_SPENT, error="The budget is spent")
    html = client_for(expert_user).get(reverse("jobs", args=["acme"])).content.decode()
    assert f'<a href="/jobs/{running.pk}/">Grader search #{running.pk}</a>' in html
    assert "Running: 340 of 1,000, about 4 min left" in html
    assert '<progress max="1000" value="340">34%</progress>' in html
    assert "Failed: ValueError: line 3" in html and "Traceback" not in html
    assert "Stopped: budget spent" in html
    row = html[html.index(f"Import #{failed.pk}") :].split("</tr>")[0]
    assert "<td>eve</td>" in row and "<td>4 min</td>" in row and "$0.0123" in row
    # Newest first.
    assert (
        html.index(f"#{spent.pk}<") < html.index(f"#{failed.pk}<") < html.index(f"#{running.pk}<")
    )


def test_filters_by_kind_status_and_who(
    project: Project, admin_user: User, expert_user: User
) -> None:
    searches = [job_create(kind="search", project=project, user=admin_user) for _ in range(2)]
    job_finish(job=searches[0], status=JobStatus.SUCCEEDED)
    mine = job_create(kind="import", project=project, user=expert_user)
    client = client_for(admin_user)
    url = reverse("jobs", args=["acme"])

    def listed(**query: object) -> set[int]:
        html = client.get(url, query).content.decode()
        return {job.pk for job in (*searches, mine) if f'href="/jobs/{job.pk}/"' in html}

    assert listed() == {searches[0].pk, searches[1].pk, mine.pk}
    assert listed(kind="search") == {searches[0].pk, searches[1].pk}
    assert listed(kind="search", status="queued") == {searches[1].pk}
    assert listed(started_by=expert_user.pk) == {mine.pk}
    assert listed(kind="nonsense") == listed()  # a stale filter is dropped, not an error
    form = client.get(url).content.decode()
    assert f'<option value="{expert_user.pk}">eve</option>' in form
    assert '<option value="rubric_generation">Rubric generation</option>' in form
    assert '<option value="budget_spent">Stopped: budget spent</option>' in form
    nothing = client.get(url, {"status": "failed"}).content.decode()
    assert "No jobs match these filters." in nothing
    fragment = client.get(url, {"kind": "import"}, headers={"HX-Request": "true"})
    assert fragment.content.decode().lstrip().startswith('<div id="job-table">')


def test_pages_of_25(project: Project, admin_user: User) -> None:
    jobs = [job_create(kind="grading", project=project, user=admin_user) for _ in range(27)]
    client = client_for(admin_user)
    first = client.get(reverse("jobs", args=["acme"])).content.decode()
    assert (
        "Page 1 of 2 · 27 jobs" in first and len(re.findall(r'<a href="/jobs/\d+/"', first)) == 25
    )
    assert f'href="/jobs/{jobs[0].pk}/"' not in first
    second = client.get(reverse("jobs", args=["acme"]), {"page": 2}).content.decode()
    assert (
        len(re.findall(r'<a href="/jobs/\d+/"', second)) == 2
        and f'href="/jobs/{jobs[0].pk}/"' in second
    )


def test_empty_state(project: Project, reviewer_user: User) -> None:
    html = client_for(reviewer_user).get(reverse("jobs", args=["acme"])).content.decode()
    assert "No jobs yet." in html


def test_nobody_sees_jobs_of_a_project_they_are_not_in(
    project: Project, admin_user: User, outsider: User
) -> None:
    ours = job_create(kind="search", project=project, user=admin_user)
    other = Project.objects.get(slug="other")
    theirs = job_create(kind="search", project=other, user=outsider)
    loose = job_create(kind="import", project=None, user=admin_user)  # a job of no project
    assert client_for(outsider).get(reverse("jobs", args=["acme"])).status_code == 404
    everything = client_for(outsider).get(reverse("jobs-all")).content.decode()
    assert f'href="/jobs/{theirs.pk}/"' in everything
    assert f'href="/jobs/{ours.pk}/"' not in everything
    assert f'href="/jobs/{loose.pk}/"' not in everything
    assert f'<option value="{admin_user.pk}">' not in everything  # nor who started them
    mine = client_for(admin_user).get(reverse("jobs-all")).content.decode()
    assert f'href="/jobs/{ours.pk}/"' in mine and f'href="/jobs/{loose.pk}/"' in mine
    assert f'href="/jobs/{theirs.pk}/"' not in mine
    assert '<a href="/p/acme/jobs/">Acme</a>' in mine  # each row names its project
    # In both: sees the jobs of both, as the job page shows them.
    both = member(other, "bea", Role.EXPERT)
    Membership.objects.create(user=both, project=project, role=Role.REVIEWER)
    seen = client_for(both).get(reverse("jobs-all")).content.decode()
    assert f'href="/jobs/{ours.pk}/"' in seen and f'href="/jobs/{theirs.pk}/"' in seen
    assert f'href="/jobs/{loose.pk}/"' not in seen
    for job in (ours, theirs):
        assert client_for(both).get(reverse("job-detail", args=[job.pk])).status_code == 200
    assert Client().get(reverse("jobs-all")).status_code == 302  # to the login


def test_the_job_page_says_its_status_and_pace_in_words(project: Project, admin_user: User) -> None:
    job = job_create(kind="search", project=project, user=admin_user)
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING,
        done=340,
        total=1000,
        started_at=timezone.now() - timedelta(seconds=120),
    )
    html = client_for(admin_user).get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "<h1>Search job #" in html
    assert "<b>Running: 340 of 1,000, about 4 min left</b>" in html
    assert "34% · 2.8 a second" in html
    assert '<a href="/p/acme/jobs/">All jobs of Acme</a>' in html
