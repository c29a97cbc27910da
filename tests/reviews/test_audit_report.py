"""The audit report over stored verdicts, on a case worked out by hand: shares as task means
with task-bootstrap intervals, the generated-versus-expert task count, the domain filter and the
flagged list."""

from typing import Any

import numpy as np
import pytest

from graders.models import JudgeEndpoint
from labeling.jobs import job_create
from labeling.models import Project, Task
from reviews.audit import audit_domains, audit_flagged, audit_report
from reviews.models import AuditRun, AuditVerdict

pytestmark = pytest.mark.django_db

# (task, domain, author, grounding, specificity, omission), in the order they are stored.
HAND = [
    # Task A: expert 1 of 2 supported, generated 2 of 2: generated higher.
    ("A", "legal", "expert", "supported", "specific", False),
    ("A", "legal", "expert", "unverifiable", "generic", True),
    ("A", "legal", "generated", "supported", "specific", False),
    ("A", "legal", "generated", "supported", "specific", False),
    ("A", "legal", "reviewed", "supported", "specific", False),
    # Task B: expert 1 of 1, generated 1 of 2: expert higher.
    ("B", "legal", "expert", "supported", "specific", False),
    ("B", "legal", "generated", "supported", "specific", True),
    ("B", "legal", "generated", "contradicted", "specific", False),
    # Task C: expert 0 of 1, generated 1 of 1: generated higher.
    ("C", "tax", "expert", "unverifiable", "specific", False),
    ("C", "tax", "generated", "supported", "generic", False),
    # Task D: generated only.
    ("D", "tax", "generated", "supported", "specific", False),
    ("D", "tax", "generated", "supported", "specific", False),
]


def independent_ci(per_task: list[float]) -> tuple[float, float]:
    """DESIGN.md section 7: resample tasks with replacement, 10,000 draws, seed 0, 2.5 and
    97.5 percentiles of the mean."""
    values = np.array(per_task)
    picks = np.random.default_rng(0).integers(0, len(values), size=(10_000, len(values)))
    low, high = np.percentile(values[picks].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


@pytest.fixture
def audit(project: Project) -> AuditRun:
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="j", base_url="http://127.0.0.1:9/v1", model="m"
    )
    run = AuditRun.objects.create(
        project=project,
        job=job_create(kind="audit", project=project),
        endpoint=endpoint,
        split="eval",
    )
    tasks: dict[str, Task] = {}
    for task_id, domain, author, grounding, specificity, omission in HAND:
        if task_id not in tasks:
            tasks[task_id] = Task.objects.create(
                project=project, external_id=task_id, domain=domain, prompt="p"
            )
        AuditVerdict.objects.create(
            run=run, task=tasks[task_id], author_kind=author, criterion_text=f"{author} on {task_id}",
            grounding=grounding, specificity=specificity, omission=omission,
        )  # fmt: skip
    # A failed call is counted apart and never treated as a verdict.
    AuditVerdict.objects.create(
        run=run, task=tasks["B"], author_kind="expert", criterion_text="x", error="HTTP 500"
    )
    run.tasks.set(tasks.values())
    return run


def by_author(report: Any) -> dict[str, Any]:
    return {shares.author: shares for shares in report.authors}


def test_report_shares_are_task_means_with_bootstrap_intervals(audit: AuditRun) -> None:
    report = audit_report(run=audit)
    authors = by_author(report)

    assert [a.author for a in report.authors] == ["expert", "generated", "reviewed"]
    assert (report.audited, report.failed) == (12, 1)
    expert, generated = authors["expert"], authors["generated"]
    assert (expert.tasks, expert.criteria, generated.tasks, generated.criteria) == (3, 4, 4, 7)
    # Expert supported per task: A 1/2, B 1, C 0 -> 1/2. Generated: A 1, B 1/2, C 1, D 1 -> 7/8.
    assert expert.shares["supported"].value == pytest.approx(0.5)
    assert generated.shares["supported"].value == pytest.approx(7 / 8)
    assert expert.shares["unverifiable"].value == pytest.approx((1 / 2 + 0 + 1) / 3)
    assert generated.shares["contradicted"].value == pytest.approx((0 + 1 / 2 + 0 + 0) / 4)
    assert expert.shares["specific"].value == pytest.approx((1 / 2 + 1 + 1) / 3)
    assert generated.shares["specific"].value == pytest.approx((1 + 1 + 0 + 1) / 4)
    assert expert.shares["omission"].value == pytest.approx((1 / 2) / 3)
    assert generated.shares["omission"].value == pytest.approx((1 / 2) / 4)
    for author in report.authors:
        for share in author.shares.values():
            assert share.low <= share.value <= share.high
    supported = expert.shares["supported"]
    assert (supported.low, supported.high) == tuple(
        pytest.approx(b) for b in independent_ci([0.5, 1.0, 0.0])
    )
    assert supported.low < supported.high
    generated_supported = generated.shares["supported"]
    assert (generated_supported.low, generated_supported.high) == tuple(
        pytest.approx(b) for b in independent_ci([1.0, 0.5, 1.0, 1.0])
    )
    reviewed = authors["reviewed"].shares["supported"]
    assert (reviewed.value, reviewed.low, reviewed.high) == (1.0, 1.0, 1.0)
    # Tasks with both: A, B, C. Generated strictly higher on A and C.
    assert (report.generated_higher, report.tasks_with_both) == (2, 3)


def test_report_of_one_domain(audit: AuditRun) -> None:
    report = audit_report(run=audit, domain="tax")
    authors = by_author(report)

    assert set(authors) == {"expert", "generated"}
    assert authors["expert"].shares["supported"].value == 0.0
    assert authors["generated"].shares["supported"].value == 1.0
    assert (report.generated_higher, report.tasks_with_both, report.failed) == (1, 1, 0)
    assert audit_domains(run=audit) == ["legal", "tax"]


def test_flagged_list_and_its_filters(audit: AuditRun) -> None:
    def texts(**filters: Any) -> list[str]:
        return list(audit_flagged(run=audit, **filters).values_list("criterion_text", flat=True))

    # Flagged: A expert unverifiable+generic+omission, B generated omission, B generated
    # contradicted, C expert unverifiable, C generated generic. Failed calls are not flagged.
    assert texts() == [
        "expert on A", "generated on B", "generated on B", "expert on C", "generated on C",
    ]  # fmt: skip
    assert texts(author="expert") == ["expert on A", "expert on C"]
    assert texts(grounding="contradicted") == ["generated on B"]
    assert texts(specificity="generic") == ["expert on A", "generated on C"]
    assert texts(omission=True) == ["expert on A", "generated on B"]
    assert texts(domain="tax", author="generated") == ["generated on C"]
    flags = [v.flags for v in audit_flagged(run=audit, domain="legal", author="expert")]
    assert flags == [["unverifiable", "generic", "omission-prone"]]


def test_the_shares_are_kept_for_the_same_verdicts_and_recomputed_for_changed_ones(
    audit: AuditRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import cache

    import reviews.audit

    cache.clear()
    calls: list[int] = []
    real = reviews.audit.audit_shares

    def counted(criteria: Any) -> Any:
        calls.append(len(criteria))
        return real(criteria)

    monkeypatch.setattr(reviews.audit, "audit_shares", counted)
    first = audit_report(run=audit)
    assert audit_report(run=audit) == first and calls == [12]  # the bootstrap ran once
    verdict = AuditVerdict.objects.filter(run=audit, author_kind="expert", error="").first()
    assert verdict is not None
    AuditVerdict.objects.filter(pk=verdict.pk).update(grounding="contradicted")
    changed = audit_report(run=audit)
    assert calls == [12, 12] and changed != first
    monkeypatch.setattr(reviews.audit, "audit_shares", real)
    cache.clear()
    assert audit_report(run=audit) == changed  # what an empty cache computes
