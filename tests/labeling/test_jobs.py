import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.import_jobs import import_job_run, import_upload
from labeling.imports import ImportRejected
from labeling.jobs import job_cancel
from labeling.models import Job, JobStatus, Project, Task
from tests.conftest import wait_for
from tests.labeling.helpers import basic_records, write_jsonl


def big_upload(tmp_path: Path, records: list[Any]) -> tuple[io.BytesIO, int]:
    data = write_jsonl(tmp_path / "big.jsonl", records).read_bytes()
    return io.BytesIO(data), len(data)


@pytest.fixture
def small_inline_limit(settings: Any, tmp_path: Path) -> None:
    settings.IMPORT_INLINE_MAX_BYTES = 10
    settings.MEDIA_ROOT = tmp_path / "media"


def test_large_upload_becomes_a_job_that_runs_once(
    project: Project,
    admin_user: User,
    tmp_path: Path,
    small_inline_limit: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    upload, size = big_upload(tmp_path, basic_records())
    with django_capture_on_commit_callbacks() as callbacks:
        job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    assert isinstance(job, Job) and job.status == JobStatus.QUEUED and len(callbacks) == 1
    assert Task.objects.count() == 0
    stored = tmp_path / "media" / job.params["path"]
    assert stored.exists()  # kept in the project's storage until the job has read it
    assert import_job_run(job_id=job.pk) == {"job": job.pk, "status": "succeeded"}
    assert not stored.exists()
    job.refresh_from_db()
    assert job.result["counts"]["task"] == 2 and job.finished_at is not None
    assert job.result["summary"].startswith("Imported 16 lines: 1 dimension, 2 tasks, 4 responses")
    assert job.stage == "Writing records" and job.total == 16
    # A second delivery of the same message finds the job taken and does nothing.
    assert import_job_run(job_id=job.pk) == {"job": job.pk, "skipped": True}
    assert Task.objects.count() == 2


def test_a_failed_import_job_lists_the_bad_lines(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    upload, size = big_upload(tmp_path, [*basic_records(), "{nope"])
    job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    import_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.result["errors"] == [
        {"line": 17, "field": "(record)", "message": job.result["errors"][0]["message"]}
    ]
    assert Task.objects.count() == 0
    page = Client()
    page.force_login(admin_user)
    html = page.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "malformed JSON" in html and 'hx-trigger="every 1s"' not in html  # finished: no polling


def test_a_large_file_that_is_not_text_is_refused_before_any_job(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    path = tmp_path / "export.jsonl"
    path.write_bytes('{"type": "task", "id": "t", "prompt": "p"}\n'.encode("utf-16") * 50)
    with path.open("rb") as upload, pytest.raises(ImportRejected) as refused:
        import_upload(project=project, user=admin_user, upload=upload, size=path.stat().st_size)
    assert refused.value.errors[0].message.startswith("this is UTF-16 text (save it as UTF-8)")
    assert not Job.objects.exists() and not (tmp_path / "media").exists()


def test_cancelled_queued_job_never_runs(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    upload, size = big_upload(tmp_path, basic_records())
    job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    job_cancel(job=job)
    assert import_job_run(job_id=job.pk)["skipped"]
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and Task.objects.count() == 0


def test_job_page_polls_while_active_and_serves_its_fragment(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    upload, size = big_upload(tmp_path, basic_records())
    job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    client = Client()
    client.force_login(admin_user)
    full = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert 'hx-trigger="every 1s"' in full and "<html" in full and "Cancel" in full
    fragment = client.get(
        reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"}
    ).content.decode()
    assert fragment.lstrip().startswith('<section id="job-status"') and "<html" not in fragment


@pytest.mark.worker
def test_real_worker_runs_an_import_enqueued_on_commit(
    celery_worker_process: str, tmp_path: Path, settings: Any
) -> None:
    settings.IMPORT_INLINE_MAX_BYTES = 10
    project = Project.objects.create(slug="live", name="Live")
    user = User.objects.create_user(username="live-admin", password="pw-for-tests-1")
    upload, size = big_upload(tmp_path, basic_records())
    job = import_upload(
        project=project, user=user, upload=upload, size=size
    )  # autocommit: enqueued now
    assert wait_for(lambda: Job.objects.get(pk=job.pk).status not in Job.ACTIVE, timeout=90)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert Task.objects.filter(project=project).count() == 2


def test_a_cancelled_jobs_upload_is_deleted_when_its_message_arrives(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    upload, size = big_upload(tmp_path, basic_records())
    job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    job_cancel(job=job)
    assert import_job_run(job_id=job.pk)["skipped"]
    assert not (tmp_path / "media" / job.params["path"]).exists()


def test_a_redelivery_after_a_dead_worker_takes_the_import_back(
    project: Project, admin_user: User, tmp_path: Path, small_inline_limit: None
) -> None:
    upload, size = big_upload(tmp_path, basic_records())
    job = import_upload(project=project, user=admin_user, upload=upload, size=size)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)  # its worker died mid-import
    assert import_job_run(job_id=job.pk)["skipped"]  # an ordinary second delivery
    assert Task.objects.count() == 0
    assert import_job_run(job_id=job.pk, redelivered=True)["status"] == "succeeded"
    assert Task.objects.count() == 2
