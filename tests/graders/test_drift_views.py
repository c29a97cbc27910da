"""The drift page, its link and alert on the grader page, the alert on the project home, and
who may see them (reviewers and admins, never experts)."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from graders.charts import drift_svg
from graders.models import Metagrader
from labeling.models import Project
from tests.graders.test_drift import labeled_run, promoted

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def reports_uncached() -> None:
    cache.clear()


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def drift_url(grader: Metagrader) -> str:
    return reverse("drift", args=[grader.project.slug, grader.pk])


def test_page_without_fresh_labels_says_how_to_get_them(project: Project, admin_user: User) -> None:
    grader = promoted(project)
    page = client_of(admin_user).get(drift_url(grader))
    assert page.status_code == 200
    text = page.content.decode()
    assert "No fresh labels yet: label captured pairs on the" in text
    assert reverse("label", args=[project.slug]) in text
    assert "<svg" not in text
    assert 'role="alert"' not in text


def test_page_with_a_drop_shows_figures_chart_and_alert(
    project: Project, reviewer_user: User
) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)  # steps 0-24: buckets 0-9, 10-19, 20-29
    page = client_of(reviewer_user).get(drift_url(grader))
    assert page.status_code == 200
    text = page.content.decode()
    assert "No fresh labels yet" not in text
    assert 'role="alert"' in text and "more than 0.05 below" in text
    assert text.count('<circle class="point accuracy"') == 3
    assert text.count('<circle class="point eval"') == 3
    assert "<td>0\N{EN DASH}9</td>" in text and "<td>20\N{EN DASH}29</td>" in text


def test_page_parameters_change_the_buckets(project: Project, admin_user: User) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    text = client_of(admin_user).get(drift_url(grader), {"step_bucket": "5"}).content.decode()
    assert text.count('<circle class="point accuracy"') == 5


def test_experts_cannot_see_the_drift_page(project: Project, expert_user: User) -> None:
    grader = promoted(project)
    assert client_of(expert_user).get(drift_url(grader)).status_code == 403


def test_alert_on_the_project_home_for_reviewers_not_experts(
    project: Project, admin_user: User, expert_user: User
) -> None:
    grader = promoted(project)
    home = reverse("project-overview", args=[project.slug])
    assert 'role="alert"' not in client_of(admin_user).get(home).content.decode()
    labeled_run(grader, 25, agrees=5)
    text = client_of(admin_user).get(home).content.decode()
    assert f"Drift of grader #{grader.pk}" in text and drift_url(grader) in text
    assert "Drift of grader" not in client_of(expert_user).get(home).content.decode()


def test_grader_page_links_the_drift_page_and_shows_the_alert(
    project: Project, admin_user: User
) -> None:
    grader = promoted(project)
    program = reverse("program", args=[project.slug, grader.pk])
    text = client_of(admin_user).get(program).content.decode()
    assert drift_url(grader) in text and "more than 0.05 below" not in text
    labeled_run(grader, 25, agrees=5)
    text = client_of(admin_user).get(program).content.decode()
    assert "more than 0.05 below" in text


def test_grader_name_is_escaped(project: Project, admin_user: User) -> None:
    grader = promoted(project)
    Metagrader.objects.filter(pk=grader.pk).update(name="<script>x</script>")
    labeled_run(grader, 25, agrees=5)
    home = reverse("project-overview", args=[project.slug])
    for url in (drift_url(grader), home):
        text = client_of(admin_user).get(url).content.decode()
        assert "<script>x</script>" not in text
        assert "&lt;script&gt;x&lt;/script&gt;" in text


def test_chart_breaks_lines_at_missing_values() -> None:
    buckets: list[dict[str, Any]] = [
        {"first_step": 0, "last_step": 9, "accuracy": {"value": 1.0, "ci": [0.8, 1.0]},
         "mean_reward": 0.4},
        {"first_step": 10, "last_step": 19, "accuracy": None, "mean_reward": 0.5},
        {"first_step": 20, "last_step": 29, "accuracy": {"value": 0.5, "ci": None},
         "mean_reward": 0.6},
    ]  # fmt: skip
    svg = str(drift_svg(buckets, selection=0.9))
    assert svg.count('<circle class="point accuracy"') == 2
    assert svg.count('<path class="whisker accuracy"') == 1  # the second point has no interval
    # Accuracy has no two neighbouring points: no accuracy line; the rewards make one line.
    assert '<polyline class="line accuracy"' not in svg
    assert svg.count('<polyline class="line eval"') == 1
    assert "Accuracy at selection 0.900" in svg
    assert "Accuracy at selection" not in str(drift_svg(buckets, selection=None))


def test_bad_page_parameters_are_named_and_defaults_used(
    project: Project, admin_user: User
) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    page = client_of(admin_user).get(drift_url(grader), {"step_bucket": "0"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "greater than or equal to 1" in text
    assert text.count('<circle class="point accuracy"') == 3  # default buckets of 10


def test_chart_places_buckets_by_step() -> None:
    buckets: list[dict[str, Any]] = [
        {"first_step": step, "last_step": step + 9, "accuracy": None, "mean_reward": 0.5}
        for step in (0, 10, 40)
    ]
    svg = str(drift_svg(buckets, selection=None))
    # Plot from x = 64 + 16 to 640 - 24 - 16: 520 wide over steps 0..40, so step 10 at 210.
    assert [f'cx="{x}"' in svg for x in ("80.0", "210.0", "600.0")] == [True, True, True]


def test_a_second_ready_does_not_show_alerts_twice(project: Project, admin_user: User) -> None:
    from django.apps import apps

    apps.get_app_config("graders").ready()
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    home = reverse("project-overview", args=[project.slug])
    assert client_of(admin_user).get(home).content.decode().count("Drift of grader") == 1


def test_the_drift_page_offers_managers_a_re_search_and_reviewers_none(
    project: Project, admin_user: User, reviewer_user: User
) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)
    action = reverse("grader-research", args=[project.slug, grader.pk])
    assert f'action="{action}"' in client_of(admin_user).get(drift_url(grader)).content.decode()
    assert action not in client_of(reviewer_user).get(drift_url(grader)).content.decode()
