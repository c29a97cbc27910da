"""In-app notifications: a user is told when a job they started stops (it finished, failed,
stopped on its budget, or someone else cancelled it), in the list behind the top bar's badge,
and by email when settings.NOTIFY_BY_EMAIL is on and they have an address."""

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from labeling.job_words import kind_words, status_words
from labeling.models import Job, JobStatus, Notification

logger = logging.getLogger(__name__)
TEXT_CHARS = Notification._meta.get_field("text").max_length or 300


def notify_job_stopped(*, job_id: int) -> Notification | None:
    """Tell the creator of job `job_id` how it ended, once it has. labeling.jobs calls it when
    the job moves from queued or running to a final status, so each stop tells them once.
    Nobody is told of a job nobody started, nor of a cancel they asked for themselves."""
    job = Job.objects.select_related("project", "created_by", "cancel_requested_by").get(pk=job_id)
    user = job.created_by
    if user is None or job.is_active:
        return None
    if job.status == JobStatus.CANCELLED and job.cancel_requested_by_id == user.pk:
        return None
    where = f" in {job.project.name}" if job.project else ""
    text = f"{kind_words(job.kind)} #{job.pk}{where}: {status_words(job, now=timezone.now())}"
    if len(text) > TEXT_CHARS:
        text = text[: TEXT_CHARS - 1] + "…"
    notification = Notification.objects.create(user=user, job=job, text=text)
    if settings.NOTIFY_BY_EMAIL and user.email and user.is_active:
        transaction.on_commit(lambda: _email(notification))
    return notification


def _email(notification: Notification) -> None:
    """Send the notification by email; a mail server that fails loses the email, not the
    notification (nor the job's finish, which this runs after)."""
    job_url = reverse("job-detail", args=[notification.job_id])
    body = (
        f"{notification.text}\n\n"
        f"The job's page: {settings.SITE_URL}{job_url}\n"
        f"All your notifications: {settings.SITE_URL}{reverse('notifications')}\n"
    )
    try:
        send_mail(
            subject=notification.text[:120],
            message=body,
            from_email=None,
            recipient_list=[notification.user.email],
        )
    except Exception:
        logger.exception("notification %s: the email was not sent", notification.pk)


def unread_count(*, user: Any) -> int:
    return Notification.objects.filter(user=user, read_at__isnull=True).count()


def notifications_of(*, user: Any) -> QuerySet[Notification]:
    """The user's notifications, newest first, with their jobs."""
    return Notification.objects.filter(user=user).select_related("job")


def notifications_mark_read(*, user: Any, ids: Iterable[int] | None = None) -> int:
    """Mark the user's unread notifications read (only those in `ids` when given); how many."""
    unread = Notification.objects.filter(user=user, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=list(ids))
    return unread.update(read_at=timezone.now())
