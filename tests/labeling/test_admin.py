"""Django admin for notifications: listed and readable, never added or rewritten there (the
job that stops writes them)."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import Notification

pytestmark = pytest.mark.django_db


def test_notifications_are_listed_read_only_and_cannot_be_added() -> None:
    root = User.objects.create_superuser("root", password="pw-for-tests-1")
    note = Notification.objects.create(user=root, text="Import <b>finished</b>.")
    client = Client()
    client.force_login(root)

    listing = client.get(reverse("admin:labeling_notification_changelist"))
    assert listing.status_code == 200
    assert "Import &lt;b&gt;finished&lt;/b&gt;." in listing.content.decode()
    assert client.get(reverse("admin:labeling_notification_add")).status_code == 403

    change_url = reverse("admin:labeling_notification_change", args=[note.pk])
    page = client.get(change_url).content.decode()
    assert 'name="text"' not in page and 'name="read_at_0"' in page
    client.post(
        change_url, {"text": "rewritten", "read_at_0": "2026-12-01", "read_at_1": "10:00:00"}
    )
    note.refresh_from_db()
    assert note.text == "Import <b>finished</b>." and note.read_at is not None
