"""Rubric writing on a real Celery worker and broker: the job the page starts is delivered to
the worker (found by autodiscovery through reviews.tasks) and writes the rubrics."""

import pytest

from graders.models import JudgeEndpoint, Metagrader
from labeling.models import Job, JobStatus, Project, Rubric
from reviews.rubric_generation import rubric_generation_start
from tests.conftest import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_worker_writes_the_rubrics_of_a_split(
    celery_worker_process: str,
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
) -> None:
    job = rubric_generation_start(project=review_project, split="eval")  # sent on commit
    assert wait_for(lambda: Job.objects.get(pk=job.pk).status not in Job.ACTIVE, timeout=90)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.result["generated"] == 2
    assert Rubric.objects.filter(author_kind="generated").count() == 2
