""" "Which grader wins" on the Django side: the committee read from a real search's stored
rewards and labels, the queue strategy's ranks, its registration and fallback, and the search
page's P(best) panel with "Label these next". The search is graded over HTTP by the scripted
fake judge of tests/graders/which_wins_setup.py, whose table of votes the numbers below use."""

import re
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from graders.active.committee import committee_for_project, committee_search
from graders.active.strategy import FALLBACK, WHICH_WINS, WhichGraderWins
from graders.charts import p_best_bars_svg
from graders.models import Candidate, CandidateStatus, SearchRun
from labeling.jobs import job_create
from labeling.models import (
    Annotator,
    Dimension,
    Preference,
    Project,
    Provider,
    QueuePair,
    Response,
)
from labeling.strategies import CandidatePair, CoverageFirst, strategy_for, strategy_specs
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.which_wins_setup import (
    candidate_named,
    response_ids,
    three_candidate_search,
    which_wins_import,
)

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def search(project: Project, tmp_path: Path, fake_judge: FakeJudgeServer) -> SearchRun:
    which_wins_import(project, tmp_path, selection=3, train=1)
    return three_candidate_search(project, fake_judge)


def label(project: Project, a: str, b: str, choice: str, who: str = "ann", **extra: object) -> None:
    """A current expert label on the pair of responses named by external id."""
    ids = response_ids(project)
    annotator, _ = Annotator.objects.get_or_create(project=project, name=who)
    Preference.objects.create(
        task_id=Response.objects.get(pk=ids[a]).task_id,
        response_a_id=ids[a],
        response_b_id=ids[b],
        choice=choice,
        provider=extra.pop("provider", Provider.HUMAN),
        annotator=annotator,
        **extra,
    )


def expert_prefers(project: Project, task: str, better: str, worse: str) -> None:
    label(project, f"{task}/{better}", f"{task}/{worse}", "a")


def all_pairs(project: Project) -> list[CandidatePair]:
    """Every same-task pair of the project, lower response id first, as queue_build sees them."""
    rows = Response.objects.filter(project=project).values_list(
        "pk", "task_id", "task__split", "task__domain"
    )
    by_task: dict[int, list[tuple[int, str, str]]] = {}
    for pk, task, split, domain in rows:
        by_task.setdefault(task, []).append((pk, split, domain))
    return [
        CandidatePair(task, split, domain, a, b)
        for task, members in sorted(by_task.items())
        for i, (a, split, domain) in enumerate(sorted(members))
        for b, _, _ in sorted(members)[i + 1 :]
    ]


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page(project: Project, search: SearchRun) -> str:
    return reverse("search", args=[project.slug, search.pk])


def panel_html(html: str) -> str:
    return html[html.index('<section id="which-wins"') :]


# The committee ------------------------------------------------------------------------------


def test_the_committee_reads_the_search_rewards_and_the_expert_majority(
    search: SearchRun, django_assert_num_queries: object
) -> None:
    project = search.project
    roles = candidate_named(search)
    ids = response_ids(project)
    assert ids["s1/good"] < ids["s1/okay"] < ids["s1/poor"]  # the table's orientation
    # The search, its candidates, the stamp of their runs' grades, the grades (not cached yet),
    # the labels.
    with django_assert_num_queries(5):  # type: ignore[operator]
        committee = committee_for_project(project)
    assert committee is not None and committee.search == search
    column = {c.pk: k for k, c in enumerate(committee.members)}
    assert set(column) == {c.pk for c in roles.values()}
    s1 = [ids[f"s1/{w}"] for w in ("good", "okay", "poor")]
    for role, expected in (
        ("baseline", [0.5, 0.9, 0.2]),
        ("verifier", [0.9, 0.5, 0.2]),
        ("averager", [0.75, 0.45, 0.6]),
    ):
        k = column[roles[role].pk]
        assert [committee.rewards[committee.row[r], k] for r in s1] == pytest.approx(expected)
    # Only the imported label so far, on GOOD-POOR, which every candidate orders alike: it is a
    # label, but it cannot separate them, so the posterior is the prior and P(best) uniform.
    assert committee.labels == {(ids["s0/good"], ids["s0/poor"]): 1}
    assert committee.discriminating_labels() == 0
    assert committee.p_best == pytest.approx([1 / 3] * 3)

    # s1 GOOD-OKAY: two of three people say GOOD, so the majority counts once, for GOOD. s1
    # OKAY-POOR splits one against one: no majority, no label for the posterior, but the pair
    # has left the pool. A label on a dimension or from a generator is not an overall expert one.
    expert_prefers(project, "s1", "good", "okay")
    label(project, "s1/good", "s1/okay", "a", who="bo")
    label(project, "s1/good", "s1/okay", "b", who="cy")
    label(project, "s1/okay", "s1/poor", "a", who="bo")
    label(project, "s1/okay", "s1/poor", "b", who="cy")
    tone = Dimension.objects.create(project=project, name="tone")
    label(project, "s2/good", "s2/okay", "b", dimension=tone)
    label(project, "s2/okay", "s2/poor", "b", provider=Provider.SYNTHETIC)
    committee = committee_for_project(project)
    assert committee is not None
    good_okay, okay_poor = (ids["s1/good"], ids["s1/okay"]), (ids["s1/okay"], ids["s1/poor"])
    assert committee.labels[good_okay] == 1 and okay_poor not in committee.labels
    assert okay_poor in committee.labeled
    assert (ids["s2/okay"], ids["s2/poor"]) not in committee.labeled
    # GOOD-OKAY with GOOD better: credit 0 for the baseline's -1, 1 for the others' +1, so
    # Beta(1 + credit, 1 + 1 - credit): baseline (1, 2), verifier and averager (2, 1).
    alpha = {role: committee.posterior.alpha[column[c.pk]] for role, c in roles.items()}
    beta = {role: committee.posterior.beta[column[c.pk]] for role, c in roles.items()}
    assert alpha == {"baseline": 1, "verifier": 2, "averager": 2}
    assert beta == {"baseline": 2, "verifier": 1, "averager": 1}
    p = {role: committee.p_best[column[c.pk]] for role, c in roles.items()}
    assert p["verifier"] == pytest.approx(p["averager"]) and p["verifier"] > 3 * p["baseline"]


def test_the_committee_follows_the_latest_search_with_two_graded_candidates(
    search: SearchRun,
) -> None:
    project = search.project
    later = SearchRun.objects.create(
        project=project,
        job=job_create(kind="search", project=project, params={}),
        kind="scalar",
        mode="best_of_n",
        endpoint=search.endpoint,
        n=1,
    )
    first, second, _ = Candidate.objects.filter(search=search)

    def graded_in_later(candidate: Candidate, position: int) -> None:
        Candidate.objects.create(
            search=later,
            metagrader=candidate.metagrader,
            iteration=0,
            position=position,
            status=CandidateStatus.GRADED,
            score=0.5,
        )

    # One graded candidate is no committee: the earlier search still leads the queue.
    graded_in_later(first, 0)
    assert committee_search(project) == search
    committee = committee_for_project(project)
    assert committee is not None and committee.search == search
    # With a second one the later search leads.
    graded_in_later(second, 1)
    assert committee_search(project) == later
    Candidate.objects.filter(search=later, position=1).delete()
    # No search with two graded candidates: nothing to follow.
    Candidate.objects.filter(search=search).exclude(pk=first.pk).update(
        status=CandidateStatus.REJECTED
    )
    assert committee_search(project) is None and committee_for_project(project) is None


# The strategy -------------------------------------------------------------------------------


def test_which_wins_is_registered_after_coverage_and_falls_back_without_a_committee(
    project: Project,
) -> None:
    names = [spec.name for spec in strategy_specs()]
    assert names.index("coverage") == 0 and "which_wins" in names
    project.queue_strategy = "which_wins"
    choice = strategy_for(project, seed=3)
    assert isinstance(choice.strategy, CoverageFirst) and choice.strategy.seed == 3
    assert choice.fallback == FALLBACK
    assert FALLBACK == (
        "needs a search with at least two graded candidates; serving Coverage first until then"
    )


def test_rank_draws_disagreements_first_and_records_each_pairs_chance(search: SearchRun) -> None:
    project = search.project
    ids = response_ids(project)
    committee = committee_for_project(project)
    assert committee is not None
    choice = strategy_for(project)
    assert choice.fallback == "" and isinstance(choice.strategy, CoverageFirst)  # not chosen yet
    project.queue_strategy = "which_wins"
    project.queue_epsilon = 0.1
    strategy = strategy_for(project, seed=4).strategy
    assert isinstance(strategy, WhichGraderWins)
    pairs = all_pairs(project)
    ranks = strategy.rank(pairs)
    by_names = {}
    names = {pk: name for name, pk in ids.items()}
    for pair, rank in zip(pairs, ranks, strict=True):
        by_names[(names[pair.response_a], names[pair.response_b])] = rank
    assert len(pairs) == 10  # three tasks of three pairs and one train pair
    # The imported s0 GOOD-POOR label took that pair out of the pool: nine pairs are drawn.
    labeled = by_names[("s0/good", "s0/poor")]
    assert (labeled.probability, labeled.pool) == (None, None)
    drawn = [rank for rank in ranks if rank.probability is not None]
    assert len(drawn) == 9 and {rank.pool for rank in drawn} == {9}
    assert labeled.priority < min(rank.priority for rank in drawn)
    assert sum(rank.probability for rank in drawn) == pytest.approx(1.0)  # type: ignore[misc]
    # Worth nothing, so only the random share reaches them: epsilon / pool. These are the
    # GOOD-POOR pairs (every candidate agrees) and the train pair (not D_selection).
    nothing = [("s1/good", "s1/poor"), ("s2/good", "s2/poor"), ("t0/good", "t0/poor")]
    for key in nothing:
        assert by_names[key].probability == pytest.approx(0.1 / 9)
    # The six disagreements share the rest: under the uniform prior the baseline's and the
    # averager's single dissents are mirror images, so each gets 0.9 / 6 + 0.1 / 9.
    disagreements = [key for key in by_names if key not in nothing and by_names[key] is not labeled]
    assert len(disagreements) == 6
    for key in disagreements:
        assert by_names[key].probability == pytest.approx(0.9 / 6 + 0.1 / 9)
    # A draw is reproducible from its seed; a random share of 1 is a uniform draw.
    assert strategy.rank(pairs) == ranks
    uniform = WhichGraderWins(committee, epsilon=1.0).rank(pairs)
    assert [rank.probability for rank in uniform if rank.pool] == [1 / 9] * 9


def test_with_no_random_share_pairs_worth_nothing_follow_the_draw_without_a_chance(
    search: SearchRun,
) -> None:
    committee = committee_for_project(search.project)
    assert committee is not None
    pairs = all_pairs(search.project)
    ranks = WhichGraderWins(committee, epsilon=0.0).rank(pairs)
    drawn = [rank for rank in ranks if rank.probability is not None]
    undrawn = [rank for rank in ranks if rank.probability is None]
    # Six disagreements drawn at 1/6 each; the three pairs worth nothing and the labeled one
    # follow them (finite priorities the database can store), with no chance to reweight by.
    assert [rank.probability for rank in drawn] == [pytest.approx(1 / 6)] * 6
    assert len(undrawn) == 4 and all(np.isfinite(rank.priority) for rank in ranks)
    assert max(rank.priority for rank in undrawn) < min(rank.priority for rank in drawn)


# The search page's panel --------------------------------------------------------------------


def test_the_panel_starts_uniform_and_says_how_many_labels_would_decide(
    search: SearchRun, admin_user: User, reviewer_user: User
) -> None:
    project = search.project
    roles = candidate_named(search)
    roles["averager"].metagrader.name = HOSTILE
    roles["averager"].metagrader.save(update_fields=["name"])
    html = logged_in(admin_user).get(page(project, search)).content.decode()
    panel = panel_html(html)
    assert "P(best) is uniform" in panel
    assert panel.count('<td class="num">0.333</td>') == 3  # the table beside the chart
    assert 'aria-labelledby="p-best-title p-best-desc"' in panel
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in panel
    needed = re.search(r"about (\d+) more until one candidate", panel)
    assert needed is not None and int(needed.group(1)) > 0
    assert "Label these next" in panel and "csrfmiddlewaretoken" in panel
    # Reviewers read the panel but cannot change the queue.
    reviewer_panel = panel_html(
        logged_in(reviewer_user).get(page(project, search)).content.decode()
    )
    assert "P(best) is uniform" in reviewer_panel and "Label these next" not in reviewer_panel
    action = reverse("search-label-next", args=[project.slug, search.pk])
    assert logged_in(reviewer_user).post(action).status_code == 403
    # The results fragment htmx polls carries the panel too.
    headers = {"HX-Request": "true", "HX-Target": "search-results"}
    fragment = logged_in(admin_user).get(page(project, search), headers=headers)
    assert '<section id="which-wins"' in fragment.content.decode()


def test_the_panel_says_decided_or_that_no_label_left_can_decide(
    search: SearchRun, admin_user: User
) -> None:
    project = search.project
    roles = candidate_named(search)
    client = logged_in(admin_user)

    def outlook() -> str:
        panel = panel_html(client.get(page(project, search)).content.decode())
        return " ".join(panel[panel.index("Labels needed to decide:") :].split())

    # s0's and s1's disagreements labeled as the expert sees them, s2's as ties (labeled, but
    # no majority to learn from): the verifier earns 4 of 4, the others 2 of 4, so Beta(5, 1)
    # against two Beta(3, 3), P(best) 0.861. Only GOOD-POOR pairs are left, which every
    # candidate orders alike.
    for task in ("s0", "s1"):
        expert_prefers(project, task, "good", "okay")
        expert_prefers(project, task, "okay", "poor")
    label(project, "s2/good", "s2/okay", "tie")
    label(project, "s2/okay", "s2/poor", "tie")
    assert outlook().startswith(
        "Labels needed to decide:</b> none of the unlabeled pairs left can decide"
    )
    assert '<td class="num">0.861</td>' in panel_html(
        client.get(page(project, search)).content.decode()
    )
    # s2 as the expert sees it too: Beta(7, 1) against two Beta(4, 4), P(best) 0.939.
    Preference.objects.filter(choice="tie").update(choice="a")
    verifier = roles["verifier"].metagrader.name
    assert outlook().startswith(
        f"Labels needed to decide:</b> decided: {verifier} has P(best) 0.939"
    )
    # Every pair labeled, every label a tie: nothing separates the candidates, nothing is left.
    Preference.objects.update(choice="tie")
    label(project, "s1/good", "s1/poor", "tie")
    label(project, "s2/good", "s2/poor", "tie")
    assert outlook().startswith("Labels needed to decide:</b> no unlabeled pairs left")
    # The queue's draw is then over the one unlabeled pair, the train pair: certain, pool 1.
    committee = committee_for_project(project)
    assert committee is not None
    ranks = WhichGraderWins(committee, epsilon=0.1).rank(all_pairs(project))
    assert [(rank.probability, rank.pool) for rank in ranks if rank.pool] == [(1.0, 1)]
    assert "P(best) is uniform" in panel_html(client.get(page(project, search)).content.decode())


def test_label_these_next_makes_which_wins_the_queue_strategy_and_ranks_the_queue(
    search: SearchRun, admin_user: User
) -> None:
    project = search.project
    client = logged_in(admin_user)
    action = reverse("search-label-next", args=[project.slug, search.pk])
    response = client.post(action, follow=True)
    project.refresh_from_db()
    assert project.queue_strategy == "which_wins" and project.queue_written_strategy == "which_wins"
    queued = QueuePair.objects.filter(project=project)
    assert queued.count() == 10 and {p.strategy for p in queued} == {"which_wins"}
    assert {p.pool for p in queued if p.probability is not None} == {9}
    text = response.content.decode()
    assert "10 queued pairs ranked" in text
    assert f'href="{reverse("label", args=[project.slug])}"' in panel_html(text)
    # Again, with the queue in place: its pairs are re-ranked, none added or dropped.
    QueuePair.objects.filter(project=project).update(probability=None, pool=None, strategy="old")
    assert "10 queued pairs ranked" in client.post(action, follow=True).content.decode()
    assert {p.strategy for p in QueuePair.objects.filter(project=project)} == {"which_wins"}
    assert QueuePair.objects.filter(project=project, pool=9).count() == 9


def test_the_p_best_chart_scales_bars_to_one_and_escapes_names() -> None:
    svg = p_best_bars_svg([("even", 0.5), (HOSTILE, 1.0), ("over", 1.5)], threshold=0.9)
    # The plot spans 640 - 180 - 24 = 436 units for P(best) 0 to 1, starting at x = 180.
    widths = re.findall(r'<rect class="bar s0" x="180" y="\d+" width="([\d.]+)"', svg)
    assert widths == ["218.0", "436.0", "436.0"]  # 0.5 * 436; a value past 1 is clamped
    assert '<line class="axis" x1="572.4"' in svg  # 180 + 0.9 * 436: where P(best) decides
    assert HOSTILE not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;: P(best) 1.000" in svg
    assert "style=" not in svg


def test_without_two_graded_candidates_the_panel_and_label_these_next_say_why(
    search: SearchRun, admin_user: User
) -> None:
    project = search.project
    roles = candidate_named(search)
    Candidate.objects.exclude(pk=roles["verifier"].pk).update(status=CandidateStatus.REJECTED)
    client = logged_in(admin_user)
    panel = panel_html(client.get(page(project, search)).content.decode())
    assert "P(best) needs at least two graded candidates" in panel
    assert "Label these next" not in panel
    action = reverse("search-label-next", args=[project.slug, search.pk])
    text = client.post(action, follow=True).content.decode()
    assert f"Which grader wins cannot run yet: {FALLBACK}." in text
    project.refresh_from_db()
    assert project.queue_strategy == "coverage" and not QueuePair.objects.exists()


def test_the_queue_page_offers_which_wins_and_says_when_it_cannot_run(
    project: Project, tmp_path: Path, fake_judge: FakeJudgeServer, admin_user: User
) -> None:
    Project.objects.filter(pk=project.pk).update(queue_strategy="which_wins")
    client = logged_in(admin_user)
    queue = reverse("queue", args=[project.slug])
    text = " ".join(client.get(queue).content.decode().split())
    assert escape(f"Which grader wins cannot run yet: {FALLBACK}.") in text
    assert escape(WHICH_WINS.hint) in text
    which_wins_import(project, tmp_path, selection=1, train=0)
    three_candidate_search(project, fake_judge)
    text = client.get(queue).content.decode()
    assert 'id="strategy-fallback"' not in text
    assert "Pairs are served by <strong>Which grader wins</strong>" in text


def test_the_panel_reads_a_fixed_number_of_queries_whatever_the_labels(
    search: SearchRun, admin_user: User
) -> None:
    client = logged_in(admin_user)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(page(search.project, search)).status_code == 200
        return len(captured)

    first = queries()  # reads the grades, and caches them
    before = queries()
    assert before == first - 1
    for task in ("s0", "s1", "s2"):
        expert_prefers(search.project, task, "good", "okay")
        expert_prefers(search.project, task, "okay", "poor")
    assert queries() == before
