"""Grader bundles: what they hold, the download that records it, and the import that
reproduces the grader in another project."""

import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from graders.bundles import BundleInvalid, bundle_build, bundle_import
from graders.engine.baseline import baseline_program
from graders.engine.runtime import load_bundle
from graders.grading import grading_run_execute
from graders.models import Grade, GraderExport, JudgeEndpoint, Metagrader
from graders.search import search_run_execute, search_start
from graders.services import grader_promote, grading_run_start, metagrader_register
from labeling.imports import jsonl_import
from labeling.models import Membership, Project, Role, Rubric, Task
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def rubric_grader(project: Project) -> Metagrader:
    return metagrader_register(
        project=project, program=baseline_program("rubric").to_json(), origin="baseline"
    )


def test_a_bundle_holds_what_a_training_job_needs_and_never_the_key(
    search_project: Project,
    search_judge: JudgeEndpoint,
    admin_user: User,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    # The operator binds the key to the fake judge (by default it goes to api.openai.com only).
    settings.JUDGE_API_KEY_HOSTS = [f"OPENAI_API_KEY={urlsplit(search_judge.base_url).netloc}"]
    JudgeEndpoint.objects.filter(pk=search_judge.pk).update(api_key_env="OPENAI_API_KEY")
    grader = rubric_grader(search_project)
    run = grading_run_start(
        project=search_project, metagrader=grader, endpoint=search_judge, split="eval"
    )
    grading_run_execute(run_id=run.pk)
    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=1
    )
    search_run_execute(search_id=search.pk)
    search.refresh_from_db()
    grader_promote(
        project=search_project, metagrader=search.winner.metagrader, user=admin_user, search=search
    )
    bundle = bundle_build(metagrader=grader)
    assert bundle["grader"]["content_hash"] == grader.content_hash
    assert bundle["judge"]["api_key_env"] == "OPENAI_API_KEY"
    assert bundle["judge"]["base_url"] == search_judge.base_url
    assert set(bundle["tasks"]) == set(Task.objects.values_list("external_id", flat=True))
    assert bundle["tasks"]["e0"]["documents"][0]["text"].startswith("Clause 4")
    assert set(bundle["rubrics"]) == {"e0", "e1"}  # the tasks it graded
    assert bundle["evaluation"]["graded"] == 6
    assert bundle["snapshot"] == {"id": None, "hash": None}  # never ranked by a search
    winner = bundle_build(metagrader=search.winner.metagrader)
    assert winner["snapshot"] == {"id": search.snapshot_id, "hash": search.snapshot.content_hash}
    assert load_bundle(bundle).kind == "rubric"
    assert "sk-test-secret-value" not in json.dumps(bundle)


def test_the_download_records_the_export_and_the_page_lists_it(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: User
) -> None:
    grader = rubric_grader(search_project)
    client = Client()
    client.force_login(admin_user)
    url = reverse("bundle-download", args=[search_project.slug, grader.pk])
    # A GET (a link prefetch, a crawler, a reload) is not a download anyone meant.
    for method in (client.get, client.head):
        refused = method(url)
        assert refused.status_code == 405 and refused["Allow"] == "POST"
    assert GraderExport.objects.count() == 0
    page = client.get(reverse("program", args=[search_project.slug, grader.pk])).content.decode()
    assert f'<form method="post" action="{url}"' in page  # the Download button posts
    response = client.post(url)
    assert response.status_code == 200
    assert f"grader-{grader.pk}-{grader.content_hash[:12]}" in response["Content-Disposition"]
    assert json.loads(response.content)["grader"]["id"] == grader.pk
    export = GraderExport.objects.get()
    assert export.metagrader == grader and export.user == admin_user
    page = client.get(reverse("program", args=[search_project.slug, grader.pk])).content.decode()
    assert "Download bundle" in page and export.created_at.strftime("%Y-%m-%d") in page


def test_importing_a_bundle_reproduces_the_grader_and_its_rewards(
    search_project: Project,
    search_judge: JudgeEndpoint,
    admin_user: User,
    tmp_path: Path,
) -> None:
    grader = rubric_grader(search_project)
    run = grading_run_start(
        project=search_project, metagrader=grader, endpoint=search_judge, task_ids=["e0"]
    )
    grading_run_execute(run_id=run.pk)
    rewards = dict(Grade.objects.filter(run=run).values_list("response__external_id", "reward"))
    bundle = json.loads(json.dumps(bundle_build(metagrader=grader)))  # through JSON, as a file

    other = Project.objects.create(slug="other", name="Other")
    Membership.objects.create(project=other, user=admin_user, role=Role.ADMIN)
    records = [{"type": "task", "id": "e0", "prompt": "Summarise the risk in deal e0.",
                "documents": [{"id": "spa", "title": "SPA", "text": Task.objects.get(
                    project=search_project, external_id="e0").documents.get().text}]}]  # fmt: skip
    records += [
        {"type": "response", "id": rid, "task": "e0", "content": content}
        for rid, content in Grade.objects.filter(run=run).values_list(
            "response__external_id", "response__content"
        )
    ]
    jsonl_import(project=other, path=write_jsonl(tmp_path / "other.jsonl", records))
    client = Client()
    client.force_login(admin_user)
    upload = SimpleUploadedFile("b.json", json.dumps(bundle).encode())
    response = client.post(reverse("bundle-import", args=["other"]), {"bundle": upload})
    imported = Metagrader.objects.get(project=other)
    assert response.status_code == 302 and response["Location"].endswith(f"/{imported.pk}/")
    assert imported.content_hash == grader.content_hash
    endpoint = JudgeEndpoint.objects.get(project=other)
    assert (endpoint.base_url, endpoint.model) == (search_judge.base_url, search_judge.model)
    copied = Rubric.objects.get(task__project=other, author_kind="generated")
    assert copied.origin == grader.content_hash
    assert list(copied.items.values_list("text", flat=True)) == [
        c["text"] for c in bundle["rubrics"]["e0"]
    ]
    again = grading_run_start(
        project=other, metagrader=imported, endpoint=endpoint, task_ids=["e0"]
    )
    grading_run_execute(run_id=again.pk)
    assert (
        dict(Grade.objects.filter(run=again).values_list("response__external_id", "reward"))
        == rewards
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b["grader"]["program"].update(description="Edited."), "changed"),
        (lambda b: b["grader"]["program"]["steps"].clear(), "steps"),
        (lambda b: b.update(format="something-else"), "format"),
        (lambda b: b.update(version=99), "version"),
    ],
)
def test_a_tampered_or_foreign_bundle_is_refused_and_nothing_is_written(
    search_project: Project, search_judge: JudgeEndpoint, change: Any, message: str
) -> None:
    bundle = bundle_build(metagrader=rubric_grader(search_project))
    change(bundle)
    other = Project.objects.create(slug="other", name="Other")
    with pytest.raises(BundleInvalid, match=message):
        bundle_import(project=other, bundle=bundle)
    assert not Metagrader.objects.filter(project=other).exists()
    assert not JudgeEndpoint.objects.filter(project=other).exists()


def test_upload_errors_are_explained_and_only_admins_may_import(
    search_project: Project, admin_user: User, reviewer_user: User
) -> None:
    url = reverse("bundle-import", args=[search_project.slug])
    reviewer = Client()
    reviewer.force_login(reviewer_user)
    assert reviewer.post(url, {"bundle": SimpleUploadedFile("b.json", b"{}")}).status_code == 403
    admin = Client()
    admin.force_login(admin_user)
    response = admin.post(url, {"bundle": SimpleUploadedFile("b.json", b"not json")}, follow=True)
    assert "The file is not JSON" in response.content.decode()
    response = admin.post(url, {"bundle": io.BytesIO(b"[1]")}, follow=True)
    assert "Choose a bundle file" in response.content.decode() or "JSON object" in (
        response.content.decode()
    )


def test_a_training_job_downloads_the_bundle_with_an_export_token(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    from graders.tokens import token_create

    grader = rubric_grader(search_project)
    url = reverse("api-bundle", args=[search_project.slug, grader.pk])
    export_token, export_raw = token_create(project=search_project, name="ci", scopes=["export"])
    _, reward_raw = token_create(project=search_project, name="rl", scopes=["reward"])
    assert Client().get(url).status_code == 401
    denied = Client(headers={"Authorization": f"Bearer {reward_raw}"}).get(url)
    assert denied.status_code == 403
    job = Client(headers={"Authorization": f"Bearer {export_raw}"})
    assert job.head(url).status_code == 405  # a probe is no download
    assert GraderExport.objects.count() == 0
    response = job.get(url)
    assert response.status_code == 200
    assert load_bundle(response.json()).info.grader_id == grader.pk
    assert GraderExport.objects.get().token == export_token
