"""The database's count of items by their votes (selectors._tally) against counting the loaded
labels in Python, and the agreement pages' statement counts."""

import random

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.agreement_stats import tally, tally_annotator_summaries, tally_report, workloads
from labeling.models import Annotator, Dimension, Preference, Project, Response, Task
from labeling.selectors import _labels, _tally, _workloads, agreement_tally

only_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the database counts only on PostgreSQL"
)


def random_labels(project: Project, seed: int, prefix: str = "") -> None:
    """Labels of every provider, confidence and dimension on pairs shown either way round, with
    response ids whose order is not their external ids' ("r10" sorts before "r9")."""
    rng = random.Random(seed)
    task = Task.objects.create(project=project, external_id=f"{prefix}t", prompt="p")
    responses = [
        Response.objects.create(project=project, task=task, external_id=f"{prefix}r{n}")
        for n in rng.sample(range(4, 16), 12)
    ]
    dimensions = [None] + [
        Dimension.objects.get_or_create(project=project, name=name)[0] for name in ("tone", "facts")
    ]
    people = [
        Annotator.objects.get_or_create(project=project, name=f"{prefix}p{n}")[0] for n in range(5)
    ]
    machines = [
        Annotator.objects.get_or_create(project=project, name=n)[0] for n in ("gen", "judge-x")
    ]
    taken = set()
    for _ in range(300):
        a, b = rng.sample(responses, 2)
        dimension = rng.choice(dimensions)
        provider = rng.choice(["human"] * 4 + ["synthetic", "judge"])
        annotator = rng.choice(people) if provider == "human" else rng.choice(machines)
        key = (min(a.pk, b.pk), max(a.pk, b.pk), dimension, annotator.pk)
        if key in taken:
            continue
        taken.add(key)
        Preference.objects.create(
            task=task, response_a=a, response_b=b, dimension=dimension, provider=provider,
            annotator=annotator, choice=rng.choice(["a", "b", "tie"]),
            confidence=rng.choice([0, 1, 2, None]), seconds_spent=rng.choice([None, 1.5, 4.0]),
        )  # fmt: skip
    # A revised label: only the current one counts.
    Preference.objects.filter(pk=Preference.objects.filter(task=task).earliest("pk").pk).update(
        is_current=False
    )


@only_postgresql
@pytest.mark.parametrize("seed", range(5))
def test_the_database_counts_items_as_python_does(project: Project, seed: int) -> None:
    random_labels(project, seed)
    current = Preference.objects.filter(task__project=project, is_current=True)
    labels = _labels(current)
    counted = _tally(project, current)
    assert counted == tally(labels)
    assert _workloads(current) == workloads(labels)
    for dimension in (None, "tone"):
        assert tally_report(counted, dimension=dimension) == tally_report(
            tally(labels), dimension=dimension
        )
    assert tally_annotator_summaries(counted, _workloads(current)) == tally_annotator_summaries(
        tally(labels), workloads(labels)
    )


def test_a_flipped_pair_reads_first_by_external_id(project: Project) -> None:
    """r10 sorts before r9, so r10 is the pair's first whichever was created first."""
    task = Task.objects.create(project=project, external_id="t", prompt="p")
    r9 = Response.objects.create(project=project, task=task, external_id="r9")
    r10 = Response.objects.create(project=project, task=task, external_id="r10")
    ann = Annotator.objects.create(project=project, name="ann")
    Preference.objects.create(
        task=task, response_a=r9, response_b=r10, choice="b", provider="human", annotator=ann,
        confidence=None,
    )  # fmt: skip
    assert agreement_tally(project=project) == {(None, (("ann", "human", "first", None),)): 1}


@pytest.mark.parametrize("page", ["agreement", "annotators"])
def test_the_pages_read_a_fixed_number_of_statements(
    project: Project, admin_user: User, page: str
) -> None:
    client = Client()
    client.force_login(admin_user)
    url = reverse(page, args=[project.slug])
    random_labels(project, 0)
    with CaptureQueriesContext(connection) as few:
        assert client.get(url).status_code == 200
    random_labels(project, 1, prefix="more-")
    with CaptureQueriesContext(connection) as more:
        assert client.get(url).status_code == 200
    assert len(more) == len(few) <= 16


def _groupings(run: CaptureQueriesContext) -> int:
    return sum("array_agg" in query["sql"] for query in run.captured_queries)


@only_postgresql
def test_the_grouped_rows_are_reused_until_a_label_is_added_retired_or_deleted(
    project: Project,
) -> None:
    random_labels(project, 7)
    current = Preference.objects.filter(annotator__project=project, is_current=True)
    first = _tally(project, current)
    with CaptureQueriesContext(connection) as again:
        assert _tally(project, current) == first
    assert _groupings(again) == 0
    label = current.order_by("pk").first()
    assert label is not None
    # A revision retires a row and adds one (two changes here); a deletion (a response removed) only
    # takes rows away. Each is counted anew and agrees with Python's count of the labels.
    changes = [
        lambda: Preference.objects.filter(pk=label.pk).update(is_current=False),
        lambda: Preference.objects.create(
            task=label.task,
            response_a=label.response_a,
            response_b=label.response_b,
            dimension=label.dimension,
            provider=label.provider,
            annotator=label.annotator,
            choice="tie" if label.choice != "tie" else "a",
        ),
        lambda: Preference.objects.filter(pk=current.order_by("pk")[5].pk).delete(),
    ]
    for change in changes:
        change()
        with CaptureQueriesContext(connection) as run:
            counted = _tally(project, current)
        assert _groupings(run) == 1
        assert counted == tally(_labels(current))
