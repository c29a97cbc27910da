"""Ranking accuracy on actively chosen labels, reweighted by inverse selection probability
(DESIGN.md section 8), on a hand-computed case, and both figures on the run page."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.evaluation import grading_evaluate
from graders.models import Candidate, Grade, GradingRun, JudgeEndpoint, SearchRun
from graders.services import metagrader_register
from labeling.imports import jsonl_import
from labeling.jobs import job_create
from labeling.models import Annotator, Preference, Project, Response
from labeling.queue import queue_build
from labeling.strategies import CandidatePair, Ranked
from tests.graders.test_search_views import judge, logged_in, search, split_project  # noqa: F401
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

# Rewards of a scalar grader (tol = 0.1) on two tasks of three responses.
REWARDS = {"t1/a": 0.9, "t1/b": 0.2, "t1/c": 0.0, "t2/d": 0.6, "t2/e": 0.3, "t2/f": 0.55}


@pytest.fixture
def run(project: Project, tmp_path: Path) -> GradingRun:
    records: list[dict[str, Any]] = []
    for task in ("t1", "t2"):
        records.append(
            {"type": "task", "id": task, "prompt": f"Prompt {task}", "split": "selection"}
        )
    records += [
        {"type": "response", "id": r, "task": r.split("/")[0], "content": f"answer {r}"}
        for r in REWARDS
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "r.jsonl", records))
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="test"
    )
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="j", base_url="https://api.example.com/v1", model="m"
    )
    run = GradingRun.objects.create(
        project=project,
        metagrader=grader,
        endpoint=endpoint,
        split="selection",
        job=job_create(kind="grading", project=project),
    )
    for external_id, reward in REWARDS.items():
        response = Response.objects.get(project=project, external_id=external_id)
        Grade.objects.create(run=run, response=response, reward=reward)
    return run


def prefer(
    project: Project,
    winner: str,
    loser: str,
    annotator: str = "alice",
    chance: tuple[float, int] | None = None,
) -> None:
    by_id = {r.external_id: r for r in Response.objects.filter(project=project)}
    Preference.objects.create(
        task_id=by_id[winner].task_id,
        response_a=by_id[loser],
        response_b=by_id[winner],
        choice="b",
        provider="human",
        annotator=Annotator.objects.get_or_create(project=project, name=annotator)[0],
        selection_probability=None if chance is None else chance[0],
        selection_pool=None if chance is None else chance[1],
    )


def four_labeled_pairs(project: Project) -> None:
    # P1 a > b: 0.9 - 0.2 = 0.7 > 0.1, credit 1 (reported) / 1 (tolerant); chance 0.5 of 4:
    #    w = 1 / (4 * 0.5) = 0.5. Bob's later label on it has another chance, which is ignored.
    prefer(project, "t1/a", "t1/b", chance=(0.5, 4))
    prefer(project, "t1/a", "t1/b", annotator="bob", chance=(0.25, 4))
    # P2 c > b: 0.0 - 0.2 = -0.2, credit 0 / 0; chance 0.125 of 4: w = 1 / (4 * 0.125) = 2.
    prefer(project, "t1/c", "t1/b", chance=(0.125, 4))
    # P3 d > e: 0.6 - 0.3 = 0.3, credit 1 / 1; not drawn (an import): w = 1.
    prefer(project, "t2/d", "t2/e")
    # P4 f > d: 0.55 - 0.6 = -0.05, within 0.1: credit 0 / 0.5; chance 0.25 of 2: w = 2.
    prefer(project, "t2/f", "t2/d", chance=(0.25, 2))


def test_actively_chosen_pairs_are_weighted_by_their_inverse_chance(
    project: Project, run: GradingRun
) -> None:
    four_labeled_pairs(project)
    evaluation = grading_evaluate(run=run)
    # Plain: reported (1 + 0 + 1 + 0) / 4 = 0.5; tolerant (1 + 0 + 1 + 0.5) / 4 = 0.625.
    assert evaluation["reference"] == "human_preferences" and evaluation["pairs"] == 4
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(0.5)
    assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(0.625)
    # Weights 0.5, 2, 1, 2 (sum 5.5).
    # Reported: (0.5*1 + 2*0 + 1*1 + 2*0) / 5.5 = 1.5 / 5.5 = 3/11.
    # Tolerant: (0.5*1 + 2*0 + 1*1 + 2*0.5) / 5.5 = 2.5 / 5.5 = 5/11.
    assert evaluation["reweighted"] == {
        "ranking_accuracy": pytest.approx(3 / 11),
        "tolerant_ranking_accuracy": pytest.approx(5 / 11),
        "pairs": 4,
        "active_pairs": 3,
        "estimator": "self-normalized inverse propensity",
    }


def test_uniform_chances_reweight_to_the_plain_figures(project: Project, run: GradingRun) -> None:
    # Every pair drawn with chance 1/4 from a pool of 4: w = 1 for each, so nothing changes.
    prefer(project, "t1/a", "t1/b", chance=(0.25, 4))
    prefer(project, "t1/c", "t1/b", chance=(0.25, 4))
    prefer(project, "t2/d", "t2/e", chance=(0.25, 4))
    evaluation = grading_evaluate(run=run)
    # Reported (1 + 0 + 1) / 3 both ways.
    assert evaluation["reweighted"]["ranking_accuracy"] == pytest.approx(2 / 3)
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(2 / 3)


def test_labels_nobody_chose_actively_get_no_reweighted_block(
    project: Project, run: GradingRun
) -> None:
    prefer(project, "t1/a", "t1/b")
    prefer(project, "t2/f", "t2/d")
    assert "reweighted" not in grading_evaluate(run=run)


def test_the_run_page_shows_plain_and_reweighted_and_says_which_is_which(
    project: Project, run: GradingRun, admin_user: User
) -> None:
    four_labeled_pairs(project)
    GradingRun.objects.filter(pk=run.pk).update(evaluation=grading_evaluate(run=run))
    client = Client()
    client.force_login(admin_user)
    html = client.get(reverse("grading-run", args=["acme", run.pk])).content.decode()
    # 3/11 = 0.273 and 5/11 = 0.455.
    assert "plain 0.500 / reweighted 0.273 (3 of 4 pairs chosen actively)" in html
    assert "plain 0.625 / reweighted 0.455 (3 of 4 pairs chosen actively)" in html
    assert "3 of these pairs were chosen actively by the labeling queue" in html


def test_the_leaderboard_shows_both_figures_where_a_selection_was_reweighted(
    search: SearchRun,  # noqa: F811 (the fixture imported above)
    admin_user: User,
) -> None:
    cheap = Candidate.objects.select_related("selection_run").get(metagrader__name="cheap")
    assert cheap.selection_run is not None
    reweighted = {
        "ranking_accuracy": 0.65,
        "tolerant_ranking_accuracy": 0.71,
        "pairs": 30,
        "active_pairs": 12,
        "estimator": "self-normalized inverse propensity",
    }
    cheap.selection_run.evaluation |= {"reweighted": reweighted}
    cheap.selection_run.save(update_fields=["evaluation"])
    html = logged_in(admin_user).get(reverse("search", args=["acme", search.pk])).content.decode()
    # The fixture's plain figures: tolerant 0.8, reported 0.8 - 0.05 = 0.75.
    assert "plain 0.800 / reweighted 0.710 (12 of 30 pairs chosen actively)" in html
    assert "plain 0.750 / reweighted 0.650 (12 of 30 pairs chosen actively)" in html
    assert html.count("pairs chosen actively") == 2  # only the reweighted candidate says so


class ByTask:
    """Chances known in advance over a pool of all six pairs: 1/4 for t1's pairs, 1/12 for
    t2's (not a distribution; the estimator only needs each pair's chance)."""

    name = "by_task"

    def __init__(self, first_task: int) -> None:
        self.first_task = first_task

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        return [
            Ranked(float(p.response_a), 1 / 4 if p.task_id == self.first_task else 1 / 12, 6)
            for p in pairs
        ]


# The expert's order within each task, best first.
TRUTH = {"t1": ["t1/a", "t1/b", "t1/c"], "t2": ["t2/f", "t2/d", "t2/e"]}


def test_labels_posted_through_the_api_on_a_sampled_queue_are_reweighted(
    project: Project, run: GradingRun, expert_user: User
) -> None:
    first_task = Response.objects.get(project=project, external_id="t1/a").task_id
    queue_build(project=project, strategy=ByTask(first_task), dimensions=[None])
    client = logged_in(expert_user)
    content_of = {f"answer {r}": r for r in REWARDS}
    labeled = 0
    while (served := client.post(reverse("api-queue-next", args=["acme"]))).status_code == 200:
        body = served.json()
        left, right = content_of[body["left"]["content"]], content_of[body["right"]["content"]]
        order = TRUTH[left.split("/")[0]]
        side = "left" if order.index(left) < order.index(right) else "right"
        answer = client.post(
            reverse("api-labels", args=["acme"]),
            json.dumps({"assignment": body["assignment"], "side": side}),
            content_type="application/json",
        )
        assert answer.status_code == 200
        labeled += 1
    assert labeled == 6

    evaluation = grading_evaluate(run=run)
    # Credits (reported / tolerant, tol 0.1): t1 a>b 0.7, a>c 0.9, b>c 0.2: 1/1 each; t2 f>d
    # -0.05: 0/0.5, f>e 0.25: 1/1, d>e 0.3: 1/1.
    # Plain: reported 5/6, tolerant (3 + 2.5)/6 = 5.5/6.
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(5 / 6)
    assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(5.5 / 6)
    # Weights: t1 1 / (6 * 1/4) = 2/3 each, t2 1 / (6 * 1/12) = 2 each; sum 3 * 2/3 + 3 * 2 = 8.
    # Reported: (3 * 2/3 + 2 * (0 + 1 + 1)) / 8 = 6/8; tolerant (2 + 2 * 2.5) / 8 = 7/8.
    assert evaluation["reweighted"]["ranking_accuracy"] == pytest.approx(6 / 8)
    assert evaluation["reweighted"]["tolerant_ranking_accuracy"] == pytest.approx(7 / 8)
    assert evaluation["reweighted"]["active_pairs"] == 6
