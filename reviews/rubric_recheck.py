"""The instant effect of an edit: re-grade the one task with the program that wrote its rubric,
then compare each response's reward, and the task's ranking accuracy against the experts,
before and after.

A re-check is an ordinary grading run over one task. Its check calls for the criteria that did
not change are the same requests as before, so they come from the judge-call cache and only
the edited criterion is really judged again (for a rubric program; a pairwise_rubric program
shows the whole rubric in every comparison, so all of them are judged again)."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from graders.engine.metrics import (
    ranking_accuracy,
)
from graders.evaluation import PREFERENCES_REFERENCE, reference_pairs
from graders.models import Grade, GradingItem, GradingRun, ItemStatus, Metagrader
from graders.services import grading_run_start
from labeling.jobs import job_cancel
from labeling.models import Job, Response, Rubric, ScoreProvider
from reviews.rubric_grader import rubric_judge, rubric_writer

REFERENCE_NAMES = {
    ScoreProvider.TRUE_GRADER: "true-grader scores",
    ScoreProvider.EXPERT: "expert scores",
    PREFERENCES_REFERENCE: "expert preferences",
    f"{ScoreProvider.TRUE_GRADER}+preferences": "true-grader scores and expert preferences",
    f"{ScoreProvider.EXPERT}+preferences": "expert scores and expert preferences",
}


@dataclass(frozen=True)
class TaskAccuracy:
    value: float
    pairs: int
    reference: str


@dataclass(frozen=True)
class RewardRow:
    label: str
    before: float | None
    after: float | None

    @property
    def change(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before


@dataclass(frozen=True)
class Recheck:
    run: GradingRun | None  # the newest run of the rubric's program on this task
    previous: GradingRun | None  # the newest one before it that finished the task
    key: str  # the criterion whose edit started `run`, if an edit did
    finished: bool  # `run` graded the task
    rewards: list[RewardRow]
    accuracy_before: TaskAccuracy | None
    accuracy_after: TaskAccuracy | None

    @property
    def active(self) -> bool:
        return self.run is not None and self.run.job.is_active


def recheck_start(*, rubric: Rubric, key: str | None, user: Any) -> GradingRun:
    """Grade the rubric's task again with the program that wrote the rubric, on the project's
    default judge. Raises RubricSetupMissing or graders.services.RunInvalid (no responses)."""
    task = rubric.task
    grader = rubric_writer(rubric=rubric)
    endpoint = rubric_judge(project=task.project)
    # One transaction, so the job names its criterion before the worker can pick it up.
    with transaction.atomic():
        # One re-check start at a time per rubric, so each sees the one before it.
        Rubric.objects.select_for_update().filter(pk=rubric.pk).first()
        stale = list(Job.objects.filter(params__recheck__rubric=rubric.pk, status__in=Job.ACTIVE))
        run = grading_run_start(
            project=task.project,
            metagrader=grader,
            endpoint=endpoint,
            task_ids=[task.external_id],
            user=user,
        )
        recheck = {"rubric": rubric.pk, "version": rubric.version, "item": key or ""}
        Job.objects.filter(pk=run.job_id).update(params={**run.job.params, "recheck": recheck})
        # Earlier re-checks of this rubric check an older version: a waiting one is dropped,
        # a running one stops before its next judge call (the answers it already has are in
        # the judge cache, where this run finds them, and it stores no grade for the task).
        for job in stale:
            job_cancel(job=job, reason=f"Superseded by run #{run.pk}, after a newer change.")
    return run


def recheck_view(*, rubric: Rubric, grader: Metagrader) -> Recheck:
    """The newest run on the task against the one before it."""
    task = rubric.task
    runs = GradingRun.objects.filter(metagrader=grader, items__task=task).select_related("job")
    run = runs.order_by("-pk").first()
    if run is None:
        return Recheck(None, None, "", False, [], None, None)
    previous = (
        runs.filter(pk__lt=run.pk, items__task=task, items__status=ItemStatus.DONE)
        .order_by("-pk")
        .first()
    )
    finished = GradingItem.objects.filter(run=run, task=task, status=ItemStatus.DONE).exists()
    response_pks = list(
        Response.objects.filter(task=task).order_by("external_id").values_list("pk", flat=True)
    )
    before = _rewards(previous, response_pks)
    after = _rewards(run, response_pks) if finished else {}
    return Recheck(
        run=run,
        previous=previous,
        key=str(run.job.params.get("recheck", {}).get("item", "")),
        finished=finished,
        rewards=[
            RewardRow(f"Response {n}", before.get(pk), after.get(pk))
            for n, pk in enumerate(response_pks, 1)
        ],
        accuracy_before=task_ranking_accuracy(rewards=before) if previous else None,
        accuracy_after=task_ranking_accuracy(rewards=after) if finished else None,
    )


def _rewards(run: GradingRun | None, response_pks: list[int]) -> dict[int, float | None]:
    if run is None:
        return {}
    return dict(
        Grade.objects.filter(run=run, response_id__in=response_pks).values_list(
            "response_id", "reward"
        )
    )


def task_ranking_accuracy(*, rewards: dict[int, float | None]) -> TaskAccuracy | None:
    """Ranking accuracy (reported: a tie earns 0, a failed grade never helps) of one task's
    rewards against the experts: true-grader scores if its responses have them, else expert
    scores, else the human majority of overall preferences. None when no pair can be ranked.
    The same choice of reference as graders.evaluation, for one task and without intervals."""
    found = reference_pairs(rewards, dict.fromkeys(rewards, 0))
    if found is None or len(found[1].task) == 0:
        return None
    reference, pairs, _ = found
    return TaskAccuracy(ranking_accuracy(pairs), len(pairs.task), REFERENCE_NAMES[reference])
