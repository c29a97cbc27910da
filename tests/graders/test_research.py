"""Re-search (graders/research.py): a search on the current labels warm-started from the
grader in use, run end to end against the scripted fake judge (tests/graders/conftest.py: only
programs that verify against the documents get the quality right)."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError
from django.template.loader import render_to_string
from django.test import Client, RequestFactory
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.engine.proposer import BLOCKS_BY_NAME
from graders.models import Candidate, JudgeEndpoint, Metagrader, SearchRun
from graders.research import (
    NO_SEARCH_NOTE,
    ResearchInvalid,
    research_comparison,
    research_maybe_start,
    research_start,
)
from graders.search import search_run_execute, search_start
from graders.search_proposals import WARM_START_LINEAGE
from graders.services import metagrader_register
from labeling.imports import jsonl_import
from labeling.models import Job, JobStatus, Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.conftest import verifying_responder
from tests.graders.test_search import tolerant_accuracy, verifies_with_documents
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def weak_grader(project: Project) -> Metagrader:
    """The baseline with one more sentence: it grades like the baseline (0.5 everywhere, so
    every pair is a tie within tolerance) but is another program."""
    program = baseline_program("scalar").to_json() | {"name": "hand-written"}
    program["steps"][0]["prompt"] += "\nBe strict."
    return metagrader_register(project=project, program=program, origin="import")


def run_to_end(search: SearchRun) -> SearchRun:
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search.refresh_from_db()
    return search


def more_labels(project: Project, tmp_path: Path) -> None:
    """A new D_selection task with expert scores: the label snapshot moves on."""
    records: list[dict[str, Any]] = [
        {"type": "task", "id": "s9", "prompt": "Summarise the risk in deal s9.", "split": "selection",
         "domain": "legal", "documents": [{"id": "spa", "title": "SPA",
                                           "text": "Clause 4: the seller's liability is capped."}]},
    ]  # fmt: skip
    for word, truth in (("GOOD", 0.9), ("POOR", 0.2)):
        records.append({"type": "response", "id": f"s9/{word}", "task": "s9", "content": f"{word} answer for s9"})  # fmt: skip
        records.append({"type": "score", "response": f"s9/{word}", "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "more.jsonl", records))


def test_a_re_search_copies_the_won_search_and_puts_the_old_program_in_round_0(
    search_project: Project, search_judge: JudgeEndpoint, tmp_path: Path
) -> None:
    first = run_to_end(
        search_start(
            project=search_project,
            kind="scalar",
            mode="best_of_n",
            endpoint=search_judge,
            n=5,
            seed=3,
            selection_rule="argmax",
        )
    )
    old = first.winner.metagrader
    assert verifies_with_documents(old.program)  # not the baseline: a program of its own
    more_labels(search_project, tmp_path)

    search = research_start(project=search_project, grader=old, max_calls=5000)

    assert (search.mode, search.n, search.iterations, search.k, search.seed) == (
        "best_of_n", 5, 0, 3, 3,
    )  # fmt: skip
    assert (search.endpoint, search.proposer, search.selection_rule) == (
        search_judge,
        None,
        "argmax",
    )
    assert search.warm_start == old and search.warm_start_note == "" and search.max_calls == 5000
    # The current snapshot: one more task's two expert scores than the first search saw.
    assert search.snapshot.counts["scores"] == first.snapshot.counts["scores"] + 2
    search = run_to_end(search)
    round_0 = list(
        Candidate.objects.filter(search=search, iteration=0).select_related("metagrader")
    )
    # The baseline, the old grader itself (the same row, so its exact program), and n - 1 = 4
    # proposals bred from it: mutations of it, each a program new to the project naming it as
    # its parent.
    assert [c.lineage for c in round_0[:2]] == ["the baseline", WARM_START_LINEAGE]
    assert round_0[1].metagrader == old and round_0[1].metagrader.program == old.program
    bred = round_0[2:]
    assert len(bred) == 4
    assert all(c.lineage.startswith(f"{old.name} + ") for c in bred)
    earlier = set(Candidate.objects.filter(search=first).values_list("metagrader", flat=True))
    assert all(c.metagrader.parent == old for c in bred if c.metagrader_id not in earlier)
    # No proposal beats it, so the old grader wins again, on the new labels: 2.5 of 3 pairs on
    # each first three tasks (OKAY and POOR within tolerance) and 1 of 1 on the new task's,
    # (3 * 2.5 + 1) / 10 = 0.85, where the first search measured 2.5 / 3.
    assert search.winner.metagrader == old
    comparison = research_comparison(search)
    assert comparison is not None and comparison.same and not comparison.better
    assert comparison.old.value == pytest.approx(0.85) == comparison.new.value
    assert first.winner.score == pytest.approx(2.5 / 3)


def test_the_winner_is_compared_with_the_old_grader_and_the_page_shows_it(
    search_project: Project, search_judge: JudgeEndpoint, admin_user: User
) -> None:
    old = weak_grader(search_project)
    search = research_start(project=search_project, grader=old)
    # No search behind a hand-written grader: the defaults, said so.
    assert (search.mode, search.n, search.endpoint) == ("best_of_n", 4, search_judge)
    assert search.warm_start_note == NO_SEARCH_NOTE
    search = run_to_end(search)
    warm = Candidate.objects.get(search=search, metagrader=old)
    winner = search.winner
    assert verifies_with_documents(winner.metagrader.program)

    comparison = research_comparison(search)

    assert comparison is not None
    # The old grader says 0.5 to everything: each of the 3 tasks' 3 true-ordered pairs is a tie
    # within tolerance, 0.5 credit each, so 4.5 / 9 = 0.5. The winner verifies: GOOD 0.9 leads
    # OKAY 0.5 and POOR 0.45 (credit 1 each), OKAY leads POOR by 0.05 <= 0.1 (credit 0.5):
    # 2.5 per task, 7.5 / 9 = 2.5 / 3.
    assert comparison.old.value == pytest.approx(0.5) == tolerant_accuracy(warm.selection_run)
    assert comparison.new.value == pytest.approx(2.5 / 3)
    assert comparison.new.value == pytest.approx(tolerant_accuracy(winner.selection_run))
    assert (comparison.old.name, comparison.new.name) == (old.name, winner.metagrader.name)
    assert comparison.better and not comparison.same
    # Every task gives the old grader 0.5, so its interval is [0.5, 0.5]; the winner's is
    # 2.5 / 3 on every task too: the intervals cannot overlap.
    assert comparison.old.ci == pytest.approx((0.5, 0.5))
    assert comparison.separated

    client = Client()
    client.force_login(admin_user)
    html = client.get(reverse("search", args=[search_project.slug, search.pk])).content.decode()
    assert "New against the current grader" in html and "hand-written" in html
    assert "0.833" in html and "0.500" in html
    assert "better, by more than the intervals" in html
    assert "A re-search warm-started from" in html and "no search behind it" in html


def test_a_grader_that_grades_as_the_baseline_takes_the_baseline_slot(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    renamed = baseline_program("scalar").to_json() | {"name": "the baseline, renamed"}
    old = metagrader_register(project=search_project, program=renamed, origin="import")
    search = run_to_end(research_start(project=search_project, grader=old))
    round_0 = list(
        Candidate.objects.filter(search=search, iteration=0).select_related("metagrader")
    )
    # A search grades each program once: the old one stands in the baseline's slot, and the
    # other n - 1 = 3 slots are proposals.
    assert round_0[0].metagrader == old and round_0[0].lineage.startswith(WARM_START_LINEAGE)
    assert len(round_0) == 4
    assert research_comparison(search) is not None


def test_the_policy_needs_a_budget_starts_once_and_refuses_a_second_while_one_runs(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    old = weak_grader(search_project)
    assert research_maybe_start(search_project, old) is None  # the policy is off by default
    search_project.research_auto = True
    search_project.save()
    with pytest.raises(ResearchInvalid, match="needs a budget"):
        research_maybe_start(search_project, old)
    assert not SearchRun.objects.exists()

    search_project.research_max_calls, search_project.research_max_cost = 300, 0.5
    search_project.save()
    first = research_maybe_start(search_project, old)
    assert first is not None and first.warm_start == old
    assert (first.max_calls, first.max_cost, first.job.created_by) == (300, 0.5, None)
    assert research_maybe_start(search_project, old) is None  # the first is still queued
    Job.objects.filter(pk=first.job_id).update(status=JobStatus.RUNNING)
    assert research_maybe_start(search_project, old) is None
    assert SearchRun.objects.count() == 1

    Job.objects.filter(pk=first.job_id).update(status=JobStatus.SUCCEEDED)
    second = research_maybe_start(search_project, old)
    assert second is not None and second.pk != first.pk


def test_only_managers_start_a_re_search_from_the_button(
    search_project: Project,
    search_judge: JudgeEndpoint,
    admin_user: User,
    reviewer_user: User,
    expert_user: User,
    outsider: User,
) -> None:
    old = weak_grader(search_project)
    action = reverse("grader-research", args=[search_project.slug, old.pk])
    for user, status in ((reviewer_user, 403), (expert_user, 403), (outsider, 404)):
        client = Client()
        client.force_login(user)
        assert client.post(action).status_code == status
    assert not SearchRun.objects.exists()

    client = Client()
    client.force_login(admin_user)
    assert client.get(action).status_code == 405
    response = client.post(action, follow=True)
    search = SearchRun.objects.get()
    assert search.warm_start == old and search.job.created_by == admin_user
    assert response.redirect_chain[-1][0] == reverse(
        "search", args=[search_project.slug, search.pk]
    )
    assert "Re-search started on the current labels" in response.content.decode()


def test_a_model_proposer_is_shown_the_old_grader_as_the_one_to_beat(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    baseline = baseline_program("scalar").to_json()
    verifying = BLOCKS_BY_NAME["add_verify_step"].apply(baseline) | {"name": "verifier"}
    rescoring = BLOCKS_BY_NAME["add_fresh_rescore"].apply(verifying) | {"name": "rescorer"}
    plain = BLOCKS_BY_NAME["add_fresh_rescore"].apply(baseline) | {"name": "plain"}

    def responder(body: dict[str, Any]) -> str:
        if "response_format" in body:  # a grading call
            return verifying_responder(body)
        shown_old = "The grader in use" in body["messages"][-1]["content"]
        return json.dumps({"programs": [rescoring] if shown_old else [verifying, plain]})

    fake_judge.responder = responder
    proposer = JudgeEndpoint.objects.create(
        project=search_project, name="strong", base_url=fake_judge.base_url, model="strong-model"
    )
    first = run_to_end(
        search_start(
            project=search_project,
            kind="scalar",
            mode="best_of_n",
            endpoint=search_judge,
            proposer=proposer,
            n=2,
        )
    )
    old = first.winner.metagrader
    assert old.name == "verifier"

    search = run_to_end(research_start(project=search_project, grader=old))

    assert search.proposer == proposer and search.n == 2
    calls = [r.body for r in fake_judge.requests if "response_format" not in r.body]
    assert len(calls) == 2
    # The re-search's proposer prompt carries the old program as a prior candidate; the first
    # search's, with no prior candidates in round 0, did not.
    prompt = calls[1]["messages"][-1]["content"]
    assert "The grader in use" in prompt and '"verifier"' in prompt
    assert "The grader in use" not in calls[0]["messages"][-1]["content"]
    round_0 = list(
        Candidate.objects.filter(search=search, iteration=0).select_related("metagrader")
    )
    # n = 2: the baseline, the old grader and n - 1 = 1 proposal, the one written after
    # seeing it.
    assert [c.metagrader.name for c in round_0] == [
        round_0[0].metagrader.name,
        "verifier",
        "rescorer",
    ]
    assert round_0[1].metagrader == old


def test_the_drift_button_posts_to_the_view_with_csrf_for_managers_only(
    search_project: Project, admin_user: User, rf: RequestFactory
) -> None:
    old = weak_grader(search_project)
    request = rf.get("/")
    request.user = admin_user
    context = {"project": search_project, "grader": old}
    html = render_to_string(
        "graders/_drift_research.html", context | {"can_manage": True}, request=request
    )
    action = reverse("grader-research", args=[search_project.slug, old.pk])
    assert f'method="post" action="{action}"' in html and "csrfmiddlewaretoken" in html
    assert render_to_string("graders/_drift_research.html", context, request=request).strip() == ""


def test_a_re_search_that_cannot_start_says_why(search_project: Project, admin_user: User) -> None:
    old = weak_grader(search_project)
    client = Client()
    client.force_login(admin_user)
    action = reverse("grader-research", args=[search_project.slug, old.pk])
    response = client.post(action, follow=True)
    assert response.redirect_chain[-1][0] == reverse("program", args=[search_project.slug, old.pk])
    assert "the project has no judge endpoint" in response.content.decode()
    with pytest.raises(ResearchInvalid, match="must belong to this project"):
        research_start(project=Project.objects.create(slug="other", name="Other"), grader=old)
    assert not SearchRun.objects.exists()


def test_a_negative_policy_budget_is_refused_by_the_database(search_project: Project) -> None:
    search_project.research_max_cost = -1.0
    with pytest.raises(IntegrityError, match="project_research_max_cost"):
        search_project.save()
