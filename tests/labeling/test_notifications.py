"""Notifications of stopped jobs: written once per stop where the job stops, to its creator,
emailed when settings ask, counted in the top bar and listed on their page."""

import contextlib
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.jobs import (
    BudgetSpent,
    JobCancelled,
    job_budget_stop,
    job_cancel,
    job_claim,
    job_create,
    job_finish,
    job_requeue,
    job_run_leased,
)
from labeling.models import Job, JobStatus, Notification, Project, Role
from tests.conftest import member
from tests.test_settings import manage


def started_job(project: Project, user: User | None, kind: str = "search") -> Job:
    job = job_create(kind=kind, project=project, user=user)
    claimed = job_claim(job_id=job.pk)
    assert claimed is not None
    return claimed


def texts(user: User) -> list[str]:
    return list(Notification.objects.filter(user=user).values_list("text", flat=True))


def test_a_finished_job_tells_its_creator_once(project: Project, admin_user: User) -> None:
    job = started_job(project, admin_user)
    job_finish(job=job, status=JobStatus.SUCCEEDED, result={"n": 1})
    job_finish(job=job, status=JobStatus.SUCCEEDED, result={"n": 1})  # the same finish again
    assert texts(admin_user) == [f"Grader search #{job.pk} in Acme: Succeeded"]
    note = Notification.objects.get()
    assert note.job_id == job.pk and note.read_at is None


def test_a_second_delivery_of_a_leased_jobs_failure_tells_once(
    project: Project, admin_user: User
) -> None:
    job = job_create(kind="synthesis", project=project, user=admin_user)

    def work(job: Job, heartbeat: Any) -> dict[str, Any]:
        raise ValueError("the judge said no\nand more lines")

    for _ in range(2):  # the broker delivers the message again after the failure
        with contextlib.suppress(ValueError):
            job_run_leased(job_id=job.pk, work=work, resend=lambda _: None, cancelled="Cancelled.")
    assert texts(admin_user) == [
        f"Synthesis run #{job.pk} in Acme: Failed: ValueError: the judge said no"
    ]


def test_a_budget_stop_and_each_stop_after_a_resume_are_told(
    project: Project, admin_user: User
) -> None:
    job = started_job(project, admin_user, kind="audit")
    job_budget_stop(job=job, usage={"cost": 0.5, "calls": 10})

    # A resumed job that stops again is a new stop, told again.
    class Run:  # the run owning the job, as job_requeue sees it when no budget is raised
        pk, job_id = 1, job.pk

    assert job_requeue(row=Run())
    assert job_claim(job_id=job.pk) is not None
    job_finish(job=job, status=JobStatus.SUCCEEDED)
    assert texts(admin_user) == [
        f"Rubric audit #{job.pk} in Acme: Succeeded",
        f"Rubric audit #{job.pk} in Acme: Stopped: budget spent",
    ]


def test_a_leased_job_stopping_on_budget_is_told(project: Project, admin_user: User) -> None:
    job = job_create(kind="search", project=project, user=admin_user)

    def work(job: Job, heartbeat: Any) -> dict[str, Any]:
        raise BudgetSpent

    job_run_leased(job_id=job.pk, work=work, resend=lambda _: None, cancelled="Cancelled.")
    assert texts(admin_user) == [f"Grader search #{job.pk} in Acme: Stopped: budget spent"]


def test_cancels_are_told_only_when_someone_else_asked(
    project: Project, admin_user: User, expert_user: User
) -> None:
    own = job_create(kind="import", project=project, user=expert_user)
    job_cancel(job=own, by=expert_user)  # queued: stops at once, and they know
    assert Job.objects.get(pk=own.pk).status == JobStatus.CANCELLED
    queued = job_create(kind="import", project=project, user=expert_user)
    job_cancel(job=queued, by=admin_user)
    running = started_job(project, expert_user, kind="grading")
    job_cancel(job=running, by=admin_user)
    assert texts(expert_user) == [f"Import #{queued.pk} in Acme: Cancelled by ada"]

    # The running job stops at its worker's next progress report, as job_run_leased records it.
    def cancelled_work(job: Job, heartbeat: Any) -> dict[str, Any]:
        raise JobCancelled

    Job.objects.filter(pk=running.pk).update(heartbeat_at=None)  # its lease is takeable
    job_run_leased(job_id=running.pk, work=cancelled_work, resend=print, cancelled="Cancelled.")
    assert texts(expert_user)[0] == f"Grading run #{running.pk} in Acme: Cancelled by ada"
    superseded = started_job(project, expert_user, kind="rubric_generation")
    job_cancel(job=superseded, reason="Superseded by run #9.")  # nobody in particular asked
    job_finish(job=superseded, status=JobStatus.CANCELLED, error="Superseded by run #9.")
    assert texts(expert_user)[0] == f"Rubric generation #{superseded.pk} in Acme: Cancelled"
    assert not texts(admin_user)


def test_nobody_is_told_of_a_job_nobody_started(project: Project) -> None:
    job = started_job(project, None)
    job_finish(job=job, status=JobStatus.FAILED, error="boom")
    assert not Notification.objects.exists()


def test_email_when_settings_ask_and_the_user_has_an_address(
    project: Project, admin_user: User, expert_user: User, settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    settings.NOTIFY_BY_EMAIL, settings.SITE_URL = True, "https://wb.example.org"
    admin_user.email = "ada@example.org"
    admin_user.save()
    with django_capture_on_commit_callbacks(execute=True):
        job = started_job(project, admin_user)
        job_finish(job=job, status=JobStatus.SUCCEEDED)
        job_finish(job=started_job(project, expert_user), status=JobStatus.SUCCEEDED)  # no address
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert (
        sent.to == ["ada@example.org"]
        and sent.subject == f"Grader search #{job.pk} in Acme: Succeeded"
    )
    assert f"https://wb.example.org/jobs/{job.pk}/" in sent.body
    assert "https://wb.example.org/notifications/" in sent.body
    settings.NOTIFY_BY_EMAIL = False
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=started_job(project, admin_user), status=JobStatus.SUCCEEDED)
    assert len(mail.outbox) == 1 and Notification.objects.filter(user=admin_user).count() == 2


def test_a_failing_mail_server_loses_the_email_not_the_notification(
    project: Project, admin_user: User, settings: Any, django_capture_on_commit_callbacks: Any,
    caplog: Any,
) -> None:  # fmt: skip
    settings.NOTIFY_BY_EMAIL = True
    # A real SMTP backend at a port where nothing listens.
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend",
                                    "OPTIONS": {"host": "127.0.0.1", "port": 9, "timeout": 2}}}  # fmt: skip
    admin_user.email = "ada@example.org"
    admin_user.save()
    job = started_job(project, admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        job_finish(job=job, status=JobStatus.SUCCEEDED)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    assert Notification.objects.filter(user=admin_user).count() == 1
    assert "the email was not sent" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_finishing_at_once_tell_once() -> None:
    project = Project.objects.create(slug="race", name="Race")
    user = member(project, "rae", Role.ADMIN)
    job = started_job(project, user)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            barrier.wait()
            job_finish(job=job, status=JobStatus.SUCCEEDED)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert Notification.objects.filter(user=user).count() == 1


def finished(project: Project, user: User, n: int) -> list[Job]:
    jobs = [started_job(project, user) for _ in range(n)]
    for job in jobs:
        job_finish(job=job, status=JobStatus.SUCCEEDED)
    return jobs


def test_the_badge_counts_unread_with_one_query(project: Project, admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    url = reverse("project-list")
    html = client.get(url).content.decode()
    assert 'id="notifications-badge"' in html and "unread" not in html
    finished(project, admin_user, 3)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(url).content.decode()
    assert 'aria-label="Notifications: 3 unread"' in html and ">3</span>" in html
    touching = [q["sql"] for q in queries.captured_queries if "labeling_notification" in q["sql"]]
    assert len(touching) == 1 and "COUNT(" in touching[0].upper()
    # A partial without the top bar asks nothing of the notifications.
    job = Job.objects.first()
    assert job is not None
    with CaptureQueriesContext(connection) as queries:
        client.get(reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"})
    assert not [q for q in queries.captured_queries if "labeling_notification" in q["sql"]]
    badge = client.get(reverse("notifications-badge")).content.decode()
    assert badge.lstrip().startswith('<a id="notifications-badge"') and ">3</span>" in badge
    client.logout()  # in another tab: the badge's next poll changes nothing
    gone = client.get(reverse("notifications-badge"), headers={"HX-Request": "true"})
    assert gone.status_code == 204 and not gone.content


def test_a_stopped_jobs_status_fragment_asks_the_badge_to_look_again(
    project: Project, admin_user: User
) -> None:
    client = Client()
    client.force_login(admin_user)
    job = started_job(project, admin_user)
    url = reverse("job-detail", args=[job.pk])
    assert "HX-Trigger" not in client.get(url, headers={"HX-Request": "true"})
    job_finish(job=job, status=JobStatus.SUCCEEDED)
    assert client.get(url, headers={"HX-Request": "true"})["HX-Trigger"] == "job-stopped"


def test_the_notifications_page_lists_pages_and_marks_read(
    project: Project, admin_user: User, expert_user: User
) -> None:
    jobs = finished(project, admin_user, 22)
    finished(project, expert_user, 1)
    client = Client()
    client.force_login(admin_user)
    first = client.get(reverse("notifications")).content.decode()
    # Newest first, 20 a page, each linking to its job; shown ones are read from then on.
    assert first.index(f"#{jobs[-1].pk} ") < first.index(f"#{jobs[-2].pk} ")
    assert first.count('<li class="unread">') == 20 and "Page 1 of 2 · 22 notifications" in first
    assert f'href="/jobs/{jobs[-1].pk}/"' in first
    assert Notification.objects.filter(user=admin_user, read_at=None).count() == 2
    second = client.get(reverse("notifications"), {"page": 2}).content.decode()
    assert second.count('<li class="unread">') == 2 and f"#{jobs[0].pk} " in second
    # The page's own top bar counts what is still unread after this showing.
    again = client.get(reverse("notifications")).content.decode()
    assert '<li class="unread">' not in again and 'aria-label="Notifications:' not in again
    finished(project, admin_user, 1)
    response = client.post(reverse("notifications-read"), follow=True)
    assert "1 notification marked read." in response.content.decode()
    assert not Notification.objects.filter(user=admin_user, read_at=None).exists()
    # Nobody sees another's notifications.
    assert Notification.objects.filter(user=expert_user, read_at=None).count() == 1
    assert Client().get(reverse("notifications")).status_code == 302  # to the login
    client.force_login(expert_user)
    assert client.get(reverse("notifications")).content.decode().count("<li class=") == 1


def test_an_empty_notifications_page(admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    assert "No notifications yet." in client.get(reverse("notifications")).content.decode()
    assert client.get(reverse("notifications-read")).status_code == 405


def mail_settings(**env: str) -> str:
    show = (
        "from django.conf import settings; from django.core import mail; m = mail.mailers.default; "
        "print(type(m).__module__, getattr(m, 'host', ''), settings.NOTIFY_BY_EMAIL)"
    )
    result = manage("shell", "-v", "0", "-c", show, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_email_goes_out_once_a_mail_host_is_set() -> None:
    unset = {"EMAIL_HOST": "", "EMAIL_BACKEND": ""}  # (NOTIFY_BY_EMAIL is not set in tests)
    smtp = "django.core.mail.backends.smtp"
    assert mail_settings(**unset) == f"{smtp} localhost False"
    assert mail_settings(**{**unset, "EMAIL_HOST": "mail.example.org"}) == (
        f"{smtp} mail.example.org True"
    )
    console = "django.core.mail.backends.console.EmailBackend"
    assert mail_settings(**{**unset, "EMAIL_BACKEND": console, "NOTIFY_BY_EMAIL": "1"}) == (
        "django.core.mail.backends.console  True"
    )
