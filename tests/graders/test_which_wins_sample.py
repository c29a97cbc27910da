"""The "Which grader wins" panel at scale: its draw ranks a stratified sample of at most
RANKED_PAIRS unlabeled pairs and says so; with fewer pairs it is exactly the queue strategy's
draw; the committee's cached rewards follow every change to the grades."""

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.active import panel as panel_module
from graders.active.committee import committee_build
from graders.active.panel import NEXT_PAIRS, next_gain, pairs_sample, which_wins_panel
from graders.active.strategy import WhichGraderWins
from graders.models import Grade, SearchRun
from labeling.models import Project, Split
from labeling.strategies import CandidatePair
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_which_wins import expert_prefers, label
from tests.graders.which_wins_setup import (
    candidate_named,
    response_ids,
    three_candidate_search,
    which_wins_import,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def search(project: Project, tmp_path: Path, fake_judge: FakeJudgeServer) -> SearchRun:
    which_wins_import(project, tmp_path, selection=6, train=1)
    return three_candidate_search(project, fake_judge)


def queue_draw_gain(search: SearchRun) -> float:
    """The panel's rate of information as it was computed before the sample: the queue
    strategy's draw over every unlabeled committee pair, enumerated pair by pair."""
    committee = committee_build(search)
    assert committee is not None
    by_task: dict[int, list[int]] = {}
    for response, task in zip(committee.responses.tolist(), committee.tasks.tolist(), strict=True):
        by_task.setdefault(task, []).append(response)
    pairs = [
        CandidatePair(task, Split.SELECTION, "", a, b)
        for task in sorted(by_task)
        for a, b in combinations(sorted(by_task[task]), 2)
        if (a, b) not in committee.labeled
    ]
    strategy = WhichGraderWins(committee, epsilon=search.project.queue_epsilon)
    priorities = np.array([rank.priority for rank in strategy.rank(pairs)])
    served = np.argsort(-priorities, kind="stable")[:NEXT_PAIRS]
    return float(strategy.values([pairs[i] for i in served]).mean())


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
def test_with_at_most_ranked_pairs_the_panel_is_the_queue_draw_exactly(
    search: SearchRun, epsilon: float
) -> None:
    project = search.project
    project.queue_epsilon = epsilon
    project.save(update_fields=["queue_epsilon"])
    search.refresh_from_db()
    label(project, "s1/okay", "s1/poor", "a")  # the verifier right, the averager wrong
    expert_prefers(project, "s2", "good", "okay")
    panel = which_wins_panel(search=search)
    assert panel is not None and panel.outlook == "estimate"
    # Six tasks of three pairs, less the three labeled: all 15 ranked, none left out.
    assert (panel.ranked, panel.unlabeled, panel.sampled) == (15, 15, False)
    assert panel.gain_per_label == queue_draw_gain(search)


def test_unlabeled_pairs_are_every_same_task_pair_in_combinations_order(
    search: SearchRun,
) -> None:
    project = search.project
    label(project, "s3/good", "s3/okay", "tie")
    committee = committee_build(search, labeled_everywhere=False)
    assert committee is not None
    rows_a, rows_b = committee.unlabeled_pairs()
    found = list(
        zip(committee.responses[rows_a].tolist(), committee.responses[rows_b].tolist(), strict=True)
    )
    ids = response_ids(project)
    expected = [
        (ids[f"s{task}/{a}"], ids[f"s{task}/{b}"])
        for task in range(6)
        for a, b in combinations(("good", "okay", "poor"), 2)
        if (task, a, b) not in {(0, "good", "poor"), (3, "good", "okay")}
    ]
    assert found == expected
    # The panel's read of the labels is limited to graded responses; the queue's is not.
    train = (ids["t0/good"], ids["t0/poor"])
    label(project, "t0/good", "t0/poor", "a")
    everywhere = committee_build(search)
    graded_only = committee_build(search, labeled_everywhere=False)
    assert everywhere is not None and graded_only is not None
    assert train in everywhere.labeled and train not in graded_only.labeled
    assert everywhere.labels == graded_only.labels


def test_the_sample_is_stratified_by_task_seeded_and_exactly_the_limit() -> None:
    # Tasks of 45, 3, 10 and 1 pairs (adjacent, as unlabeled_pairs gives them).
    sizes = [45, 3, 10, 1]
    tasks = np.repeat(np.array([7, 8, 9, 11]), sizes)
    assert pairs_sample(tasks, limit=59, seed=0).tolist() == list(range(59))
    assert pairs_sample(tasks, limit=100, seed=0).tolist() == list(range(59))
    for limit in (4, 9, 20, 30, 58):
        sample = pairs_sample(tasks, limit=limit, seed=0)
        assert len(sample) == limit and (np.diff(sample) > 0).all()
        taken = np.bincount(np.searchsorted([7, 8, 9, 11], tasks[sample]), minlength=4).tolist()
        # An equal quota per task (all of a smaller task), give or take one pair.
        quota = max(taken)
        assert all(
            min(size, quota - 1) <= got <= min(size, quota)
            for size, got in zip(sizes, taken, strict=True)
        )
        assert pairs_sample(tasks, limit=limit, seed=0).tolist() == sample.tolist()
    # More tasks than the limit: one pair from each of `limit` tasks drawn at random.
    many = np.repeat(np.arange(1000), 3)
    sample = pairs_sample(many, limit=100, seed=0)
    assert len(set(many[sample].tolist())) == 100
    assert not np.array_equal(sample, pairs_sample(many, limit=100, seed=1))
    # Every task can appear: over seeds, every one of them does.
    seen = set()
    for seed in range(200):
        seen |= set(many[pairs_sample(many, limit=100, seed=seed)].tolist())
    assert seen == set(range(1000))
    # Within a task the pairs are drawn uniformly, not as a run of neighbours: each of 45
    # pairs is taken by about 5/45 of 450 seeds (50), and the first five together by few.
    one = np.zeros(45, dtype=np.int64)
    taken_together = 0
    for seed in range(450):
        sample = pairs_sample(one, limit=5, seed=seed)
        taken_together += sample.tolist() == [0, 1, 2, 3, 4]
        assert len(sample) == 5
    counts = np.bincount(
        np.concatenate([pairs_sample(one, limit=5, seed=seed) for seed in range(450)]),
        minlength=45,
    )
    assert counts.min() > 25 and counts.max() < 80 and taken_together == 0


def test_the_panel_says_when_its_rate_comes_from_a_sample(
    search: SearchRun, admin_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    client.force_login(admin_user)
    url = reverse("search", args=[search.project.slug, search.pk])
    assert "ranked among" not in client.get(url).content.decode()
    monkeypatch.setattr(panel_module, "RANKED_PAIRS", 7)
    html = " ".join(client.get(url).content.decode().split())
    assert "ranked among 7 of the 17 unlabeled pairs, a sample stratified by task" in html
    panel = which_wins_panel(search=search)
    assert panel is not None and (panel.ranked, panel.unlabeled, panel.sampled) == (7, 17, True)
    committee = committee_build(search, labeled_everywhere=False)
    assert committee is not None
    rows_a, rows_b = committee.unlabeled_pairs()
    sample = pairs_sample(committee.tasks[rows_a], limit=7, seed=0)
    assert panel.gain_per_label == next_gain(committee, rows_a[sample], rows_b[sample])


def test_the_cached_rewards_follow_a_grade_deleted_or_added(search: SearchRun) -> None:
    verifier = candidate_named(search)["verifier"]
    ids = response_ids(search.project)

    def reward(response: str) -> float:
        committee = committee_build(search)
        assert committee is not None
        k = committee.members.index(verifier)
        return float(committee.rewards[committee.row[ids[response]], k])

    assert reward("s1/good") == pytest.approx(0.9)  # read, then cached
    grade = Grade.objects.get(run_id=verifier.selection_run_id, response_id=ids["s1/good"])
    grade.delete()
    assert np.isnan(reward("s1/good"))
    Grade.objects.create(
        run_id=verifier.selection_run_id, response_id=ids["s1/good"], reward=0.3, trace=[]
    )
    assert reward("s1/good") == pytest.approx(0.3)
