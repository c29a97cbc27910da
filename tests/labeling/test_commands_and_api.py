import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from labeling.models import Job, Project, Task
from tests.labeling.helpers import basic_records, write_jsonl


def test_import_command_creates_the_project_and_reports_counts(db: None, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", basic_records())
    out = io.StringIO()
    call_command("import_jsonl", str(path), project="fresh", create=True, json=True, stdout=out)
    assert json.loads(out.getvalue())["counts"]["response"] == 4
    assert Task.objects.filter(project__slug="fresh").count() == 2


def test_import_command_fails_with_one_line_reasons(db: None, tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        call_command(
            "import_jsonl", str(write_jsonl(tmp_path / "a.jsonl", basic_records())), project="nope"
        )
    Project.objects.create(slug="p", name="P")
    bad = write_jsonl(tmp_path / "b.jsonl", ['{"type": "task"}'])
    with pytest.raises(CommandError, match=r"2 problem\(s\) on 1 line\(s\); nothing was imported"):
        call_command("import_jsonl", str(bad), project="p")
    assert f"{bad}:line 1, id: Field required" in capsys.readouterr().err
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_jsonl", str(tmp_path / "missing.jsonl"), project="p")


def test_assign_splits_command_prints_counts(project: Project, tmp_path: Path) -> None:
    call_command(
        "import_jsonl", str(write_jsonl(tmp_path / "a.jsonl", basic_records())), project="acme"
    )
    out = io.StringIO()
    call_command(
        "assign_splits",
        project="acme",
        meta=0.5,
        selection=0,
        train=0,
        eval=0.5,
        json=True,
        stdout=out,
    )
    assert json.loads(out.getvalue()) == {
        "airline": {"meta": 1, "selection": 0, "train": 0, "eval": 0},
        "legal": {"meta": 1, "selection": 0, "train": 0, "eval": 0},
    }
    with pytest.raises(CommandError, match="add up to 1"):
        call_command("assign_splits", project="acme", meta=0.9)


@pytest.fixture
def api(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def test_api_import_reports_every_bad_line_as_json(project: Project, api: Client) -> None:
    data = b'{"type": "task", "id": "a", "prompt": "p"}\n{"type": "score", "response": "zz", "value": 0.5}\n'
    response = api.post(
        reverse("api-import", args=["acme"]), {"file": SimpleUploadedFile("f.jsonl", data)}
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "line": 2,
            "field": "response",
            "message": "response 'zz' not found in this file or the project",
        }
    ]
    assert Task.objects.count() == 0


def test_api_import_of_a_large_file_returns_a_job(
    project: Project, api: Client, settings: Any, tmp_path: Path
) -> None:
    settings.IMPORT_INLINE_MAX_BYTES = 10
    settings.MEDIA_ROOT = tmp_path
    data = write_jsonl(tmp_path / "a.jsonl", basic_records()).read_bytes()
    response = api.post(
        reverse("api-import", args=["acme"]), {"file": SimpleUploadedFile("f.jsonl", data)}
    )
    assert response.status_code == 202
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.kind, job.status, job.params["bytes"]) == ("import", "queued", len(data))
    assert api.get(reverse("api-job", args=[job.pk])).json()["status"] == "queued"


def test_api_import_refuses_an_oversized_file_and_a_missing_one(
    project: Project, api: Client, settings: Any
) -> None:
    settings.IMPORT_MAX_FILE_BYTES = 5
    url = reverse("api-import", args=["acme"])
    assert api.post(url, {"file": SimpleUploadedFile("f.jsonl", b"0123456789")}).status_code == 413
    assert api.post(url, {}).status_code == 400


def test_api_tasks_are_paginated_and_filtered(
    project: Project, api: Client, tmp_path: Path
) -> None:
    call_command(
        "import_jsonl", str(write_jsonl(tmp_path / "a.jsonl", basic_records())), project="acme"
    )
    body = api.get(reverse("api-tasks", args=["acme"]), {"domain": "airline"}).json()
    assert (
        body["count"] == 1
        and body["results"][0]["id"] == "t1"
        and body["results"][0]["responses"] == 2
    )


def test_django_admin_works_for_staff(db: None) -> None:
    staff = User.objects.create_superuser(username="root", password="pw-for-tests-1")
    client = Client()
    client.force_login(staff)
    assert client.get("/admin/labeling/preference/").status_code == 200
    assert client.get("/admin/labeling/task/").status_code == 200
