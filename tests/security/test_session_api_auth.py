"""The session API takes no Basic auth: a password sent with every request would skip the login
throttle and CSRF. Session requests must carry the CSRF token. The reward API's own Basic form
(the token as the password, tests/graders/test_reward_api.py) is unaffected."""

import base64

from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from labeling.models import Project, Task

TASK_LINE = b'{"type": "task", "id": "planted", "prompt": "p"}\n'


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def test_basic_auth_with_a_members_password_is_refused(project: Project, admin_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    header = basic("ada", "pw-for-tests-1")
    listing = client.get(reverse("api-tasks", args=["acme"]), HTTP_AUTHORIZATION=header)
    assert listing.status_code in (401, 403)
    # A cross-site form cannot read the answer, but a write without a CSRF token must not land.
    upload = client.post(
        reverse("api-import", args=["acme"]),
        {"file": SimpleUploadedFile("f.jsonl", TASK_LINE)},
        HTTP_AUTHORIZATION=header,
    )
    assert upload.status_code in (401, 403)
    assert not Task.objects.filter(project=project).exists()


def test_a_session_write_needs_the_csrf_token(project: Project, admin_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    url = reverse("api-import", args=["acme"])
    refused = client.post(url, {"file": SimpleUploadedFile("f.jsonl", TASK_LINE)})
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    assert not Task.objects.filter(project=project).exists()

    client.get(reverse("project-list"))  # sets the CSRF cookie, as any page does
    accepted = client.post(
        url,
        {"file": SimpleUploadedFile("f.jsonl", TASK_LINE)},
        HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value,
    )
    assert accepted.status_code in (200, 201), accepted.content
    assert Task.objects.filter(project=project, external_id="planted").exists()
