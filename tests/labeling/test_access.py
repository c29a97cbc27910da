"""The role-by-endpoint matrix: every page and API endpoint, every role, and strangers."""

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.jobs import job_create
from labeling.models import Membership, Project, Role
from tests.labeling.helpers import basic_records, write_jsonl

ROLES = ("admin", "expert", "reviewer", "outsider", "anonymous")


@pytest.fixture
def world(project: Project, tmp_path: Path, outsider: User) -> dict[str, Any]:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    users = {"outsider": outsider}
    for role in (Role.ADMIN, Role.EXPERT, Role.REVIEWER):
        users[role] = User.objects.create_user(username=f"u-{role}", password="pw-for-tests-1")
        Membership.objects.create(user=users[role], project=project, role=role)
    job = job_create(kind="import", project=project, user=users[Role.ADMIN])
    return {"project": project, "users": users, "job": job}


def client_for(world: dict[str, Any], role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(world["users"][role])
    return client


def upload() -> dict[str, Any]:
    return {
        "file": SimpleUploadedFile("a.jsonl", b'{"type": "task", "id": "new", "prompt": "p"}\n')
    }


# (name, method, url builder, body, expected status per role in ROLES order)
PAGES = [
    ("overview", "get", lambda w: reverse("project-overview", args=["acme"]), None, (200, 200, 200, 404, 302)),
    ("tasks", "get", lambda w: reverse("task-list", args=["acme"]), None, (200, 200, 200, 404, 302)),
    ("task", "get", lambda w: reverse("task-detail", args=["acme", "t1"]), None, (200, 200, 200, 404, 302)),
    ("import page", "get", lambda w: reverse("import", args=["acme"]), None, (200, 403, 403, 404, 302)),
    ("import post", "post", lambda w: reverse("import", args=["acme"]), upload, (302, 403, 403, 404, 302)),
    ("export", "get", lambda w: reverse("export", args=["acme"]), None, (200, 403, 200, 404, 302)),
    ("splits page", "get", lambda w: reverse("splits", args=["acme"]), None, (200, 200, 200, 404, 302)),
    ("splits post", "post", lambda w: reverse("splits", args=["acme"]),
     lambda: {"meta": 0.25, "selection": 0.25, "train": 0.25, "eval": 0.25, "seed": 1}, (200, 403, 403, 404, 302)),
    ("job", "get", lambda w: reverse("job-detail", args=[w["job"].pk]), None, (200, 200, 200, 404, 302)),
    ("job cancel", "post", lambda w: reverse("job-cancel", args=[w["job"].pk]), None, (302, 403, 403, 404, 302)),
    ("api project", "get", lambda w: reverse("api-project", args=["acme"]), None, (200, 200, 200, 404, 403)),
    ("api tasks", "get", lambda w: reverse("api-tasks", args=["acme"]), None, (200, 200, 200, 404, 403)),
    ("api task", "get", lambda w: reverse("api-task", args=["acme", "t1"]), None, (200, 200, 200, 404, 403)),
    ("api import", "post", lambda w: reverse("api-import", args=["acme"]), upload, (200, 403, 403, 404, 403)),
    ("api export", "get", lambda w: reverse("api-export", args=["acme"]), None, (200, 403, 200, 404, 403)),
    ("api splits", "post", lambda w: reverse("api-splits", args=["acme"]),
     lambda: {"fractions": {"meta": 0.5, "eval": 0.5}}, (200, 403, 403, 404, 403)),
    ("api job", "get", lambda w: reverse("api-job", args=[w["job"].pk]), None, (200, 200, 200, 404, 403)),
    ("api job cancel", "post", lambda w: reverse("api-job-cancel", args=[w["job"].pk]), None, (200, 403, 403, 404, 403)),
]  # fmt: skip


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("name", "method", "url", "body", "expected"), PAGES, ids=[p[0] for p in PAGES]
)
def test_access_matrix(
    world: dict[str, Any],
    role: str,
    name: str,
    method: str,
    url: Any,
    body: Any,
    expected: tuple[int, ...],
) -> None:
    client = client_for(world, role)
    data = body() if body else None
    if name.startswith("api") and method == "post" and not callable(getattr(data, "get", None)):
        data = None
    if name in {"api splits"}:
        response = client.post(url(world), data, content_type="application/json")
    else:
        response = getattr(client, method)(url(world), data or {})
    assert response.status_code == expected[ROLES.index(role)], response.content[:300]


def test_outsider_never_sees_another_projects_data(world: dict[str, Any]) -> None:
    client = client_for(world, "outsider")
    listing = client.get(reverse("project-list"))
    assert b"Acme" not in listing.content
    assert client.get(reverse("api-projects")).json() == [
        {"slug": "other", "name": "Other", "role": "admin", "tasks": 0}
    ]
