"""A search on a real Celery worker and broker survives the worker's death: killed mid-run
with SIGKILL and replaced, the search finishes with every grade stored once and no judge call
made twice beyond those that were in flight."""

import json
from collections import Counter
from typing import Any

import pytest

from graders.models import Candidate, Grade, GradingRun, JudgeEndpoint, SearchRun
from graders.search import search_start
from labeling.models import Job, JobStatus, Project, Response
from tests.conftest import CeleryWorkers, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.conftest import verifying_responder

pytestmark = pytest.mark.worker
LEASE_SECONDS = "3"


def graded_tasks(search: SearchRun) -> int:
    return (
        Grade.objects.filter(run__search=search).values("run", "response__task").distinct().count()
    )


def test_a_search_finishes_after_its_worker_is_killed_and_replaced(
    celery_workers: CeleryWorkers,
    search_project: Project,
    search_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
    settings: Any,
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE_SECONDS)
    fake_judge.responder = verifying_responder
    fake_judge.latency_s = 0.15
    JudgeEndpoint.objects.filter(pk=search_judge.pk).update(max_concurrency=2)
    first = celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=4, seed=3
    )  # autocommit: the message goes out now
    assert wait_for(lambda: graded_tasks(search) >= 3, timeout=90), "the first worker never graded"
    celery_workers.kill(first)
    owner = Job.objects.get(pk=search.job_id).owner
    assert Job.objects.get(pk=search.job_id).status == JobStatus.RUNNING
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    assert wait_for(
        lambda: Job.objects.get(pk=search.job_id).status not in Job.ACTIVE, timeout=180
    ), "the search did not finish after the restart"
    job = Job.objects.get(pk=search.job_id)
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.owner != owner  # the second worker took the lease over
    search.refresh_from_db()
    assert search.winner is not None
    # Every candidate graded every selection response exactly once (unique per run anyway),
    # and the winner's D_eval run is complete.
    selection_responses = Response.objects.filter(task__split="selection").count()
    for candidate in Candidate.objects.filter(search=search):
        assert Grade.objects.filter(run=candidate.selection_run).count() == selection_responses
    eval_run = GradingRun.objects.get(pk=search.winner.eval_run_id)
    assert (
        Grade.objects.filter(run=eval_run).count()
        == Response.objects.filter(task__split="eval").count()
    )
    # Only calls in flight at the kill (at most the endpoint's concurrency) were made again.
    bodies = Counter(json.dumps(r.body, sort_keys=True) for r in fake_judge.requests)
    repeated = sum(count - 1 for count in bodies.values())
    assert repeated <= 2, f"{repeated} judge calls were made twice"
