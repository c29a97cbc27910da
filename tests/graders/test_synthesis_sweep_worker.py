"""A sweep on a real Celery worker and broker survives the worker's death: killed mid-run with
SIGKILL and replaced, it finishes with every score stored once and no judge call made twice
beyond those that were in flight."""

import json
from collections import Counter
from typing import Any

import pytest

from graders.models import JudgeEndpoint
from graders.synthesis.sweep import sweep_start
from labeling.models import Job, JobStatus, JudgeScore, Project
from tests.conftest import CeleryWorkers, wait_for
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis_rows import DrawSpec, synthesis_rows
from tests.graders.test_synthesis_sweep import scoring_responder

pytestmark = pytest.mark.worker
LEASE_SECONDS = "3"


def test_a_sweep_finishes_after_its_worker_is_killed_and_replaced(
    celery_workers: CeleryWorkers, project: Project, fake_judge: FakeJudgeServer, settings: Any
) -> None:
    settings.JOB_LEASE_SECONDS = float(LEASE_SECONDS)
    fake_judge.responder = scoring_responder
    fake_judge.latency_s = 0.15
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="small", base_url=fake_judge.base_url, model="tiny-1b",
        max_concurrency=2,
    )  # fmt: skip
    synthesis = synthesis_rows(project, [DrawSpec(trajectory=i % 2 == 1) for i in range(6)])
    first = celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    sweep = sweep_start(synthesis=synthesis, judges=[endpoint])  # the message goes out now
    assert wait_for(lambda: JudgeScore.objects.count() >= 6, timeout=90), "nothing was scored"
    celery_workers.kill(first)
    assert Job.objects.get(pk=sweep.job_id).status == JobStatus.RUNNING
    assert JudgeScore.objects.count() < 36
    celery_workers.start(WORKBENCH_JOB_LEASE_SECONDS=LEASE_SECONDS)
    assert wait_for(
        lambda: Job.objects.get(pk=sweep.job_id).status not in Job.ACTIVE, timeout=180
    ), "the sweep did not finish after the restart"
    job = Job.objects.get(pk=sweep.job_id)
    assert job.status == JobStatus.SUCCEEDED, job.error
    # 6 pairs x 2 responses x 3 runs, each once.
    assert JudgeScore.objects.count() == 36 and (job.done, job.total) == (36, 36)
    bodies = Counter(json.dumps(r.body, sort_keys=True) for r in fake_judge.requests)
    repeated = sum(count - 1 for count in bodies.values())
    assert repeated <= 2, f"{repeated} judge calls were made twice"
    assert len(bodies) == 36
