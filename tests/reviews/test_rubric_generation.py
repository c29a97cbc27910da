"""Writing rubrics as a job: the real engine over real HTTP to the fake judge, one generated
rubric per task stored under the program's hash, reruns that change nothing, regeneration as a
new version, and a later grading run that reads the stored (reviewed) rubric."""

import json
from typing import Any

import pytest

from graders.engine.programs import Criterion, GeneratedRubric
from graders.grading import grading_run_execute
from graders.models import Grade, JudgeEndpoint, Metagrader
from graders.services import grading_run_start
from labeling.jobs import job_cancel
from labeling.models import CriterionGrade, Job, Project, RetiredCriterionGrade, Rubric
from reviews.rubric_edit import criterion_save
from reviews.rubric_generation import (
    generated_rubric_store,
    rubric_generation_execute,
    rubric_generation_start,
)
from reviews.rubric_grader import RubricSetupMissing, grader_origin
from reviews.rubric_jobs import rubric_generation_task
from tests.fakes.openai_server import FakeJudgeServer
from tests.reviews.conftest import CAP, CLAUSE, CLAUSE_FIXED, expert_marks, generate

pytestmark = pytest.mark.django_db


def writing_calls(fake_judge: FakeJudgeServer) -> int:
    return sum(
        '"criteria"' in json.dumps(r.body.get("response_format")) for r in fake_judge.requests
    )


def regenerate(rubric: Rubric, *criteria: Criterion) -> str:
    """Store `criteria` as the program's new answer for the rubric's task, as a regeneration."""
    written = GeneratedRubric(rubric.task.external_id, criteria, None, ())
    return generated_rubric_store(
        task_pk=rubric.task_id, origin=rubric.origin, generated=written, editor="regenerated"
    )


def test_a_job_writes_one_rubric_per_task_and_a_second_delivery_does_nothing(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks() as sent:
        job = rubric_generation_start(project=review_project, split="eval", user=None)
    assert len(sent) == 1 and job.status == "queued" and job.kind == "rubric_generation"
    result = rubric_generation_task(job.pk)
    assert result["status"] == "succeeded" and result["generated"] == 2
    rubrics = Rubric.objects.filter(author_kind="generated").order_by("task__external_id")
    assert [r.task.external_id for r in rubrics] == ["t0", "t1"]  # the eval split only
    assert {r.origin for r in rubrics} == {grader_origin(rubric_grader_selected)}
    assert list(rubrics[0].items.values_list("key", "text", "weight")) == [
        ("c1", CAP, 2.0),
        ("c2", CLAUSE, 1.0),
    ]
    assert rubrics[0].revisions.get().editor == f"grader {rubric_grader_selected.pk}"
    job.refresh_from_db()
    assert job.status == "succeeded" and job.done == job.total == 2
    assert job.result["generated"] == 2 and job.result["usage"]["calls"] == 2
    calls = fake_judge.call_count
    assert rubric_generation_task(job.pk) == {"job": job.pk, "skipped": True}
    assert fake_judge.call_count == calls


def test_tasks_with_a_rubric_are_skipped_unless_regenerated(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
) -> None:
    generate(review_project, ["t0"])
    rubric = Rubric.objects.get(author_kind="generated")
    criterion_save(
        rubric=rubric, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=1, editor="rob"
    )
    calls = fake_judge.call_count
    again = generate(review_project, ["t0", "t1"])
    assert (again["skipped"], again["generated"]) == (1, 1)
    rubric.refresh_from_db()
    assert rubric.version == 2 and rubric.items.get(key="c2").text == CLAUSE_FIXED
    assert fake_judge.call_count == calls + 1  # only t1 was written
    regenerated = generate(review_project, ["t0", "t1"], regenerate=True)
    # t0's reviewed rubric differs from what the program writes: a new version; t1's is the
    # same (the judge's answer came from the cache): no version.
    assert (regenerated["updated"], regenerated["unchanged"]) == (1, 1)
    assert fake_judge.call_count == calls + 1
    rubric.refresh_from_db()
    assert rubric.version == 3 and rubric.items.get(key="c2").text == CLAUSE
    assert list(rubric.revisions.values_list("version", flat=True)) == [1, 2, 3]


def test_a_regenerated_criterion_under_an_old_number_gets_a_new_key(generated: Rubric) -> None:
    rubric = generated
    expert_marks(rubric, {("c2", "GOOD"): True})
    law = "Names the governing law."

    outcome = regenerate(
        rubric, Criterion("c1", CAP, 2.0), Criterion("c2", law), Criterion("c3", "Names the buyer.")
    )

    assert outcome == "updated"
    # c2 now says something else: a new key, so the grade given on the clause criterion does
    # not pass to the governing law; it is set aside with the clause's text.
    assert list(rubric.items.values_list("key", "text")) == [
        ("c1", CAP),
        ("c4", law),
        ("c3", "Names the buyer."),
    ]
    assert not CriterionGrade.objects.exists()
    assert RetiredCriterionGrade.objects.get().item_text == CLAUSE


def test_a_regeneration_that_renumbers_keeps_each_criterion_s_key_and_grades(
    generated: Rubric,
) -> None:
    rubric = generated
    expert_marks(rubric, {("c1", "GOOD"): True, ("c2", "GOOD"): False})
    new = "Names the buyer."
    # One criterion added at the top: the judge numbers the old two c2 and c3 now.
    written = (Criterion("c1", new), Criterion("c2", CAP, 2.0), Criterion("c3", CLAUSE))

    regenerate(rubric, *written)

    assert list(rubric.items.values_list("key", "text")) == [
        ("c4", new),
        ("c1", CAP),
        ("c2", CLAUSE),
    ]
    kept = CriterionGrade.objects.filter(item__rubric=rubric)
    assert sorted(kept.values_list("item__text", "passed")) == [(CLAUSE, False), (CAP, True)]
    assert not RetiredCriterionGrade.objects.exists()
    # The same answer again (the judge numbers it the same way) changes nothing.
    again = regenerate(rubric, *written)
    rubric.refresh_from_db()
    assert again == "unchanged" and rubric.version == 2


def test_a_criterion_s_current_text_keeps_its_key_before_a_text_it_held_once(
    generated: Rubric,
) -> None:
    rubric = generated
    criterion_save(
        rubric=rubric, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=1, editor="rob"
    )
    expert_marks(rubric, {("c2", "GOOD"): True})  # given on the reviewed text

    regenerate(
        rubric, Criterion("c1", CLAUSE), Criterion("c2", CLAUSE_FIXED), Criterion("c3", CAP, 2.0)
    )

    items = dict(rubric.items.values_list("text", "key"))
    assert items[CLAUSE_FIXED] == "c2" and items[CAP] == "c1" and items[CLAUSE] == "c4"
    grade = CriterionGrade.objects.get(item__rubric=rubric)
    assert (grade.item.key, grade.item.text) == ("c2", CLAUSE_FIXED)


def test_a_grading_run_reads_the_reviewed_rubric_instead_of_writing_one(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
) -> None:
    generate(review_project, ["t0"])
    rubric = Rubric.objects.get(author_kind="generated")
    criterion_save(
        rubric=rubric, seen_version=1, key="c2", text=CLAUSE_FIXED, weight=1, editor="rob"
    )
    run = grading_run_start(
        project=review_project,
        metagrader=rubric_grader_selected,
        endpoint=review_judge,
        task_ids=["t0"],
    )
    grading_run_execute(run_id=run.pk)
    assert writing_calls(fake_judge) == 1  # the generation job's, none from the run
    grade = Grade.objects.get(run=run, response__content__startswith="GOOD")
    assert [c["text"] for c in grade.criteria] == [CAP, CLAUSE_FIXED] and grade.reward == 1.0


def test_failures_are_recorded_per_task_and_cancel_stops_the_job(
    review_project: Project,
    rubric_grader_selected: Metagrader,
    review_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
) -> None:
    fake_judge.responder = lambda body: "I cannot write a rubric."
    result = generate(review_project, ["t0"])
    assert result["failed"] == 1 and not Rubric.objects.filter(author_kind="generated").exists()
    job = Job.objects.get(kind="rubric_generation")
    assert job.result["failures"][0]["task"] == "t0" and job.result["failures"][0]["error"]
    # Every task failed: the job failed, and says why.
    assert job.status == "failed"
    assert job.error.startswith("No rubric was written: all 1 task failed (task t0: ")
    queued = rubric_generation_start(project=review_project, task_ids=["t1"])
    job_cancel(job=queued)  # a queued job stops at once: its message finds nothing to do
    assert rubric_generation_execute(job_id=queued.pk)["skipped"]
    running = rubric_generation_start(project=review_project, task_ids=["t1"])
    # A cancel asked while the job runs is seen at its next progress report.
    Job.objects.filter(pk=running.pk).update(cancel_requested=True)
    assert rubric_generation_execute(job_id=running.pk)["status"] == "cancelled"
    running.refresh_from_db()
    assert running.status == "cancelled" and running.finished_at is not None
    assert not Rubric.objects.filter(task__external_id="t1").exclude(author_kind="expert").exists()


def test_a_job_whose_judge_was_deleted_fails_instead_of_running_forever(
    review_project: Project, rubric_grader_selected: Metagrader, review_judge: JudgeEndpoint
) -> None:
    job = rubric_generation_start(project=review_project, task_ids=["t0"])
    JudgeEndpoint.objects.filter(pk=review_judge.pk).delete()
    with pytest.raises(JudgeEndpoint.DoesNotExist):
        rubric_generation_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == "failed" and "DoesNotExist" in job.error


def test_generation_needs_a_selected_rubric_grader_and_a_default_judge(
    review_project: Project, review_judge: JudgeEndpoint
) -> None:
    with pytest.raises(RubricSetupMissing, match="No rubric grader is selected") as missing:
        rubric_generation_start(project=review_project, split="eval")
    assert missing.value.page == "graders"
    assert not Job.objects.exists()
