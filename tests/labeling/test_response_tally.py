"""ResponseTally is kept by triggers on labeling_response (migration 0020), not by the app: it
must equal each task's response count after every way responses are written or removed: one
by one, in bulk, by an import (COPY on PostgreSQL, the ORM on SQLite), by a re-import that
updates rows, by deleting some, and by a cascade from the task. These run on either database;
each has its own triggers."""

from pathlib import Path

import pytest
from django.db.models import Count

from labeling.imports import jsonl_import
from labeling.models import Project, Response, ResponseTally, Task
from tests.labeling.helpers import write_jsonl


def tallies(project: Project) -> dict[str, int]:
    return dict(
        ResponseTally.objects.filter(task__project=project).values_list(
            "task__external_id", "responses"
        )
    )


def counted(project: Project) -> dict[str, int]:
    """The count the tally must equal, with a zero for a task whose responses all went."""
    held = dict(
        Task.objects.filter(project=project)
        .annotate(n=Count("responses"))
        .values_list("external_id", "n")
    )
    return {name: n for name, n in held.items() if n or name in tallies(project)}


@pytest.mark.django_db
def test_the_tally_follows_single_and_bulk_writes_and_deletes(project: Project) -> None:
    one = Task.objects.create(project=project, external_id="one", prompt="p")
    two = Task.objects.create(project=project, external_id="two", prompt="p")
    Response.objects.create(project=project, task=one, external_id="one/a")
    Response.objects.bulk_create(
        [
            Response(project=project, task=task, external_id=f"{task}/{n}")
            for task in (one, two)
            for n in range(3)
        ]
    )
    assert tallies(project) == {"one": 4, "two": 3} == counted(project)

    Response.objects.filter(task=one, external_id__in=["one/0", "one/1"]).delete()
    Response.objects.filter(task=two).delete()
    assert tallies(project) == {"one": 2, "two": 0} == counted(project)


@pytest.mark.django_db
def test_deleting_a_task_takes_its_tally_with_it(project: Project) -> None:
    task = Task.objects.create(project=project, external_id="gone", prompt="p")
    Response.objects.create(project=project, task=task, external_id="gone/a")
    task.delete()
    assert not ResponseTally.objects.exists()


@pytest.mark.django_db
def test_an_import_and_its_reimport_count_each_response_once(
    project: Project, tmp_path: Path
) -> None:
    records = [{"type": "task", "id": f"t{t}", "prompt": "p"} for t in range(3)] + [
        {"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}", "content": "x"}
        for t in range(3)
        for r in range(t + 1)
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", records))
    assert tallies(project) == {"t0": 1, "t1": 2, "t2": 3} == counted(project)

    # Again with every response's text changed and one more: the upsert updates three rows
    # and inserts one, and only the insert counts.
    again = [r | {"content": "y"} if r["type"] == "response" else r for r in records]
    again.append({"type": "response", "id": "t0/extra", "task": "t0", "content": "z"})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", again))
    assert tallies(project) == {"t0": 2, "t1": 2, "t2": 3} == counted(project)


@pytest.mark.django_db
def test_another_projects_writes_leave_this_ones_tally(project: Project) -> None:
    mine = Task.objects.create(project=project, external_id="t", prompt="p")
    Response.objects.create(project=project, task=mine, external_id="t/a")
    other = Project.objects.create(slug="other", name="Other")
    theirs = Task.objects.create(project=other, external_id="t", prompt="p")
    Response.objects.create(project=other, task=theirs, external_id="t/a")
    Response.objects.create(project=other, task=theirs, external_id="t/b")
    assert tallies(project) == {"t": 1} and tallies(other) == {"t": 2}
