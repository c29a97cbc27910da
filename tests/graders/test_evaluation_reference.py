"""Which expert judgement a grading run is measured against (graders/evaluation.py
reference_pairs): scores where responses have them, and the human-majority preferences that
scores do not cover, on a hand-computed case. A split that carries expert scores used to
ignore every preference, so labels on rollouts captured since selection never counted."""

import pytest

from graders.evaluation import grading_evaluate
from graders.models import GradingRun
from labeling.models import Project, Response, Score, ScoreProvider
from reviews.rubric_recheck import REFERENCE_NAMES
from tests.graders.test_evaluation_reweighted import prefer, run  # noqa: F401

pytestmark = pytest.mark.django_db

# The run's rewards: t1 a 0.9, b 0.2, c 0.0; t2 d 0.6, e 0.3, f 0.55 (scalar, tol 0.1).


def score(project: Project, external_id: str, value: float) -> None:
    response = Response.objects.get(project=project, external_id=external_id)
    Score.objects.create(
        project=project, response=response, provider=ScoreProvider.EXPERT, value=value
    )


def test_preferences_add_the_pairs_scores_do_not_cover(
    project: Project,
    run: GradingRun,  # noqa: F811 (the fixture imported above)
) -> None:
    # Scores on t1 only: a 1.0 > b 0.5 > c 0.0 gives a>b, a>c, b>c, all ordered right by the
    # rewards (0.9 > 0.2 > 0.0): 3 of 3.
    for external_id, value in (("t1/a", 1.0), ("t1/b", 0.5), ("t1/c", 0.0)):
        score(project, external_id, value)
    # c > b between two scored responses: the scores decide that pair, this label adds nothing.
    prefer(project, "t1/c", "t1/b")
    # t2 has no scores: d > e (0.6 > 0.3, right) and f > d (0.55 < 0.6, wrong; within tol 0.1).
    prefer(project, "t2/d", "t2/e")
    prefer(project, "t2/f", "t2/d")

    evaluation = grading_evaluate(run=run)

    assert evaluation["reference"] == "expert+preferences"
    assert evaluation["pairs"] == 5
    assert evaluation["tasks"] == 2
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(4 / 5)
    # Tolerant: 1 + 1 + 1 (t1) + 1 (d>e) + 0.5 (f>d within tol) = 4.5 of 5.
    assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(4.5 / 5)
    # Harm needs true scores on both sides of every pair; Spearman is over the scored responses.
    assert "harm_aware_accuracy" not in evaluation
    assert evaluation["within_task_spearman"]["value"] == pytest.approx(1.0)
    # A search reads per-task credit from here (D_selection): t2's credit is its preferences'.
    by_task = {
        Response.objects.get(project=project, external_id=f"{task}/{r}").task_id: task
        for task, r in (("t1", "a"), ("t2", "d"))
    }
    credit = {by_task[int(pk)]: value for pk, value in evaluation["by_task"].items()}
    assert credit == {"t1": [3.0, 3], "t2": [1.5, 2]}
    assert evaluation["reference"] in REFERENCE_NAMES


def test_scores_alone_when_every_preference_is_between_scored_responses(
    project: Project,
    run: GradingRun,  # noqa: F811 (the fixture imported above)
) -> None:
    for external_id, value in (("t1/a", 1.0), ("t1/b", 0.5), ("t1/c", 0.0)):
        score(project, external_id, value)
    prefer(project, "t1/c", "t1/b")

    evaluation = grading_evaluate(run=run)

    assert evaluation["reference"] == ScoreProvider.EXPERT
    assert evaluation["pairs"] == 3
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(1.0)
    assert evaluation["harm_aware_accuracy"]["value"] == pytest.approx(1.0)


def test_preferences_alone_without_scores(
    project: Project,
    run: GradingRun,  # noqa: F811 (the fixture imported above)
) -> None:
    prefer(project, "t2/d", "t2/e")
    prefer(project, "t2/f", "t2/d")

    evaluation = grading_evaluate(run=run)

    assert evaluation["reference"] == "human_preferences"
    assert evaluation["pairs"] == 2
    assert evaluation["ranking_accuracy"]["value"] == pytest.approx(1 / 2)
