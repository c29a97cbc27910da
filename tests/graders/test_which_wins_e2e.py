""" "Which grader wins" end to end (issue 15, Done when): a search with three candidates graded
over HTTP by the scripted fake judge; "Label these next" fills the queue, top pairs first where
the candidates disagree; an expert labels through the label API what the queue serves; P(best)
moves toward the candidate that agrees with the expert; and the re-evaluated selection runs'
reweighted accuracy matches a hand computation from the served labels' recorded chances.

The votes and rewards are those of tests/graders/which_wins_setup.py."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.active.committee import committee_for_project
from graders.evaluation import grading_evaluate
from graders.models import Grade, GradingRun, SearchRun
from labeling.models import Preference, Project, QueuePair, Split
from labeling.tasks import queue_refresh_task
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.which_wins_setup import (
    WORDS,
    candidate_named,
    response_ids,
    three_candidate_search,
    which_wins_import,
)

pytestmark = pytest.mark.django_db

TOLERANCE = 0.1  # scalar candidates


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def label_these_next(project: Project, search: SearchRun, admin_user: User) -> None:
    action = reverse("search-label-next", args=[project.slug, search.pk])
    assert logged_in(admin_user).post(action).status_code == 302


def expert_labels(client: Client, project: Project, count: int) -> list[int]:
    """Claim and label `count` pairs through the label API as the scripted expert (GOOD over
    OKAY over POOR, read off the texts the annotator is shown); the assignments' ids."""
    served = []
    for _ in range(count):
        claim = client.post(f"/api/p/{project.slug}/queue/next", content_type="application/json")
        assert claim.status_code == 200, claim.content
        body = claim.json()
        left, right = (_quality(body["left"]), _quality(body["right"]))
        side = "left" if left < right else "right"
        submitted = client.post(
            f"/api/p/{project.slug}/labels/",
            json.dumps({"assignment": body["assignment"], "side": side}),
            content_type="application/json",
        )
        assert submitted.status_code in (200, 201), submitted.content
        served.append(body["assignment"])
    return served


def _quality(shown: Any) -> int:
    """The rank of the answer's quality word in what the annotator sees (0: GOOD)."""
    text = json.dumps(shown)
    return next(rank for rank, word in enumerate(WORDS) if f"{word} answer" in text)


def reweighted_by_hand(run: GradingRun) -> tuple[float, float]:
    """(plain, reweighted) tolerant ranking accuracy of a selection run on the expert's labeled
    pairs, computed from the rows.

    Each labeled pair (winner w, loser l) earns credit 1 if r_w - r_l > tol, 0.5 if
    |r_w - r_l| <= tol, else 0 (DESIGN.md section 7). Its weight is 1 / (N * q) with q the
    selection probability and N the pool size its first served label recorded, 1 for a label
    no sampling strategy chose (the imported one). plain = mean credit; reweighted =
    sum(weight * credit) / sum(weight)."""
    rewards = dict(Grade.objects.filter(run=run).values_list("response_id", "reward"))
    first: dict[tuple[int, int], Preference] = {}
    for preference in Preference.objects.filter(
        task__split=Split.SELECTION, provider="human", is_current=True, dimension__isnull=True
    ).order_by("created_at", "pk"):
        key = tuple(sorted((preference.response_a_id, preference.response_b_id)))
        first.setdefault(key, preference)  # type: ignore[arg-type]
    credits, weights = [], []
    for preference in first.values():
        assert preference.choice in ("a", "b")  # the scripted expert never ties
        winner, loser = (
            (preference.response_a_id, preference.response_b_id)
            if preference.choice == "a"
            else (preference.response_b_id, preference.response_a_id)
        )
        lead = rewards[winner] - rewards[loser]
        credits.append(1.0 if lead > TOLERANCE + 1e-9 else 0.5 if lead >= -TOLERANCE - 1e-9 else 0)
        q, pool = preference.selection_probability, preference.selection_pool
        weights.append(1.0 if q is None else 1 / (pool * q))
    plain = sum(credits) / len(credits)
    return plain, sum(w * c for w, c in zip(weights, credits, strict=True)) / sum(weights)


def test_which_grader_wins_fills_the_queue_and_labels_move_p_best_to_the_expert(
    project: Project,
    tmp_path: Path,
    fake_judge: FakeJudgeServer,
    admin_user: User,
    expert_user: User,
) -> None:
    which_wins_import(project, tmp_path, selection=6, train=2)
    search = three_candidate_search(project, fake_judge)
    roles = candidate_named(search)
    Project.objects.filter(pk=project.pk).update(queue_refresh_labels=4)
    before = committee_for_project(project)
    assert before is not None and before.p_best.tolist() == pytest.approx([1 / 3] * 3)

    label_these_next(project, search, admin_user)
    ids = response_ids(project)
    names = {pk: name for name, pk in ids.items()}
    queued = list(QueuePair.objects.filter(project=project).order_by("-priority"))
    # 6 x 3 selection pairs and 2 train pairs; s0 GOOD-POOR is labeled, so 19 are drawn.
    assert len(queued) == 20 and {p.pool for p in queued if p.probability} == {19}

    def agreeing(pair: QueuePair) -> bool:
        """Every candidate orders it alike: GOOD-POOR, or a train pair nobody graded."""
        return names[pair.response_a_id].endswith("good") and names[pair.response_b_id].endswith(
            "poor"
        )

    drawn = [p for p in queued if p.probability is not None]
    disagreements = [p for p in drawn if not agreeing(p)]
    assert len(disagreements) == 12
    assert min(p.probability for p in disagreements) > max(
        p.probability for p in drawn if agreeing(p)
    )
    assert not agreeing(queued[0])  # the first pair served is one the candidates dispute

    # Eight labels through the label API; after every fourth the label counter asks for a
    # refresh, which the worker would run: here the task is called directly.
    expert = logged_in(expert_user)
    history = [before.p_best[before.members.index(roles["verifier"])]]
    for _ in range(2):
        expert_labels(expert, project, 4)
        project.refresh_from_db()
        assert project.queue_refresh_requested_at is not None
        queue_refresh_task(project.pk)
        committee = committee_for_project(project)
        assert committee is not None
        history.append(committee.p_best[committee.members.index(roles["verifier"])])
    assert history[0] < history[1] < history[2]
    assert history[2] == max(committee.p_best) and history[2] > 0.5
    # Every served label carries the chance its pair had when the queue served it.
    served = Preference.objects.filter(annotator__user=expert_user)
    assert served.count() == 8
    assert all(p.selection_probability and p.selection_pool for p in served)

    for candidate in roles.values():
        run = candidate.selection_run
        evaluation = grading_evaluate(run=run)
        plain, reweighted = reweighted_by_hand(run)
        assert evaluation["reference"] == "human_preferences"
        assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(plain)
        block = evaluation["reweighted"]
        assert block["active_pairs"] == 8
        assert _value(block["tolerant_ranking_accuracy"]) == pytest.approx(reweighted)


def _value(metric: Any) -> float:
    return metric["value"] if isinstance(metric, dict) else metric


def test_the_reweighted_accuracy_of_a_tiny_queue_by_hand(
    project: Project,
    tmp_path: Path,
    fake_judge: FakeJudgeServer,
    admin_user: User,
    expert_user: User,
) -> None:
    """One D_selection task (GOOD, OKAY, POOR; GOOD-POOR labeled at import) and one train pair.

    The pool is the three unlabeled pairs: GOOD-OKAY and OKAY-POOR, disputed and, under the
    uniform prior, equally informative (each has one dissenter, mirror images), and the train
    pair, worth 0. With epsilon = 0.1:
        q(GOOD-OKAY) = q(OKAY-POOR) = 0.9 / 2 + 0.1 / 3 = 29/60,   q(train) = 0.1 / 3
    so each disputed pair's weight is 1 / (3 * 29/60) = 20/29. The baseline earns GOOD-POOR
    (0.5 - 0.2 > 0.1: 1, weight 1), loses GOOD-OKAY (0.5 - 0.9: 0) and earns OKAY-POOR
    (0.9 - 0.2: 1):
        plain = 2/3,  reweighted = (1 + 0 + 20/29) / (1 + 20/29 + 20/29) = 49/69 = 0.7101...
    The verifier earns all three: 1 either way."""
    which_wins_import(project, tmp_path, selection=1, train=1)
    search = three_candidate_search(project, fake_judge)
    roles = candidate_named(search)
    label_these_next(project, search, admin_user)
    expert_labels(logged_in(expert_user), project, 3)
    served = Preference.objects.filter(annotator__user=expert_user, task__split=Split.SELECTION)
    assert sorted(p.selection_probability for p in served) == pytest.approx([29 / 60] * 2)
    assert {p.selection_pool for p in served} == {3}

    baseline = grading_evaluate(run=roles["baseline"].selection_run)
    assert baseline["tolerant_ranking_accuracy"]["value"] == pytest.approx(2 / 3)
    assert _value(baseline["reweighted"]["tolerant_ranking_accuracy"]) == pytest.approx(49 / 69)
    verifier = grading_evaluate(run=roles["verifier"].selection_run)
    assert _value(verifier["reweighted"]["tolerant_ranking_accuracy"]) == pytest.approx(1.0)
