"""A job finishing as the worker finishes it, seen in a real browser: the top bar's badge
picks it up from the job page's poll (and on the next page load), and the notifications page
lists it, reached with the mouse and with the keyboard."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from labeling.jobs import job_claim, job_create, job_finish, job_progress
from labeling.models import Job, JobStatus, Project, Role
from tests.browser import logged_in_page
from tests.conftest import member

pytestmark = pytest.mark.django_db(transaction=True)


def running_job(project: Project, user: User, kind: str) -> Job:
    job = job_create(kind=kind, project=project, user=user)
    claimed = job_claim(job_id=job.pk)
    assert claimed is not None
    job_progress(job=claimed, stage="Grading", done=3, total=10)
    return claimed


def tab_to(page: Any, element_id: str, limit: int = 60) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} never took the focus")


def test_a_finished_job_shows_on_the_badge_and_in_the_list(browser: Any, live_server: Any) -> None:
    project = Project.objects.create(slug="acme", name="Acme")
    ada = member(project, "ada", Role.ADMIN)
    search = running_job(project, ada, "search")
    page = logged_in_page(browser, live_server, ada)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))

    page.goto(f"{live_server.url}/jobs/{search.pk}/")
    badge = page.locator("#notifications-badge")
    expect(badge).to_have_text("Notifications")
    expect(page.locator("#job-status")).to_contain_text("Running: 3 of 10")
    job_finish(job=search, status=JobStatus.SUCCEEDED)  # as the worker does
    # The job page's poll sees the finish and the badge looks again: no reload.
    expect(page.locator("#job-status")).to_contain_text("Succeeded")
    expect(badge.locator(".badge")).to_have_text("1")
    expect(badge).to_have_attribute("aria-label", "Notifications: 1 unread")

    badge.click()  # the mouse
    expect(page).to_have_url(f"{live_server.url}/notifications/")
    listed = page.locator("ul.notifications li")
    expect(listed).to_have_count(1)
    expect(listed.first).to_contain_text(f"Grader search #{search.pk} in Acme: Succeeded")
    expect(page.locator("#notifications-badge .badge")).to_have_count(0)  # read once shown

    # Another job fails while the user is elsewhere: the next page load shows it.
    audit = running_job(project, ada, "audit")
    page.goto(f"{live_server.url}/")
    expect(page.locator("#notifications-badge .badge")).to_have_count(0)
    job_finish(job=audit, status=JobStatus.FAILED, error="RuntimeError: judge down\ntrace")
    page.goto(f"{live_server.url}/")
    expect(page.locator("#notifications-badge .badge")).to_have_text("1")

    tab_to(page, "notifications-badge")  # the keyboard
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/notifications/")
    newest = page.locator("ul.notifications li").first
    expect(newest).to_contain_text(
        f"Rubric audit #{audit.pk} in Acme: Failed: RuntimeError: judge down"
    )
    expect(newest.locator(".badge")).to_have_text("New")
    expect(page.locator("ul.notifications li")).to_have_count(2)
    link = newest.get_by_role("link")
    link.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/jobs/{audit.pk}/")
    expect(page.locator("#job-status")).to_contain_text("Failed: RuntimeError: judge down")
    assert not problems, problems
    assert not page.dialogs_seen
