"""The automatic re-search policy (graders/research.py research_on_drift): a drift alert on a
promoted grader starts one re-search within the budget, none again on the same labels, and
another once a new fresh label arrives; a submitted label wakes the policy."""

import pytest
from django.core.cache import cache

from graders.models import SearchRun
from graders.research import research_on_drift, research_watch_soon
from labeling.models import Job, JobStatus, Project
from labeling.queue import LabelInput, label_submit, pair_claim_next
from labeling.signals import label_submitted
from tests.graders.test_drift import captured_pair, labeled_run, prefer, promoted
from tests.labeling.test_queue import annotators, queued  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    cache.clear()


def policy_on(project: Project) -> None:
    project.research_auto = True
    project.research_max_calls = 300
    project.save()


def test_one_re_search_per_set_of_fresh_labels(search_project: Project) -> None:
    grader = promoted(search_project)
    labeled_run(grader, 25, agrees=5)  # fresh accuracy 0.2 against 0.9 at selection: the alert
    assert research_on_drift(search_project) == []  # the policy is off by default
    policy_on(search_project)

    (first,) = research_on_drift(search_project)
    assert first.reason == "started" and first.search is not None
    assert first.search.warm_start == grader and first.search.max_calls == 300

    (queued_again,) = research_on_drift(search_project)
    assert (queued_again.search, queued_again.reason) == (
        None, "re-searched since the newest fresh label",
    )  # fmt: skip
    # Finished, with nothing promoted: research_maybe_start alone would start it all over.
    Job.objects.filter(pk=first.search.job_id).update(status=JobStatus.SUCCEEDED)
    (finished,) = research_on_drift(search_project)
    assert finished.reason == "re-searched since the newest fresh label"
    assert SearchRun.objects.filter(warm_start=grader).count() == 1

    # A new fresh label the grader also gets wrong: new evidence, a new re-search.
    first_response, second_response = captured_pair(grader, 99, (0.1, 0.9), step=99)
    label = prefer(first_response, second_response)
    assert label.created_at > first.search.created_at
    cache.clear()
    (second,) = research_on_drift(search_project)
    assert second.reason == "started" and second.search is not None
    assert second.search.pk != first.search.pk


def test_an_agreeing_grader_is_left_alone(search_project: Project) -> None:
    grader = promoted(search_project)
    labeled_run(grader, 25, agrees=25)
    policy_on(search_project)
    (decision,) = research_on_drift(search_project)
    assert (decision.search, decision.reason) == (None, "no drift alert")
    assert not SearchRun.objects.filter(warm_start=grader).exists()


def test_a_submitted_label_wakes_the_policy_once_per_interval(queued: Project) -> None:  # noqa: F811
    (alice,) = annotators(queued, "alice")
    heard: list[Project] = []

    def listen(sender: object, project: Project, **_: object) -> None:
        heard.append(project)

    label_submitted.connect(listen)
    try:
        assignment = pair_claim_next(project=queued, annotator=alice)
        assert assignment is not None
        label_submit(assignment=assignment, label=LabelInput("left", 1, 3.0))
        label_submit(assignment=assignment, label=LabelInput("left", 1, 3.0))  # a retry
    finally:
        label_submitted.disconnect(listen)
    assert [project.pk for project in heard] == [queued.pk]  # the retry is no new label

    assert research_watch_soon(queued) is False  # the policy is off
    policy_on(queued)
    # The app's own receiver ran on the label above while the policy was off: nothing pending.
    assert research_watch_soon(queued) is True
    assert research_watch_soon(queued) is False  # one round for labels of the same interval
