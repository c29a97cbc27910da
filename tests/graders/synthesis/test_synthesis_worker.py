"""A synthesis run on a real Celery worker and broker survives the worker's death: SIGKILLed
mid-run and replaced, the run finishes with every cell, draw and vote stored once and no call
made twice beyond those in flight at the kill."""

import json
from collections import Counter
from typing import Any

import pytest

from graders.models import JudgeEndpoint
from graders.synthesis.runs import synthesis_start
from labeling.models import DrawOutcome, Job, JobStatus, Project, Response, SynthesisDraw
from tests.conftest import CeleryWorkers, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import Script, start_arguments, synthesis_project

pytestmark = pytest.mark.worker
LEASE_SECONDS = "3"
CONCURRENCY = 2
TASKS = ("t1", "t2", "t3", "t4", "t5", "t6")  # 12 cells; t3's 2 fail; (t1, warmth) retried


def test_a_run_finishes_after_its_worker_is_killed_and_replaced(
    celery_workers: CeleryWorkers, project: Project, fake_judge: FakeJudgeServer, settings: Any
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE_SECONDS)
    fake_judge.responder = Script(err_on={("t1", "warmth")}, bad_steering={"t3"})
    fake_judge.latency_s = 0.1
    synthesis_project(project, fake_judge, TASKS)
    JudgeEndpoint.objects.filter(project=project).update(max_concurrency=CONCURRENCY)
    first = celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    run = synthesis_start(**start_arguments(project))  # autocommit: the message goes out now
    draws = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis)
    assert wait_for(lambda: draws.exclude(outcome="pending").count() >= 3, timeout=90)
    celery_workers.kill(first)
    owner = Job.objects.get(pk=run.job_id).owner
    assert Job.objects.get(pk=run.job_id).status == JobStatus.RUNNING
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    assert wait_for(lambda: Job.objects.get(pk=run.job_id).status not in Job.ACTIVE, timeout=180)
    job = Job.objects.get(pk=run.job_id)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.owner != owner and job.done == job.total == 12
    assert draws.count() == 11 and draws.filter(outcome=DrawOutcome.KEPT).count() == 10
    assert Response.objects.filter(task__project=project).count() == 22
    # Only the calls in flight at the kill (each endpoint's concurrency at most) were repeated.
    bodies = Counter(json.dumps(r.body, sort_keys=True) for r in fake_judge.requests)
    repeated = sum(count - 1 for count in bodies.values())
    assert repeated <= CONCURRENCY * 5, f"{repeated} calls were made twice"
