"""The Graders page lists every grader and every run, page by page, each list paging apart."""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import GradingRun, JudgeEndpoint
from graders.services import metagrader_register
from graders.views import LIST_PAGE, RUNS_PAGE
from labeling.models import Job, Project

pytestmark = pytest.mark.django_db


def test_graders_and_runs_page_apart_keeping_the_other_list_s_page(
    project: Project, reviewer_user: User
) -> None:
    judge = JudgeEndpoint.objects.create(
        project=project, name="j", base_url="https://api.example.com/v1", model="m"
    )
    graders = []
    for n in range(LIST_PAGE + 1):
        program = baseline_program("scalar").to_json() | {"name": f"g{n:03d}"}
        program["steps"][0]["prompt"] += f" ({n})"
        graders.append(metagrader_register(project=project, program=program, origin="search"))
    for _ in range(RUNS_PAGE + 5):
        job = Job.objects.create(project=project, kind="grading")
        GradingRun.objects.create(project=project, metagrader=graders[0], endpoint=judge, job=job)
    client = Client()
    client.force_login(reviewer_user)
    page_url = reverse("graders", args=["acme"])

    first = client.get(page_url).content.decode()
    later = client.get(page_url, {"graders_page": 2, "runs_page": 2}).content.decode()

    assert first.count("/runs/") == RUNS_PAGE and later.count("/runs/") == 5
    shown = set(re.findall(r">#\d+ (g\d{3})</a>", first)) | set(
        re.findall(r">#\d+ (g\d{3})</a>", later)
    )
    assert len(shown) == LIST_PAGE + 1  # every grader on one page or the other
    assert f"Page 1 of 2 · {LIST_PAGE + 1} graders" in first and "Page 1 of 2 · 25 runs" in first
    # Each list's links keep the other list's page.
    assert '?graders_page=2&amp;runs_page=2"' not in first
    assert 'href="?graders_page=1&amp;runs_page=2">← Previous' in later
    assert 'href="?graders_page=2&amp;runs_page=1">← Previous' in later
