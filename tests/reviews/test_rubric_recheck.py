"""The instant effect of an edit: a re-check run of the one task that asks the judge only
about the edited criterion (the rest come from the cache), and the rewards and the task's
ranking accuracy before and after."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.grading import grading_run_execute
from graders.models import Grade, GradingRun, JudgeEndpoint, Metagrader
from labeling.models import Annotator, Job, JobStatus, Preference, Response, Rubric, Score
from reviews.rubric_recheck import recheck_start, recheck_view, task_ranking_accuracy
from tests.fakes.openai_server import FakeJudgeServer
from tests.reviews.conftest import CLAUSE_FIXED

pytestmark = pytest.mark.django_db


def prompts(fake_judge: FakeJudgeServer, since: int) -> list[str]:
    return [
        "\n".join(str(m["content"]) for m in request.body["messages"])
        for request in fake_judge.requests[since:]
    ]


def test_an_edit_rechecks_only_the_edited_criterion_and_shows_before_and_after(
    generated: Rubric,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    reviewer_user: User,
    fake_judge: FakeJudgeServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    first = recheck_start(rubric=generated, key=None, user=reviewer_user)
    grading_run_execute(run_id=first.pk)
    before_edit = fake_judge.call_count
    client = Client()
    client.force_login(reviewer_user)
    with django_capture_on_commit_callbacks() as sent:
        response = client.post(
            reverse("rubric-item-save", args=["acme", generated.pk]),
            {"key": "c2", "version": 1, "text": CLAUSE_FIXED, "weight": 1},
            headers={"HX-Request": "true"},
        )
    assert response.status_code == 200 and len(sent) == 1
    page = response.content.decode()
    assert 'id="recheck-spinner"' in page and 'data-state="running"' in page
    run = GradingRun.objects.exclude(pk=first.pk).get()
    assert run.job.params["recheck"] == {"rubric": generated.pk, "version": 2, "item": "c2"}
    assert recheck_view(rubric=generated, grader=rubric_grader_selected).active
    grading_run_execute(run_id=run.pk)
    asked = prompts(fake_judge, before_edit)
    # Three responses, one new check each; the unchanged criterion came from the cache.
    assert len(asked) == 3 and all(CLAUSE_FIXED in prompt for prompt in asked)
    run.refresh_from_db()
    assert run.usage["calls"] == 3 and run.usage["cache_hits"] == 3

    view = recheck_view(rubric=generated, grader=rubric_grader_selected)
    assert view.run == run and view.previous == first and view.finished and view.key == "c2"
    # Before: GOOD 2/3, OKAY 3/3, POOR 1/3. After: GOOD 3/3, OKAY 2/3, POOR 0.
    assert [(r.before, r.after) for r in view.rewards] == [
        (pytest.approx(2 / 3), 1.0),
        (1.0, pytest.approx(2 / 3)),
        (pytest.approx(1 / 3), 0.0),
    ]
    # True scores GOOD > OKAY > POOR: before, GOOD under OKAY loses 1 of 3 pairs; after, none.
    assert view.accuracy_before.value == pytest.approx(2 / 3)
    assert view.accuracy_after.value == 1.0 and view.accuracy_after.pairs == 3
    assert view.accuracy_after.reference == "true-grader scores"

    status = client.get(
        reverse("rubric-recheck-status", args=["acme", generated.pk]),
        headers={"HX-Request": "true"},
    ).content.decode()
    assert 'data-state="finished"' in status and "0.667" in status and "1.000" in status
    assert 'id="judgement" hx-swap-oob="true"' in status
    assert 'id="recheck-spinner" hx-swap-oob="delete"' in status


def test_a_newer_edit_supersedes_the_re_checks_waiting_or_running_for_older_ones(
    generated: Rubric,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    reviewer_user: User,
    fake_judge: FakeJudgeServer,
) -> None:
    older = recheck_start(rubric=generated, key="c1", user=reviewer_user)
    running = recheck_start(rubric=generated, key="c2", user=reviewer_user)
    Job.objects.filter(pk=running.job_id).update(status=JobStatus.RUNNING)
    unrelated = recheck_start(rubric=generated, key=None, user=reviewer_user)
    Job.objects.filter(pk=unrelated.job_id).update(params={})  # a run that is no re-check

    newest = recheck_start(rubric=generated, key="c2", user=reviewer_user)

    jobs = {run.pk: Job.objects.get(pk=run.job_id) for run in (older, running, unrelated, newest)}
    assert jobs[older.pk].status == JobStatus.CANCELLED  # waiting: dropped
    # Running: asked to stop, which it does before its next judge call.
    assert jobs[running.pk].status == JobStatus.RUNNING and jobs[running.pk].cancel_requested
    assert jobs[unrelated.pk].status == JobStatus.QUEUED
    assert jobs[newest.pk].status == JobStatus.QUEUED
    calls = fake_judge.call_count
    grading_run_execute(run_id=older.pk)
    grading_run_execute(run_id=running.pk)
    assert fake_judge.call_count == calls  # the superseded ones ask the judge nothing
    stopped = Job.objects.get(pk=running.job_id)
    assert stopped.status == JobStatus.CANCELLED
    assert stopped.error == f"Superseded by run #{newest.pk}, after a newer change."
    assert not Grade.objects.filter(run=running)
    grading_run_execute(run_id=newest.pk)
    assert fake_judge.call_count == calls + 6  # 3 responses x 2 criteria, once


def test_accuracy_against_expert_preferences_when_no_scores(generated: Rubric) -> None:
    good, okay, poor = Response.objects.filter(task=generated.task).order_by("external_id")
    lena = Annotator.objects.create(project=generated.task.project, name="lena")
    Preference.objects.create(task=generated.task, response_a=good, response_b=poor, choice="a",
                              provider="human", annotator=lena)  # fmt: skip
    Preference.objects.create(task=generated.task, response_a=okay, response_b=good, choice="b",
                              provider="human", annotator=lena)  # fmt: skip
    Score.objects.filter(response__task=generated.task).delete()
    accuracy = task_ranking_accuracy(rewards={good.pk: 0.9, okay.pk: 0.9, poor.pk: None})
    # good > poor: poor failed, so the pair is lost; good > okay: a tie earns 0.
    assert accuracy is not None and (accuracy.value, accuracy.pairs) == (0.0, 2)
    assert accuracy.reference == "expert preferences"
    assert task_ranking_accuracy(rewards={good.pk: 1.0, okay.pk: 0.5, poor.pk: 0.0}).value == 1.0
    Preference.objects.all().delete()
    assert task_ranking_accuracy(rewards={good.pk: 1.0}) is None


def test_a_recheck_without_a_default_judge_is_reported_not_raised(
    generated: Rubric, reviewer_user: User
) -> None:
    JudgeEndpoint.objects.update(is_default=False)
    client = Client()
    client.force_login(reviewer_user)
    response = client.post(
        reverse("rubric-item-save", args=["acme", generated.pk]),
        {"key": "c2", "version": 1, "text": CLAUSE_FIXED, "weight": 1},
        headers={"HX-Request": "true"},
    )
    page = response.content.decode()
    assert response.status_code == 200 and "Saved as version 2; not re-checked" in page
    assert "no default judge endpoint" in page and not GradingRun.objects.exists()
