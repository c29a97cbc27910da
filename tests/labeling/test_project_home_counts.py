"""The project home counts a project's scores and criterion grades by the project the rows
repeat from their response (migration 0019): the counts equal those of the join they replace,
on two projects side by side; every write path stores the response's project; the migration
fills the column of rows written before it; and no statement of the home joins the scores or
grades to the responses."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.criterion_grading import ItemMark, criterion_grades_submit
from labeling.imports import jsonl_import
from labeling.models import Annotator, CriterionGrade, Project, Response, RubricItem, Score
from labeling.selectors import criterion_grading_left, project_overview
from tests.conftest import member
from tests.labeling.helpers import basic_records, write_jsonl

BEFORE = [("labeling", "0018_response_trajectory_index")]
AFTER = [("labeling", "0019_score_grade_project")]


def _two_projects(tmp_path: Path) -> tuple[Project, Project]:
    """Two projects loaded from the same file (2 scores and 1 criterion grade each), the
    second with one more grade given through the grading page's service."""
    first = Project.objects.create(slug="first", name="First")
    second = Project.objects.create(slug="second", name="Second")
    for project in (first, second):
        jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    response = Response.objects.get(project=second, external_id="t1/r2")
    items = RubricItem.objects.filter(rubric__task=response.task, rubric__author_kind="expert")
    criterion_grades_submit(
        response=response,
        annotator=Annotator.objects.create(project=second, name="bea"),
        marks=[ItemMark(item.pk, passed=True) for item in items],
    )
    return first, second


@pytest.mark.django_db
def test_the_counts_equal_the_joined_counts_project_by_project(tmp_path: Path) -> None:
    first, second = _two_projects(tmp_path)
    for project, grades in ((first, 1), (second, 3)):
        overview = project_overview(project=project)
        assert overview["scores"] == Score.objects.filter(response__project=project).count() == 2
        assert (
            overview["criterion_grades"]
            == CriterionGrade.objects.filter(response__project=project).count()
            == grades
        )


@pytest.mark.django_db
def test_every_write_stores_the_responses_project(tmp_path: Path) -> None:
    _two_projects(tmp_path)
    for model in (Score, CriterionGrade):
        rows = model.objects.values_list("project_id", "response__project_id")
        assert len(rows) > 2 and all(own == response for own, response in rows)


@pytest.mark.django_db
def test_grading_left_counts_only_the_projects_grades(tmp_path: Path) -> None:
    """The same annotator name grades in both projects; each count reads its own project's."""
    first, second = _two_projects(tmp_path)
    bea = Annotator.objects.get(project=second, name="bea")
    # t1 is the one task with an expert rubric: two responses, bea graded t1/r2 in full.
    assert criterion_grading_left(project=second, annotator=bea) == 1
    alice = Annotator.objects.get(project=first, name="alice")
    assert criterion_grading_left(project=first, annotator=alice) == 2  # c1 of two criteria


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["admin", "expert", "reviewer"])
def test_the_home_never_joins_scores_or_grades_to_responses(tmp_path: Path, role: str) -> None:
    first, _ = _two_projects(tmp_path)
    user = member(first, "una", role)
    client = Client()
    client.force_login(user)
    with CaptureQueriesContext(connection) as captured:
        answer = client.get(reverse("project-overview", args=[first.slug]))
    assert answer.status_code == 200
    joined = [
        query["sql"]
        for query in captured.captured_queries
        for table in ('FROM "labeling_score"', 'FROM "labeling_criteriongrade"')
        if table in query["sql"] and 'JOIN "labeling_response"' in query["sql"]
    ]
    assert joined == []
    assert len(captured) <= 30  # the admin's home ran 29 statements on the bench project


@pytest.fixture
def schema_restored(transactional_db: None) -> Iterator[None]:
    """The database at the latest migrations again once the test is done, whichever it
    migrated to: the tests after it (the browser tests' live server) use the same schema."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_migration_fills_the_project_of_earlier_rows(schema_restored: None) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    owners = []
    for slug in ("one", "two"):
        project = old.get_model("labeling", "Project").objects.create(slug=slug, name=slug)
        task = old.get_model("labeling", "Task").objects.create(
            project=project, external_id="t", prompt="p"
        )
        response = old.get_model("labeling", "Response").objects.create(
            project=project, task=task, external_id="t/r"
        )
        rubric = old.get_model("labeling", "Rubric").objects.create(task=task, author_kind="expert")
        item = old.get_model("labeling", "RubricItem").objects.create(
            rubric=rubric, key="c1", text="c", position=0
        )
        annotator = old.get_model("labeling", "Annotator").objects.create(
            project=project, name="ann"
        )
        old.get_model("labeling", "Score").objects.create(
            response=response, provider="expert", value=0.5
        )
        old.get_model("labeling", "CriterionGrade").objects.create(
            response=response, item=item, annotator=annotator, passed=True
        )
        owners.append((project.pk, response.pk))
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    for model in (Score, CriterionGrade):
        assert sorted(model.objects.values_list("project_id", "response_id")) == sorted(owners)
