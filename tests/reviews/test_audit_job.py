"""The blind audit as a job: the real engine over real HTTP to the fake judge, through the
Celery task function. First the blinding the design requires, then resume, cancel, budget."""

import hashlib
import itertools
import json
import re
from typing import Any
from unittest import mock

import pytest

from graders.models import JudgeEndpoint
from labeling.jobs import job_cancel, job_progress
from labeling.models import (
    AuthorKind,
    Document,
    Job,
    Project,
    Rubric,
    RubricItem,
    RubricRevision,
    Task,
)
from reviews.audit import AuditInvalid, audit_resume, audit_start
from reviews.audit_jobs import audit_run_execute, audit_run_task
from reviews.models import AuditRun, AuditVerdict
from tests.fakes.openai_server import FakeJudgeServer, Fault

pytestmark = pytest.mark.django_db

DOCUMENT = (
    "Clause 4: the seller's liability is capped at 10% of the price.\n"
    "Clause 9: claims must be notified within 30 days of closing."
)
SHARED = "States that liability is capped at 10% of the price."
EXPERT_NAME = "Philippa Quarrington-Vasquez"
REVIEWER_NAME = "Quentin Marlowe-Ash"
ORIGIN = hashlib.sha256(b"rubric program 7").hexdigest()
# Distinctive ids, so that a leak would be visible in the prompt text.
RUBRIC_PKS = {
    AuthorKind.EXPERT: 900_001,
    AuthorKind.GENERATED: 900_002,
    AuthorKind.REVIEWED: 900_003,
}
KEY_PREFIX = {
    AuthorKind.EXPERT: "EXPKEY",
    AuthorKind.GENERATED: "GENKEY",
    AuthorKind.REVIEWED: "REVKEY",
}
EDITORS = {
    AuthorKind.EXPERT: EXPERT_NAME,
    AuthorKind.GENERATED: "grader 7",
    AuthorKind.REVIEWED: REVIEWER_NAME,
}
WEIGHTS = {AuthorKind.EXPERT: 5.0, AuthorKind.GENERATED: 1.0, AuthorKind.REVIEWED: 2.5}
SIZES = {AuthorKind.EXPERT: 8, AuthorKind.GENERATED: 8, AuthorKind.REVIEWED: 4}
AUTHOR_WORDS = ("expert", "generated", "reviewed")


def criterion_texts() -> dict[str, list[str]]:
    """Each author's criteria: numbered facts (distinct across authors), and the expert and the
    generated rubric both hold SHARED."""
    texts: dict[str, list[str]] = {}
    number = 0
    for author, size in SIZES.items():
        texts[author] = []
        for _ in range(size):
            number += 1
            texts[author].append(f"Mentions fact number {number} of the agreement.")
    texts[AuthorKind.EXPERT].append(SHARED)
    texts[AuthorKind.GENERATED].append(SHARED)
    return texts


TEXTS = criterion_texts()
DISTINCT = {text for texts in TEXTS.values() for text in texts}


def last_fenced(body: dict[str, Any]) -> str:
    """The last fenced value of the user message: the criterion under audit."""
    nonce = re.search(r"<<<DATA-([0-9a-f]{16})>>>", body["messages"][0]["content"])
    assert nonce is not None
    blocks = re.findall(
        rf"<<<DATA-{nonce.group(1)}>>>\n(.*?)\n<<<END-DATA-{nonce.group(1)}>>>",
        body["messages"][1]["content"],
        re.DOTALL,
    )
    return str(blocks[-1])


def auditor(body: dict[str, Any]) -> str:
    """Supported with a real quote for SHARED; otherwise by the fact's number: supported,
    contradicted with an invented quote, or unverifiable and generic."""
    criterion = last_fenced(body)
    if criterion == SHARED:
        verdict = ("supported", "liability is capped at 10% of the price", "specific", False)
    else:
        number = int(re.search(r"number (\d+)", criterion).group(1))  # type: ignore[union-attr]
        verdict = [
            ("supported", "within 30 days of closing", "specific", False),
            ("contradicted", "capped at 50% of the price", "specific", False),
            ("unverifiable", "", "generic", True),
        ][number % 3]
    grounding, quote, specificity, omission = verdict
    return json.dumps(
        {"specificity": specificity, "grounding": grounding, "quote": quote, "omission": omission}
    )


@pytest.fixture
def audit_task(project: Project) -> Task:
    task = Task.objects.create(
        project=project,
        external_id="deal-17",
        domain="legal",
        split="eval",
        prompt="Summarise the seller's exposure under the share purchase agreement.",
        instructions="Cite the clauses you rely on.",
    )
    Document.objects.create(task=task, external_id="spa", title="SPA", text=DOCUMENT)
    item_pk = 910_000
    for author, texts in TEXTS.items():
        rubric = Rubric.objects.create(
            pk=RUBRIC_PKS[author],
            task=task,
            author_kind=author,
            origin="" if author == AuthorKind.EXPERT else ORIGIN,
        )
        items = []
        for position, text in enumerate(texts):
            item_pk += 1
            items.append(RubricItem(pk=item_pk, rubric=rubric, key=f"{KEY_PREFIX[author]}-{position}",
                                    text=text, weight=WEIGHTS[author], position=position))  # fmt: skip
        RubricItem.objects.bulk_create(items)
        RubricRevision.objects.create(rubric=rubric, version=1, items=[], editor=EDITORS[author])
    # The fixture is only a fair test if the task's own text says nothing about authors.
    own_text = f"{task.prompt} {task.instructions} {DOCUMENT} {' '.join(DISTINCT)}".lower()
    assert not any(word in own_text for word in AUTHOR_WORDS)
    return task


@pytest.fixture
def endpoint(project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = auditor
    # One call at a time: the order the fake receives is exactly the order the job chose.
    return JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="fake-judge",
        max_concurrency=1,
    )  # fmt: skip


def start(project: Project, endpoint: JudgeEndpoint, **kwargs: Any) -> AuditRun:
    kwargs.setdefault("task_ids", ["deal-17"])
    return audit_start(project=project, endpoint=endpoint, **kwargs)


def author_of(text: str) -> str:
    return next(author for author, texts in TEXTS.items() if text in texts)


def test_the_auditor_never_learns_who_wrote_a_criterion(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = start(project, endpoint)

    assert audit_run_task(run.pk)["status"] == "succeeded"

    bodies = [request.body for request in fake_judge.requests]
    # One call per distinct criterion text: the expert's and the generated copy of SHARED are
    # the same request, so the auditor cannot even tell that there were two.
    assert len(bodies) == len(DISTINCT) == 21
    leaks = [EXPERT_NAME, REVIEWER_NAME, "grader 7", ORIGIN, ORIGIN[:12], "weight", "rubric"]
    leaks += [str(pk) for pk in RUBRIC_PKS.values()]
    leaks += [str(pk) for pk in RubricItem.objects.values_list("pk", flat=True)]
    leaks += list(RubricItem.objects.values_list("key", flat=True)) + list(KEY_PREFIX.values())
    for body in bodies:
        prompt = "\n".join(message["content"] for message in body["messages"])
        for word in AUTHOR_WORDS:
            assert word not in prompt.lower(), word
        for leak in leaks:
            assert leak.lower() not in prompt.lower(), leak
        # Exactly one criterion per prompt, and no other criterion anywhere in it.
        criterion = last_fenced(body)
        assert criterion in DISTINCT
        assert [text for text in DISTINCT if text in prompt] == [criterion]
    # The order of the calls follows no rubric: the authors' criteria interleave.
    order = [author_of(last_fenced(body)) for body in bodies if last_fenced(body) != SHARED]
    runs = 1 + sum(1 for before, after in itertools.pairwise(order) if before != after)
    assert runs >= 8, order  # grouped by author would be 3 runs
    for author in SIZES:
        positions = [n for n, who in enumerate(order) if who == author]
        assert positions[-1] - positions[0] + 1 > len(positions), (author, order)
    by_pk = list(
        RubricItem.objects.exclude(text=SHARED).order_by("pk").values_list("text", flat=True)
    )
    assert [last_fenced(body) for body in bodies if last_fenced(body) != SHARED] != by_pk

    # Only the database knows the authors, and it does.
    verdicts = AuditVerdict.objects.filter(run=run)
    assert verdicts.count() == 22
    for author, texts in TEXTS.items():
        assert verdicts.filter(author_kind=author).count() == len(texts)
        assert verdicts.filter(rubric_item__rubric__author_kind=author).count() == len(texts)
    shared = verdicts.filter(criterion_text=SHARED)
    assert {(v.grounding, v.quote, v.quote_missing) for v in shared} == {
        ("supported", "liability is capped at 10% of the price", False)
    }


def test_verdicts_record_the_quote_check_and_the_trace(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint
) -> None:
    run = start(project, endpoint)
    audit_run_execute(run_id=run.pk)

    fact = AuditVerdict.objects.get(
        run=run, criterion_text="Mentions fact number 1 of the agreement."
    )
    # 1 % 3 == 1: the auditor said contradicted, quoting a passage the documents do not hold.
    assert (fact.grounding, fact.quote_missing, fact.quote) == (
        "unverifiable",
        True,
        "capped at 50% of the price",
    )
    assert fact.trace["parsed"]["grounding"] == "contradicted"
    assert fact.trace["messages"][1]["content"].count("Mentions fact number 1 of") == 1
    supported = AuditVerdict.objects.get(
        run=run, criterion_text="Mentions fact number 3 of the agreement."
    )
    assert (supported.grounding, supported.quote_missing) == ("supported", False)
    generic = AuditVerdict.objects.get(
        run=run, criterion_text="Mentions fact number 2 of the agreement."
    )
    assert (generic.specificity, generic.grounding, generic.omission) == (
        "generic",
        "unverifiable",
        True,
    )
    run.refresh_from_db()
    assert run.job.status == "succeeded" and run.job.done == run.job.total == 22
    assert run.job.result == {"criteria": 22, "failed": 0}
    assert run.usage["calls"] == 21 and run.usage["cache_hits"] == 1


def test_a_rerun_makes_no_new_calls_and_a_second_delivery_does_nothing(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = start(project, endpoint)
    audit_run_execute(run_id=run.pk)
    calls = fake_judge.call_count

    assert audit_run_execute(run_id=run.pk) == {"audit": run.pk, "skipped": True}
    again = start(project, endpoint)
    assert audit_run_execute(run_id=again.pk)["status"] == "succeeded"

    assert fake_judge.call_count == calls  # every answer came from the cache
    again.refresh_from_db()
    assert again.usage["calls"] == 0 and again.usage["cache_hits"] == 22
    assert AuditVerdict.objects.filter(run=again).count() == 22


def test_cancel_keeps_the_verdicts_so_far_and_resume_finishes_without_repeating_calls(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = start(project, endpoint)
    reports: list[int] = []

    def progress_then_cancel(**kwargs: Any) -> None:
        # Someone presses Cancel while the first chunk is being audited.
        reports.append(kwargs["done"])
        if len(reports) == 2:
            job_cancel(job=run.job)
        job_progress(**kwargs)

    with mock.patch("reviews.audit_jobs.job_progress", progress_then_cancel):
        assert audit_run_execute(run_id=run.pk)["status"] == "cancelled"
    run.job.refresh_from_db()
    assert run.job.status == "cancelled" and "Resume" in run.job.error
    kept = AuditVerdict.objects.filter(run=run).count()
    assert kept == reports[1] == 4  # one chunk of four at max_concurrency 1
    assert audit_run_execute(run_id=run.pk)["skipped"]  # a stopped audit stays stopped

    audit_resume(run=run)
    assert audit_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert AuditVerdict.objects.filter(run=run).count() == 22
    assert fake_judge.call_count == 21  # nothing asked twice


def test_budget_stops_cleanly_and_resume_finishes(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = start(project, endpoint, max_calls=6)

    assert audit_run_execute(run_id=run.pk)["status"] == "budget"
    run.refresh_from_db()
    assert run.job.status == "budget_spent" and "budget is spent" in run.job.error
    assert fake_judge.call_count == run.usage["calls"] == 6
    assert 0 < AuditVerdict.objects.filter(run=run).count() < 22
    AuditRun.objects.filter(pk=run.pk).update(max_calls=None)

    audit_resume(run=run)
    assert audit_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert fake_judge.call_count == 21
    assert AuditVerdict.objects.filter(run=run).count() == 22


def test_a_failed_call_is_recorded_and_audited_again_on_resume(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    fake_judge.script(Fault("bad_request"))
    run = start(project, endpoint)

    audit_run_execute(run_id=run.pk)

    run.job.refresh_from_db()
    assert run.job.status == "succeeded" and run.job.result == {"criteria": 22, "failed": 1}
    failed = AuditVerdict.objects.get(run=run, error__contains="HTTP 400")
    assert (failed.grounding, failed.specificity, failed.omission) == ("", "", None)
    audit_resume(run=run)
    audit_run_execute(run_id=run.pk)
    assert fake_judge.call_count == 22  # the 21 answers plus the one failure, asked again
    assert not AuditVerdict.objects.filter(run=run).exclude(error="").exists()


def test_a_redelivery_while_another_worker_holds_the_audit_looks_again_later(
    project: Project, audit_task: Task, endpoint: JudgeEndpoint
) -> None:
    from django.utils import timezone

    run = start(project, endpoint)
    Job.objects.filter(pk=run.job_id).update(
        status="running", owner="other", heartbeat_at=timezone.now()
    )

    with mock.patch("reviews.audit_jobs.audit_run_task.apply_async") as later:
        assert audit_run_execute(run_id=run.pk)["status"] == "busy"
    later.assert_called_once()
    assert not AuditVerdict.objects.filter(run=run).exists()


def test_start_checks_its_selection(
    project: Project,
    audit_task: Task,
    endpoint: JudgeEndpoint,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with pytest.raises(AuditInvalid, match="either a split or"):
        start(project, endpoint, split="eval")
    with pytest.raises(AuditInvalid, match="no such task: nope"):
        start(project, endpoint, task_ids=["deal-17", "nope"])
    with pytest.raises(AuditInvalid, match="no rubric criteria"):
        start(project, endpoint, task_ids=[], split="meta")
    other = Project.objects.create(slug="elsewhere", name="Elsewhere")
    foreign = JudgeEndpoint.objects.create(
        project=other, name="x", base_url="http://127.0.0.1:9/v1", model="m"
    )
    with pytest.raises(AuditInvalid, match="belong to this project"):
        start(project, foreign)

    with django_capture_on_commit_callbacks() as callbacks:
        run = start(project, endpoint, task_ids=[], split="eval")
    assert len(callbacks) == 1  # enqueued once the run is committed
    assert list(run.tasks.values_list("external_id", flat=True)) == ["deal-17"]
    assert run.job.kind == "audit" and run.job.status == "queued"
