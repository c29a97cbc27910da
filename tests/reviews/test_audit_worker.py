"""An audit on a real Celery worker and broker survives the worker's death: killed mid-run with
SIGKILL and replaced, the audit finishes with one verdict per criterion and no judge call made
twice beyond those that were in flight."""

import json
from collections import Counter
from typing import Any

import pytest

from graders.models import JudgeEndpoint
from labeling.models import Job, JobStatus, Project, Task
from reviews.audit import audit_start
from reviews.models import AuditVerdict
from tests.conftest import CeleryWorkers, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.reviews.test_audit_job import DISTINCT, audit_task, endpoint  # noqa: F401 (fixtures)

pytestmark = pytest.mark.worker
LEASE_SECONDS = "3"


def test_an_audit_finishes_after_its_worker_is_killed_and_replaced(
    celery_workers: CeleryWorkers,
    project: Project,
    audit_task: Task,  # noqa: F811
    endpoint: JudgeEndpoint,  # noqa: F811
    fake_judge: FakeJudgeServer,
    settings: Any,
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE_SECONDS)
    fake_judge.latency_s = 0.2
    JudgeEndpoint.objects.filter(pk=endpoint.pk).update(max_concurrency=2)
    first = celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    run = audit_start(project=project, endpoint=endpoint, task_ids=["deal-17"])  # sent now
    assert wait_for(lambda: AuditVerdict.objects.filter(run=run).count() >= 4, timeout=90)
    celery_workers.kill(first)
    owner = Job.objects.get(pk=run.job_id).owner
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    assert wait_for(lambda: Job.objects.get(pk=run.job_id).status not in Job.ACTIVE, timeout=180), (
        "the audit did not finish after the restart"
    )
    job = Job.objects.get(pk=run.job_id)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.owner != owner  # the second worker took the lease over
    assert AuditVerdict.objects.filter(run=run).count() == 22
    # Only calls in flight at the kill (at most the endpoint's concurrency) were made again.
    bodies = Counter(json.dumps(r.body, sort_keys=True) for r in fake_judge.requests)
    assert len(bodies) == len(DISTINCT)
    assert sum(count - 1 for count in bodies.values()) <= 2
