"""The lineage page: each step from label snapshot to the next version, with its link; the
empty state; escaping; who may see it; and a query count that does not grow with versions."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from graders.aliases import alias_promote
from graders.engine.baseline import baseline_program
from graders.models import (
    Candidate,
    CapturedGroup,
    GraderExport,
    JudgeEndpoint,
    Metagrader,
    RewardUsage,
    SearchRun,
)
from graders.services import grader_promote, metagrader_register
from graders.tokens import token_create
from labeling.models import Job, LabelSnapshot, Preference, Project
from tests.graders.test_drift import captured_pair, labeled_run, prefer, promoted

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def reports_uncached() -> None:
    cache.clear()


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def lineage_url(project: Project) -> str:
    return reverse("lineage", args=[project.slug])


def won_version(
    project: Project, label: str, *, days_ago: float, warm_start: Metagrader | None = None
) -> tuple[Metagrader, SearchRun]:
    """A new grader version (parented by `warm_start`) that won a search on a snapshot taken
    `days_ago` days ago, warm-started from `warm_start`."""
    program = baseline_program("scalar").to_json() | {"description": f"Version {label}."}
    grader = metagrader_register(
        project=project, program=program, origin="human", parent=warm_start
    )
    endpoint, _ = JudgeEndpoint.objects.get_or_create(
        project=project,
        name="fake",
        defaults={"base_url": "http://127.0.0.1:9/v1", "model": "fake"},
    )
    snapshot = LabelSnapshot.objects.create(project=project, content_hash=f"snap-{label}")
    LabelSnapshot.objects.filter(pk=snapshot.pk).update(
        created_at=timezone.now() - timedelta(days=days_ago)
    )
    search = SearchRun.objects.create(
        project=project, job=Job.objects.create(project=project, kind="search"), kind="scalar",
        mode="best_of_n", endpoint=endpoint, n=1,
        snapshot=snapshot, warm_start=warm_start,
    )  # fmt: skip
    candidate = Candidate.objects.create(search=search, metagrader=grader, iteration=0, position=0)
    SearchRun.objects.filter(pk=search.pk).update(winner=candidate)
    return grader, search


def sections(page_text: str) -> list[str]:
    """The page's per-version sections, oldest version first."""
    return page_text.split('<section class="lineage-version">')[1:]


def test_each_step_of_the_chain_is_shown_with_its_link(project: Project, admin_user: User) -> None:
    first = promoted(project)  # won a search on a snapshot 2 days old; `production` -> it
    first_search = SearchRun.objects.get(winner__metagrader=first)
    grader_promote(project=project, metagrader=first, search=first_search)
    second, next_search = won_version(project, "B", days_ago=1, warm_start=first)
    alias_promote(project=project, name="production", metagrader=second)
    GraderExport.objects.create(project=project, metagrader=first, snapshot=first_search.snapshot)
    token, _ = token_create(project=project, name="trainer", scopes=["reward"])
    RewardUsage.objects.create(metagrader=first, token=token, requests=3, responses=12)
    winner, loser = captured_pair(first, 0, (0.9, 0.1), step=7)
    CapturedGroup.objects.filter(metagrader=first).update(run="run-a")
    label = prefer(winner, loser)
    # Made 1.5 days ago: after the first version's snapshot (2 days), before the second's (1).
    Preference.objects.filter(pk=label.pk).update(created_at=timezone.now() - timedelta(days=1.5))

    page = client_of(admin_user).get(lineage_url(project))

    assert page.status_code == 200
    text = page.content.decode()
    slug = project.slug
    assert reverse("search", args=[slug, first_search.pk]) in text.split("<h2>Versions</h2>")[0]
    old, new = sections(text)
    assert f'won <a href="{reverse("search", args=[slug, first_search.pk])}">' in old
    assert "selected as scalar v1" in old
    assert "1 bundle download," in old and reverse("bundle-download", args=[slug, first.pk]) in old
    assert "3 requests scoring 12 responses from 1 " in old
    assert reverse("api-tokens", args=[slug]) in old
    assert "run run-a: 1 group, steps 7\N{EN DASH}7" in old
    assert "<b>Fresh labels:</b> 1 human overall label since its snapshot" in old
    assert reverse("label", args=[slug]) in old
    assert "no alert" in old and reverse("drift", args=[slug, first.pk]) in old
    next_link = reverse("search", args=[slug, next_search.pk])
    assert f'<a href="{next_link}">search #{next_search.pk}</a> warm-started from it, won by' in old
    assert reverse("program", args=[slug, second.pk]) in old

    # The second version: parent link, the alias now on it and the move that put it there.
    assert f'parent <a href="{reverse("program", args=[slug, first.pk])}">' in new
    assert "now pointing here: " in new and ">production</a>" in new
    assert "production promoted here from" in new
    assert "<b>Exports:</b> none" in new and "<b>Captured rollouts:</b> none" in new
    assert "<b>Fresh labels:</b> 0 human overall labels since its snapshot" in new
    assert "<b>Next version:</b> none yet" in new


def test_a_drifting_version_in_use_shows_the_alert(project: Project, reviewer_user: User) -> None:
    grader = promoted(project)
    labeled_run(grader, 25, agrees=5)  # fresh accuracy 0.2 against 0.9 at selection

    text = client_of(reviewer_user).get(lineage_url(project)).content.decode()

    (version,) = sections(text)
    assert 'role="alert"' in version and "more than 0.05 below" in version
    assert "25 human overall labels since its snapshot" in version


def test_a_new_project_gets_the_empty_state(project: Project, admin_user: User) -> None:
    text = client_of(admin_user).get(lineage_url(project)).content.decode()

    assert "No label snapshot yet" in text
    assert "No grader version yet: run a" in text
    assert reverse("searches", args=[project.slug]) in text
    assert sections(text) == []


def test_names_are_escaped(project: Project, admin_user: User) -> None:
    grader = promoted(project)
    Metagrader.objects.filter(pk=grader.pk).update(name="<script>x</script>")

    text = client_of(admin_user).get(lineage_url(project)).content.decode()

    assert "<script>x</script>" not in text
    assert "&lt;script&gt;x&lt;/script&gt;" in text


def test_experts_are_refused_and_the_graders_page_links_it(
    project: Project, expert_user: User, reviewer_user: User
) -> None:
    assert client_of(expert_user).get(lineage_url(project)).status_code == 403
    graders = client_of(reviewer_user).get(reverse("graders", args=[project.slug]))
    assert lineage_url(project) in graders.content.decode()


def test_queries_do_not_grow_with_versions(
    project: Project, admin_user: User, django_assert_max_num_queries: object
) -> None:
    first = promoted(project)
    client = client_of(admin_user)
    won_version(project, "B", days_ago=1, warm_start=first)
    with CaptureQueriesContext(connection) as few:
        assert client.get(lineage_url(project)).status_code == 200
    for label in "CDEF":
        grader, _ = won_version(project, label, days_ago=0.5, warm_start=first)
        GraderExport.objects.create(project=project, metagrader=grader)
        captured_pair(grader, ord(label), (0.5, 0.5), step=1)

    with CaptureQueriesContext(connection) as many:
        page = client.get(lineage_url(project))

    assert len(sections(page.content.decode())) == 6
    assert len(many) == len(few)
    with django_assert_max_num_queries(len(few)):  # type: ignore[operator]
        client.get(lineage_url(project))


def test_a_version_only_ranked_in_a_search_counts_labels_since_that_search(
    project: Project, admin_user: User
) -> None:
    """As drift does: a grader promoted by hand that a search ranked but did not pick is
    measured from that search's snapshot, not from the beginning."""
    _, search = won_version(project, "W", days_ago=2)
    ranked = metagrader_register(
        project=project,
        program=baseline_program("scalar").to_json() | {"description": "Ranked."},
        origin="human",
    )
    Candidate.objects.create(search=search, metagrader=ranked, iteration=0, position=1)
    grader_promote(project=project, metagrader=ranked)
    first, second = captured_pair(ranked, 0, (0.9, 0.1), step=1)
    older, newer = prefer(first, second), prefer(first, second, name="ann")
    # One label 3 days old (before the 2-day snapshot), one 1 day old (after it).
    Preference.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=3))
    Preference.objects.filter(pk=newer.pk).update(created_at=timezone.now() - timedelta(days=1))

    text = client_of(admin_user).get(lineage_url(project)).content.decode()

    _, ranked_section = sections(text)
    assert "<b>Fresh labels:</b> 1 human overall label since its snapshot" in ranked_section


def test_a_version_no_search_chose_counts_every_label(project: Project, admin_user: User) -> None:
    imported = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="human"
    )
    alias_promote(project=project, name="staging", metagrader=imported)
    prefer(*captured_pair(imported, 0, (0.9, 0.1), step=None))

    text = client_of(admin_user).get(lineage_url(project)).content.decode()

    (version,) = sections(text)
    assert "no search chose it, so no snapshot" in version and "won no search" in version
    assert "<b>Fresh labels:</b> 1 human overall label in all" in version
    assert "staging promoted here (first use)" in version
    assert "run (unnamed): 1 group</li>" in version
