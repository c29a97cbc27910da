"""The audit pages: who may see and start audits, the page and its htmx fragments, filters and
pagination of the flagged list, cancel and resume, and escaping of whatever a criterion, a
quote or a document says."""

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import NoReverseMatch, reverse

from graders.models import JudgeEndpoint
from labeling.jobs import job_create
from labeling.models import AuthorKind, Job, Project, Rubric, RubricItem, Task
from reviews.models import AuditRun, AuditVerdict

pytestmark = pytest.mark.django_db

HOSTILE_CRITERION = '<script>alert("criterion")</script> States the cap.'
HOSTILE_QUOTE = "<img src=x onerror=alert(1)> capped at 10%"
HOSTILE_PROMPT = "</pre><script>alert('prompt')</script>"


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def endpoint(project: Project) -> JudgeEndpoint:
    return JudgeEndpoint.objects.create(
        project=project,
        name="auditor",
        base_url="http://127.0.0.1:9/v1",
        model="m",
        is_default=True,
    )


@pytest.fixture
def task(project: Project) -> Task:
    task = Task.objects.create(
        project=project, external_id="deal-1", domain="legal", split="eval", prompt="p"
    )
    rubric = Rubric.objects.create(task=task, author_kind=AuthorKind.EXPERT)
    RubricItem.objects.create(rubric=rubric, key="c1", text="States the cap.")
    return task


@pytest.fixture
def audit(project: Project, endpoint: JudgeEndpoint, task: Task) -> AuditRun:
    job = job_create(kind="audit", project=project)
    Job.objects.filter(pk=job.pk).update(status="succeeded", done=1, total=1)
    run = AuditRun.objects.create(project=project, job=job, endpoint=endpoint, split="eval")
    run.tasks.set([task])
    AuditVerdict.objects.create(
        run=run, task=task, author_kind="expert", rubric_item=RubricItem.objects.get(),
        criterion_text=HOSTILE_CRITERION, specificity="specific", grounding="unverifiable",
        quote=HOSTILE_QUOTE, quote_missing=True, omission=False,
        trace={"messages": [{"role": "user", "content": HOSTILE_PROMPT}], "text": HOSTILE_QUOTE,
               "parsed": {"grounding": "contradicted"}, "cached": False},
    )  # fmt: skip
    return run


def page_url(audit: AuditRun) -> str:
    return reverse("audit", args=["acme", audit.pk])


def test_only_reviewers_and_admins_see_audits(
    audit: AuditRun, admin_user: Any, reviewer_user: Any, expert_user: Any, outsider: Any
) -> None:
    verdict = AuditVerdict.objects.get()
    urls = [
        reverse("audits", args=["acme"]),
        page_url(audit),
        reverse("audit-verdict", args=["acme", audit.pk, verdict.pk]),
    ]
    for url in urls:
        assert client_for(outsider).get(url).status_code == 404
        assert client_for(expert_user).get(url).status_code == 403
        assert client_for(reviewer_user).get(url).status_code == 200
        assert client_for(admin_user).get(url).status_code == 200
    for name in ("audit-cancel", "audit-resume"):
        url = reverse(name, args=["acme", audit.pk])
        assert client_for(outsider).post(url).status_code == 404
        assert client_for(expert_user).post(url).status_code == 403
    assert (
        client_for(expert_user)
        .post(urls[0], {"endpoint": audit.endpoint_id, "split": "eval"})
        .status_code
        == 403
    )
    # Another project's audit id does not open through this project.
    assert (
        client_for(reviewer_user).get(reverse("audit", args=["acme", audit.pk + 1])).status_code
        == 404
    )


def test_hostile_criterion_quote_and_trace_are_escaped(audit: AuditRun, reviewer_user: Any) -> None:
    client = client_for(reviewer_user)
    verdict = AuditVerdict.objects.get()

    page = client.get(page_url(audit)).content.decode()
    trace = client.get(
        reverse("audit-verdict", args=["acme", audit.pk, verdict.pk])
    ).content.decode()

    for html in (page, trace):
        assert '<script>alert("criterion")' not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(&quot;criterion&quot;)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script>alert('prompt')" not in trace and "&lt;/pre&gt;&lt;script&gt;" in trace
    assert "not found in the documents" in page and "claimed as contradicted" in page


def test_the_report_page_and_its_fragments(audit: AuditRun, reviewer_user: Any) -> None:
    client = client_for(reviewer_user)

    page = client.get(page_url(audit)).content.decode()
    assert (
        "Blind rubric audit" in page and 'id="audit-status"' in page and 'id="audit-report"' in page
    )
    assert "Omission-prone" in page and "1.000 <small>[1.000, 1.000]</small>" in page
    assert "No task has both an expert and a generated rubric" in page
    status = client.get(
        page_url(audit), headers={"HX-Request": "true", "HX-Target": "audit-status"}
    )
    body = status.content.decode()
    assert body.lstrip().startswith('<section id="audit-status"') and "<html" not in body
    assert json.loads(status.headers["HX-Trigger"]) == {
        "audit-finished": {}
    }  # the audit is over: refresh the report
    report = client.get(
        page_url(audit), headers={"HX-Request": "true", "HX-Target": "audit-report"}
    )
    assert report.content.decode().lstrip().startswith('<section id="audit-report"')
    assert "HX-Trigger" not in report.headers
    flagged = client.get(
        page_url(audit),
        {"author": "expert"},
        headers={"HX-Request": "true", "HX-Target": "audit-flagged"},
    ).content.decode()
    assert (
        flagged.lstrip().startswith('<section id="audit-flagged"')
        and "1 match the filters" in flagged
    )
    assert "By author" not in flagged  # paging the list does not recompute the shares


def test_the_status_polls_while_the_audit_runs(audit: AuditRun, reviewer_user: Any) -> None:
    Job.objects.filter(pk=audit.job_id).update(
        status="running", done=3, total=8, stage="Auditing criteria"
    )

    page = client_for(reviewer_user).get(page_url(audit)).content.decode()

    assert 'hx-trigger="every 1s"' in page and '<progress max="8" value="3">' in page
    assert "3 of 8 criteria" in page and "Cancel" in page


def test_flagged_links_to_the_rubric_review_page(audit: AuditRun, reviewer_user: Any) -> None:
    page = client_for(reviewer_user).get(page_url(audit)).content.decode()

    try:
        expected = reverse("rubric-review", args=["acme", "deal-1"])
    except NoReverseMatch:  # until rubric review lands, the task page stands in
        expected = reverse("task-detail", args=["acme", "deal-1"])
    assert f'href="{expected}"' in page


def test_filters_and_pagination_of_the_flagged_list(
    audit: AuditRun, task: Task, reviewer_user: Any, project: Project
) -> None:
    other = Task.objects.create(project=project, external_id="tax-1", domain="tax", prompt="p")
    audit.tasks.add(other)
    AuditVerdict.objects.bulk_create(
        AuditVerdict(run=audit, task=other, author_kind="generated", criterion_text=f"Generic point {n}",
                     specificity="generic", grounding="supported", omission=n % 2 == 0)
        for n in range(30)
    )  # fmt: skip
    client = client_for(reviewer_user)

    first = client.get(page_url(audit)).content.decode()
    assert "31 match the filters" in first and "Page 1 of 2" in first
    second = client.get(page_url(audit), {"page": 2}).content.decode()
    assert "Page 2 of 2" in second and "Generic point 29" in second
    tax = client.get(page_url(audit), {"domain": "tax", "omission": "true"}).content.decode()
    assert "15 match the filters" in tax and "domain tax" in tax
    assert "Generic point 0" in tax and "Generic point 1<" not in tax
    # The pager keeps the filters.
    many = client.get(page_url(audit), {"author": "generated"}).content.decode()
    assert "30 match the filters" in many and "?author=generated&amp;page=2" in many
    expert_only = client.get(page_url(audit), {"author": "expert", "grounding": "unverifiable"})
    assert "1 match the filters" in expert_only.content.decode()


def test_starting_an_audit_from_the_page(
    task: Task, endpoint: JudgeEndpoint, reviewer_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(reviewer_user)
    url = reverse("audits", args=["acme"])

    assert "Start audit" in client.get(url).content.decode()
    neither = client.post(url, {"endpoint": endpoint.pk})
    assert (
        neither.status_code == 400 and "Choose a split or list task ids" in neither.content.decode()
    )
    unknown = client.post(url, {"endpoint": endpoint.pk, "task_ids": "deal-1, nope"})
    assert unknown.status_code == 400 and "no such task: nope" in unknown.content.decode()
    huge = client.post(url, {"endpoint": endpoint.pk, "task_ids": "deal-1", "max_calls": "9" * 30})
    assert huge.status_code == 400 and "less than or equal to" in huge.content.decode()
    with django_capture_on_commit_callbacks() as callbacks:
        started = client.post(url, {"endpoint": endpoint.pk, "task_ids": " deal-1 \r\n,"})
    run = AuditRun.objects.get()
    assert started.status_code == 302 and started["Location"] == page_url(run)
    assert len(callbacks) == 1 and run.task_ids == ["deal-1"] and run.created_by == reviewer_user
    assert f"#{run.pk}" in client.get(url).content.decode()


def test_cancel_and_resume(
    audit: AuditRun, reviewer_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(reviewer_user)
    Job.objects.filter(pk=audit.job_id).update(status="running")

    client.post(reverse("audit-cancel", args=["acme", audit.pk]))
    audit.job.refresh_from_db()
    assert audit.job.cancel_requested

    Job.objects.filter(pk=audit.job_id).update(status="cancelled")
    AuditVerdict.objects.update(error="HTTP 500")
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(reverse("audit-resume", args=["acme", audit.pk]))
    audit.job.refresh_from_db()
    assert response.status_code == 302 and len(callbacks) == 1
    assert audit.job.status == "queued" and not audit.job.cancel_requested
    assert not AuditVerdict.objects.exists()  # the failed verdict will be audited again
