"""The demo's rubric review is reachable out of the box: load_demo selects the baseline rubric
grader and stores generated rubrics for three tasks, once."""

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from graders.models import GraderSelection
from labeling.models import Rubric

pytestmark = pytest.mark.django_db


def test_load_demo_gives_the_reviewer_generated_rubrics_to_review(settings: Any) -> None:
    settings.DEBUG = True  # the demo loads only on a development checkout
    call_command("load_demo", judge_url="http://127.0.0.1:9/v1", stdout=io.StringIO())

    selection = GraderSelection.objects.get(project__slug="demo", kind="rubric")
    generated = Rubric.objects.filter(task__project__slug="demo", author_kind="generated")
    assert sorted(generated.values_list("task__external_id", flat=True)) == [
        "air-01",
        "fin-01",
        "legal-01",
    ]
    assert {r.origin for r in generated} == {selection.metagrader.content_hash}
    reviewer = Client()
    assert reviewer.login(username="reviewer", password="workbench-demo")
    page = reviewer.get(reverse("rubric-review", args=["demo", "air-01"])).content.decode()
    assert "Refunds to the original form of payment, not as travel credit." in page
    assert (
        reviewer.get(reverse("rubric-list", args=["demo"]))
        .content.decode()
        .count('href="/p/demo/rubrics/task/')
        == 3
    )

    call_command("load_demo", judge_url="http://127.0.0.1:9/v1", stdout=io.StringIO())

    assert GraderSelection.objects.filter(project__slug="demo").count() == 1
    assert [r.version for r in generated.all()] == [1, 1, 1]
