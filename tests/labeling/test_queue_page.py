"""The Queue page's strategy choice, its fallback notice, the refresh button, and build_queue's
--strategy."""

from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling import strategies
from labeling.imports import jsonl_import
from labeling.models import Project, QueuePair
from labeling.strategies import CoverageFirst, StrategyChoice, StrategySpec, strategy_register
from tests.labeling.helpers import write_jsonl
from tests.labeling.test_label_views import client_for
from tests.labeling.test_queue import tasks_with_responses
from tests.labeling.test_queue_active import by_response  # noqa: F401 (a fixture)

NEEDS_SEARCH = "needs a search with at least two graded candidates; serving Coverage first"


@pytest.fixture
def not_yet() -> Iterator[StrategySpec]:
    """A strategy that cannot run yet and says so, as "Which grader wins" does before a search."""
    spec = StrategySpec(
        "not_yet",
        "Not <yet>",
        "Waits for a search & says so.",
        lambda project, seed: StrategyChoice(CoverageFirst(seed), fallback=NEEDS_SEARCH),
    )
    strategy_register(spec)
    yield spec
    del strategies._SPECS[spec.name]


@pytest.fixture
def pairs(project: Project, tmp_path: Path) -> Project:
    records = tasks_with_responses(2, 3)
    jsonl_import(project=project, path=write_jsonl(tmp_path / "q.jsonl", records))
    return project


def page(user: User) -> str:
    return client_for(user).get(reverse("queue", args=["acme"])).content.decode()


def test_managers_choose_among_the_registered_strategies_with_their_hints(
    pairs: Project, admin_user: User, expert_user: User, not_yet: StrategySpec
) -> None:
    html = page(admin_user)
    assert 'name="strategy" value="coverage"' in html and "checked" in html
    assert "Coverage first" in html and strategies.COVERAGE.hint in html
    # Labels and hints are escaped like any text.
    assert "Not &lt;yet&gt;" in html and "Waits for a search &amp; says so." in html
    assert "Priorities not written yet." in html
    expert_page = page(expert_user)
    assert 'name="strategy"' not in expert_page and "Refresh priorities now" not in expert_page
    url = reverse("queue-strategy", args=["acme"])
    answer = client_for(expert_user).post(
        url, {"strategy": "not_yet", "epsilon": 0.1, "refresh_labels": 20}
    )
    assert answer.status_code == 403


def test_saving_a_new_strategy_stores_it_and_rewrites_the_priorities_in_the_background(
    pairs: Project,
    admin_user: User,
    by_response: StrategySpec,  # noqa: F811 (the fixture imported above)
    django_capture_on_commit_callbacks: Any,
) -> None:
    url = reverse("queue-strategy", args=["acme"])
    with django_capture_on_commit_callbacks() as sent:
        answer = client_for(admin_user).post(
            url, {"strategy": "by_response", "epsilon": 0.25, "refresh_labels": 5}, follow=True
        )
    assert "rewritten with them in the background" in answer.content.decode()
    assert len(sent) == 1
    pairs.refresh_from_db()
    assert (pairs.queue_strategy, pairs.queue_epsilon, pairs.queue_refresh_labels) == (
        "by_response",
        0.25,
        5,
    )
    # The same strategy and share again: nothing to rewrite.
    with django_capture_on_commit_callbacks() as sent:
        client_for(admin_user).post(
            url, {"strategy": "by_response", "epsilon": 0.25, "refresh_labels": 9}
        )
    assert sent == []


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"strategy": "nope", "epsilon": 0.1, "refresh_labels": 20}, "Select a valid choice"),
        ({"strategy": "coverage", "epsilon": 1.5, "refresh_labels": 20}, "less than or equal"),
        ({"strategy": "coverage", "epsilon": 0.1, "refresh_labels": -1}, "greater than or equal"),
    ],
)
def test_bad_settings_are_a_400_naming_the_field(
    pairs: Project, admin_user: User, data: dict[str, Any], error: str
) -> None:
    answer = client_for(admin_user).post(reverse("queue-strategy", args=["acme"]), data)
    assert answer.status_code == 400 and error in answer.content.decode()
    pairs.refresh_from_db()
    assert (pairs.queue_strategy, pairs.queue_epsilon, pairs.queue_refresh_labels) == (
        "coverage",
        0.1,
        20,
    )


def test_a_strategy_that_cannot_run_yet_says_why_and_builds_with_its_fallback(
    pairs: Project, admin_user: User, not_yet: StrategySpec
) -> None:
    pairs.queue_strategy = "not_yet"
    pairs.save()
    assert f"Not &lt;yet&gt; cannot run yet: {NEEDS_SEARCH}." in page(admin_user)
    answer = client_for(admin_user).post(
        reverse("queue", args=["acme"]), {"pairs_per_task": 5, "seed": 0}, follow=True
    )
    html = answer.content.decode()
    assert "Queued 6 pairs." in html and f"Built with a fallback: {NEEDS_SEARCH}." in html
    assert set(QueuePair.objects.values_list("strategy", flat=True)) == {"coverage"}
    assert "by Coverage first." in html  # the strategy that wrote them, not the one chosen


def test_an_unregistered_choice_is_named_on_the_page(pairs: Project, admin_user: User) -> None:
    pairs.queue_strategy = "retired"
    pairs.save()
    assert "the chosen strategy &#x27;retired&#x27; is not available" in page(admin_user)


def test_building_uses_the_projects_strategy_and_the_page_says_when_it_wrote(
    pairs: Project,
    admin_user: User,
    by_response: StrategySpec,  # noqa: F811
) -> None:
    pairs.queue_strategy = "by_response"
    pairs.save()
    client_for(admin_user).post(reverse("queue", args=["acme"]), {"pairs_per_task": 5, "seed": 0})
    assert set(QueuePair.objects.values_list("strategy", "pool")) == {("by_response", 6)}
    pairs.refresh_from_db()
    written = pairs.queue_written_at
    assert written is not None
    assert f"Priorities last written {written:%Y-%m-%d %H:%M} UTC by By response." in page(
        admin_user
    )


def test_refresh_now_enqueues_once_and_says_so(
    pairs: Project, admin_user: User, expert_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    url = reverse("queue-refresh", args=["acme"])
    assert client_for(expert_user).post(url).status_code == 403
    with django_capture_on_commit_callbacks() as sent:
        first = client_for(admin_user).post(url, follow=True).content.decode()
        second = client_for(admin_user).post(url, follow=True).content.decode()
    assert "Priorities will be rewritten in the background" in first
    assert "already pending" in second and "A rewrite is pending." in second
    assert len(sent) == 1


def test_build_queue_chooses_a_strategy_by_name_and_refuses_unknown_ones(
    pairs: Project,
    by_response: StrategySpec,  # noqa: F811
) -> None:
    with pytest.raises(
        CommandError, match=r"unknown strategy 'nope'; known: coverage, .*by_response"
    ):
        call_command("build_queue", "--project", "acme", "--strategy", "nope")
    out = StringIO()
    call_command("build_queue", "--project", "acme", "--strategy", "by_response", stdout=out)
    assert out.getvalue() == "Queued 6 pairs in acme by by_response.\n"
    pairs.refresh_from_db()
    assert pairs.queue_strategy == "by_response"
    assert set(QueuePair.objects.values_list("strategy", flat=True)) == {"by_response"}


def test_the_page_asks_a_strategy_its_cheap_check_instead_of_building_it(
    pairs: Project, admin_user: User
) -> None:
    def build(project: Project, seed: int) -> StrategyChoice:
        raise AssertionError("the Queue page built the strategy to read its fallback")

    spec = StrategySpec("costly", "Costly", "Expensive to build.", build, lambda p: NEEDS_SEARCH)
    strategy_register(spec)
    try:
        pairs.queue_strategy = "costly"
        pairs.save()
        assert NEEDS_SEARCH in page(admin_user)
    finally:
        del strategies._SPECS[spec.name]
