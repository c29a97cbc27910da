"""Reservoir eviction (graders/capture.py _slot_free) in a fixed number of statements: the
group a new one pushes out goes with its responses and everything made from them, unless
experts labeled or were served them (tests/graders/test_capture.py covers that they stay)."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from graders.models import CapturedGroup, CapturedResponse, Grade
from labeling.models import Annotator, JudgeScore, Project, QueuePair, QueueSlot, Response
from tests.graders.test_capture import (  # noqa: F401 (fixtures)
    Fixed,
    capture_inline,
    capture_project,
    offer,
    rate_counts_cleared,
)

pytestmark = pytest.mark.django_db


def test_evicting_a_group_deletes_it_and_what_hangs_off_its_responses(
    capture_project: Project,  # noqa: F811 (the fixture imported above)
    settings: Any,
) -> None:
    settings.CAPTURE_GROUPS_PER_TASK = 1
    offer(capture_project, ["GOOD", "POOR", "OKAY"], Fixed(0), step=1)
    old = list(
        Response.objects.filter(task__external_id="t0", content__endswith=" 1").order_by("pk")
    )
    assert len(old) == 3
    # Made from captured responses without an expert: a queued pair nobody was served yet.
    pair = QueuePair.objects.create(
        project=capture_project, task=old[0].task, response_a=old[0], response_b=old[1]
    )
    QueueSlot.objects.create(pair=pair, project=capture_project)
    Annotator.objects.create(project=capture_project, name="eve")  # exists, was served nothing
    with CaptureQueriesContext(connection) as queries:
        offer(capture_project, ["GOOD", "POOR"], Fixed(0), step=2)  # slot 0 of 1: step 1 goes
    assert list(CapturedGroup.objects.values_list("step", flat=True)) == [2]
    assert not Response.objects.filter(pk__in=[r.pk for r in old]).exists()
    assert not QueuePair.objects.exists() and not QueueSlot.objects.exists()
    assert CapturedResponse.objects.count() == 2
    assert not Grade.objects.exists() and not JudgeScore.objects.exists()
    # The pushed-out responses' texts are never read to delete them, and the statements stay
    # few: 33, one of them for the pair flags that hang off the queue's pairs (the ORM's
    # cascade over whole rows, texts included, took 35 before pair flags existed).
    sql = [query["sql"] for query in queries.captured_queries]
    assert not any('"labeling_response"."content"' in statement for statement in sql)
    assert len(sql) <= 33
