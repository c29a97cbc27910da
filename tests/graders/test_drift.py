"""Drift of a promoted grader (graders/drift.py) and `manage.py drift`, on captured groups and
labels built directly: a grader selected at tolerant accuracy 0.9 on a snapshot, rollouts it
rewarded at training time, and expert labels made after that snapshot."""

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.utils import timezone

from graders.drift import DriftInvalid, drift_alerts, drift_report, promoted_graders
from graders.engine.baseline import baseline_program
from graders.models import (
    Candidate,
    CapturedGroup,
    CapturedResponse,
    GraderAlias,
    GraderSelection,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    SearchRun,
)
from graders.services import metagrader_register
from labeling.access import ProjectAccess
from labeling.models import Annotator, Job, LabelSnapshot, Preference, Project, Response, Task

pytestmark = pytest.mark.django_db

SELECTED_AT = 0.9  # the selection run's tolerant ranking accuracy


@pytest.fixture(autouse=True)
def reports_uncached() -> None:
    cache.clear()


def promoted(project: Project) -> Metagrader:
    """A grader that won a search on a snapshot taken two days ago, behind `production`."""
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="human"
    )
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="fake", base_url="http://127.0.0.1:9/v1", model="fake"
    )
    snapshot = LabelSnapshot.objects.create(project=project, content_hash="before")
    LabelSnapshot.objects.filter(pk=snapshot.pk).update(
        created_at=timezone.now() - timedelta(days=2)
    )
    search = SearchRun.objects.create(
        project=project, job=Job.objects.create(project=project, kind="search"), kind="scalar",
        mode="best_of_n", endpoint=endpoint, n=1, snapshot=snapshot,
    )  # fmt: skip
    run = GradingRun.objects.create(
        project=project, metagrader=grader, endpoint=endpoint, split="selection",
        job=Job.objects.create(project=project, kind="grading"), search=search,
        evaluation={"tolerant_ranking_accuracy": {"value": SELECTED_AT, "ci": [0.85, 0.95]}},
    )  # fmt: skip
    candidate = Candidate.objects.create(
        search=search, metagrader=grader, iteration=0, position=0, selection_run=run
    )
    SearchRun.objects.filter(pk=search.pk).update(winner=candidate)
    GraderAlias.objects.create(project=project, name="production", kind="scalar", metagrader=grader)
    return grader


def captured_pair(
    grader: Metagrader, index: int, rewards: tuple[float | None, float | None], step: int | None
) -> tuple[Response, Response]:
    """A task with one captured group of two rollouts and the rewards the grader gave them."""
    project = grader.project
    task = Task.objects.create(project=project, external_id=f"t{index}", prompt=f"Task {index}")
    group = CapturedGroup.objects.create(
        project=project, task=task, source="reward", metagrader=grader, step=step
    )
    responses = []
    for position, reward in enumerate(rewards):
        response = Response.objects.create(
            project=project, task=task, external_id=f"t{index}-r{position}", content=f"r{position}"
        )
        CapturedResponse.objects.create(
            group=group, response=response, task=task, content_hash=f"{index}-{position}",
            reward=reward, position=position,
        )  # fmt: skip
        responses.append(response)
    return responses[0], responses[1]


def prefer(first: Response, second: Response, name: str = "eve") -> Preference:
    """A human overall label preferring `first`."""
    annotator, _ = Annotator.objects.get_or_create(project=first.project, name=name)
    return Preference.objects.create(
        task=first.task, response_a=first, response_b=second, choice="a", provider="human",
        annotator=annotator,
    )  # fmt: skip


def labeled_run(grader: Metagrader, tasks: int, *, agrees: int, step_of: Any = None) -> None:
    """`tasks` captured pairs labeled first-over-second; the grader rewards the first higher
    on the first `agrees` of them and lower on the rest."""
    for index in range(tasks):
        rewards = (0.9, 0.1) if index < agrees else (0.1, 0.9)
        first, second = captured_pair(grader, index, rewards, step_of(index) if step_of else index)
        prefer(first, second)


def test_fresh_accuracy_below_selection_raises_the_alert(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)  # 5 / 25 = 0.2, far below 0.9 - 0.05
    report = drift_report(grader=grader)
    assert report["selection"]["accuracy"]["value"] == SELECTED_AT
    assert report["overall"]["pairs"] == 25 and report["overall"]["value"] == pytest.approx(0.2)
    assert report["overall"]["ci"][1] < SELECTED_AT - 0.05
    assert report["alert"]


def test_agreeing_grader_raises_nothing(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=25)
    report = drift_report(grader=grader)
    assert report["overall"]["value"] == 1.0
    assert not report["alert"]
    access = ProjectAccess(project, "admin")
    assert drift_alerts(access) == []


def test_too_few_fresh_pairs_raise_no_alert(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 19, agrees=0)  # drift_min_pairs defaults to 20
    assert not drift_report(grader=grader)["alert"]
    project.drift_min_pairs = 19
    project.save()
    grader.refresh_from_db()
    assert drift_report(grader=grader)["alert"]


def test_labels_before_the_snapshot_are_not_fresh(project: Project) -> None:
    grader = promoted(project)
    first, second = captured_pair(grader, 0, (0.1, 0.9), 3)
    old = prefer(first, second)
    Preference.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    assert drift_report(grader=grader)["overall"] is None


def test_pairs_without_rewards_from_this_grader_are_listed_not_scored(project: Project) -> None:
    grader = promoted(project)
    first, second = captured_pair(grader, 0, (0.9, 0.1), 3)
    prefer(first, second)
    # A pair of imported responses: never captured from this grader.
    task = Task.objects.create(project=project, external_id="imported", prompt="Imported")
    a, b = (
        Response.objects.create(project=project, task=task, external_id=f"i{n}") for n in (0, 1)
    )
    prefer(a, b)
    report = drift_report(grader=grader)
    assert report["overall"]["pairs"] == 1
    assert report["not_scored"]["count"] == 1
    assert report["not_scored"]["pairs"] == [
        {"winner": a.pk, "loser": b.pk, "reason": "not captured from this grader"}
    ]
    assert "grading run" in report["not_scored"]["note"]


def test_failed_grade_counts_as_a_miss(project: Project) -> None:
    grader = promoted(project)
    first, second = captured_pair(grader, 0, (None, 0.5), 3)
    prefer(first, second)
    first, second = captured_pair(grader, 1, (0.9, 0.1), 3)
    prefer(first, second)
    # (0 + 1) / 2: the failed grade earns nothing.
    assert drift_report(grader=grader)["overall"]["value"] == 0.5


def test_majority_decides_and_ties_drop_out(project: Project) -> None:
    grader = promoted(project)
    first, second = captured_pair(grader, 0, (0.9, 0.1), 3)
    prefer(first, second, "eve")
    prefer(second, first, "bob")  # one vote each: no majority, not a fresh pair
    assert drift_report(grader=grader)["overall"] is None
    prefer(second, first, "ann")  # two of three prefer second, which the grader scored lower
    assert drift_report(grader=grader)["overall"]["value"] == 0.0


def test_reward_hacking_signal_over_step_buckets(project: Project) -> None:
    grader = promoted(project)
    # Buckets of 10 steps: the grader agrees on steps 0-9, half on 10-19, never on 20-29,
    # while every group's rewards sum higher with step (mean reward 0.5, 0.55, 0.6).
    for index in range(6):
        bucket = index // 2
        agrees = bucket == 0 or (bucket == 1 and index % 2 == 0)
        lift = 0.05 * bucket
        rewards = (0.9 + lift, 0.1 + lift) if agrees else (0.1 + lift, 0.9 + lift)
        first, second = captured_pair(grader, index, rewards, 10 * bucket + index)
        prefer(first, second)
    report = drift_report(grader=grader)
    assert [b["accuracy"]["value"] for b in report["buckets"]] == [1.0, 0.5, 0.0]
    assert [b["mean_reward"] for b in report["buckets"]] == pytest.approx([0.5, 0.55, 0.6])
    assert report["reward_rho"] == pytest.approx(1.0)
    assert report["agreement_rho"] == pytest.approx(-1.0)
    assert report["hacking"]


def test_report_is_recomputed_when_a_label_arrives(project: Project) -> None:
    grader = promoted(project)
    first, second = captured_pair(grader, 0, (0.9, 0.1), 3)
    prefer(first, second)
    assert drift_report(grader=grader)["overall"]["pairs"] == 1
    first, second = captured_pair(grader, 1, (0.9, 0.1), 4)
    prefer(first, second)
    assert drift_report(grader=grader)["overall"]["pairs"] == 2


def test_grader_without_a_search_compares_with_nothing(project: Project) -> None:
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="human"
    )
    first, second = captured_pair(grader, 0, (0.1, 0.9), 3)
    prefer(first, second)
    report = drift_report(grader=grader)
    assert report["selection"] == {"search": None, "snapshot": None, "since": None,
                                   "accuracy": None}  # fmt: skip
    assert report["overall"]["value"] == 0.0
    assert not report["alert"]


def test_promoted_graders_are_alias_targets_and_current_selections(project: Project) -> None:
    grader = promoted(project)
    older, selected, _nothing_points_at_it = (
        metagrader_register(
            project=project,
            program=baseline_program("scalar").to_json() | {"description": name},
            origin="human",
        )
        for name in ("older", "selected", "unused")
    )
    assert promoted_graders(project=project) == [grader]
    GraderSelection.objects.create(project=project, kind="scalar", version=1, metagrader=older)
    GraderSelection.objects.create(project=project, kind="scalar", version=2, metagrader=selected)
    # The alias target and version 2; not version 1, not a grader nothing points at.
    assert promoted_graders(project=project) == [grader, selected]


def test_bad_parameters_are_refused(project: Project) -> None:
    grader = promoted(project)
    with pytest.raises(DriftInvalid, match="--step-bucket"):
        drift_report(grader=grader, step_bucket=0)
    with pytest.raises(DriftInvalid, match="--window-days"):
        drift_report(grader=grader, window_days=0)


def test_command_json(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5, step_of=lambda index: index)
    out = io.StringIO()
    call_command(
        "drift", "--project", "acme", "--grader", str(grader.pk), "--json", "--step-bucket", "5",
        stdout=out,
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert report["grader"]["id"] == grader.pk
    assert report["alert"] is True
    assert report["step_bucket"] == 5
    # Steps 0-24 in buckets of 5: the first holds the 5 agreeing pairs, the rest none.
    assert [(b["first_step"], b["accuracy"]["value"]) for b in report["buckets"]] == [
        (0, 1.0), (5, 0.0), (10, 0.0), (15, 0.0), (20, 0.0),
    ]  # fmt: skip
    assert report["windows"][0]["pairs"] == 25


def test_command_text_and_errors(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    out = io.StringIO()
    call_command("drift", "--project", "acme", "--grader", str(grader.pk), stdout=out)
    text = out.getvalue()
    assert "fresh: 0.200" in text and "more than 0.05 below" in text
    with pytest.raises(CommandError, match="not in project"):
        call_command("drift", "--project", "acme", "--grader", "999999")
    with pytest.raises(CommandError, match="--step-bucket"):
        call_command("drift", "--project", "acme", "--grader", str(grader.pk), "--step-bucket", "0")


def test_a_cached_report_costs_only_its_key_queries(
    project: Project, django_assert_num_queries: Any
) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    first = drift_report(grader=grader)
    # The four newest-id aggregates of the key, then the cache: no gathering, no bootstrap.
    with django_assert_num_queries(4):
        assert drift_report(grader=grader) == first


def test_the_promoting_search_beats_a_later_win(project: Project) -> None:
    grader = promoted(project)
    promoting = SearchRun.objects.get()
    later = SearchRun.objects.create(
        project=project, job=Job.objects.create(project=project, kind="search"), kind="scalar",
        mode="best_of_n", endpoint=promoting.endpoint, n=1,
        snapshot=LabelSnapshot.objects.create(project=project, content_hash="later"),
    )  # fmt: skip
    won = Candidate.objects.create(search=later, metagrader=grader, iteration=0, position=0)
    SearchRun.objects.filter(pk=later.pk).update(winner=won)
    without_run = drift_report(grader=grader)["selection"]
    assert (without_run["search"], without_run["accuracy"]) == (later.pk, None)
    GraderSelection.objects.create(
        project=project, kind="scalar", version=1, metagrader=grader, search=promoting
    )
    report = drift_report(grader=grader)
    assert report["selection"]["search"] == promoting.pk
    assert report["selection"]["accuracy"]["value"] == SELECTED_AT


def test_summary_bootstraps_only_the_overall_figure(project: Project) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)  # steps 0-24: three buckets of several tasks
    summary = drift_report(grader=grader, summary=True)
    assert summary["summary"] and summary["overall"]["ci"] is not None
    assert [b["accuracy"]["ci"] for b in summary["buckets"]] == [None, None, None]
    full = drift_report(grader=grader)
    assert not full["summary"]
    assert all(b["accuracy"]["ci"] is not None for b in full["buckets"])
    assert full["alert"] == summary["alert"] and full["overall"] == summary["overall"]
    # Once the full report is cached, a summary request reads it.
    assert drift_report(grader=grader, summary=True) == full
