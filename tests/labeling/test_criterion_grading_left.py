"""criterion_grading_left counts with one grouped statement what _criterion_grading_open
lists: the two must agree in every state a response can be in (ungraded, graded in part, in
full, by someone else, under a rubric with no criteria, under a rubric that is not the expert
one), and the count's statements do not grow with the responses."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.models import (
    Annotator,
    CriterionGrade,
    Project,
    Response,
    Rubric,
    RubricItem,
    Task,
)
from labeling.selectors import _criterion_grading_open, criterion_grading_left


def _task(project: Project, name: str, criteria: int, author: str = "expert") -> list[Any]:
    task = Task.objects.create(project=project, external_id=name, prompt="p", split="meta")
    responses = [
        Response.objects.create(project=project, task=task, external_id=f"{name}/r{n}")
        for n in range(3)
    ]
    rubric = Rubric.objects.create(task=task, author_kind=author)
    items = [
        RubricItem.objects.create(rubric=rubric, key=f"c{n}", text=f"criterion {n}", position=n)
        for n in range(criteria)
    ]
    return [responses, items]


def _grade(response: Response, items: list[RubricItem], annotator: Annotator) -> None:
    for item in items:
        CriterionGrade.objects.create(project_id=response.project_id, response=response,
                                      item=item, passed=True, annotator=annotator)  # fmt: skip


@pytest.mark.django_db
def test_the_count_is_the_open_list_in_every_state(project: Project) -> None:
    me = Annotator.objects.create(project=project, name="me")
    other = Annotator.objects.create(project=project, name="other")
    (full, partial, untouched), items = _task(project, "t1", 3)
    _grade(full, items, me)
    _grade(partial, items[:2], me)
    _grade(untouched, items, other)
    (empty_a, _, _), _ = _task(project, "t2", 0)  # an expert rubric without criteria
    _task(project, "t3", 2, author="generated")  # not graded on this page
    elsewhere = Project.objects.create(slug="elsewhere", name="Elsewhere")
    (theirs, _, _), their_items = _task(elsewhere, "t1", 2)
    _grade(theirs, their_items, Annotator.objects.create(project=elsewhere, name="me"))

    open_ids = set(_criterion_grading_open(project, me).values_list("pk", flat=True))

    assert full.pk not in open_ids and partial.pk in open_ids and empty_a.pk in open_ids
    assert criterion_grading_left(project=project, annotator=me) == len(open_ids) == 5
    assert criterion_grading_left(project=project, annotator=other) == 5


@pytest.mark.django_db
def test_a_capped_count_is_exact_up_to_the_cap_and_cap_plus_one_past_it(
    project: Project,
) -> None:
    me = Annotator.objects.create(project=project, name="me")
    (full, partial, _), items = _task(project, "t1", 3)
    _grade(full, items, me)
    _grade(partial, items[:2], me)
    _task(project, "t2", 2)
    # 6 under rubric, 5 grades of mine, 1 response graded in full: 5 left.
    assert criterion_grading_left(project=project, annotator=me) == 5
    # With a cap c: the count up to c, then c + 1.
    assert [criterion_grading_left(project=project, annotator=me, cap=c) for c in range(7)] == [
        1, 2, 3, 4, 5, 5, 5
    ]  # fmt: skip
    # 6 under rubric less my 5 grades leaves more than cap 0 whatever I graded in full: the
    # grouped count is skipped. Not so for cap 1.
    for cap, grouped in ((0, False), (1, True)):
        with CaptureQueriesContext(connection) as ran:
            criterion_grading_left(project=project, annotator=me, cap=cap)
        assert any("mine.graded >= items.n" in q["sql"] for q in ran) is grouped
    assert criterion_grading_left(project=project, annotator=None, cap=4) == 5
    assert criterion_grading_left(project=project, annotator=None, cap=6) == 6
