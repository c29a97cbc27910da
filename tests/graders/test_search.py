"""Metagrader search end to end: the structured proposer, real grading over real HTTP to the
scripted fake judge, selection on D_selection, the winner on D_eval, resume and budget.

The fake judge is built so that the right programs win: a score step that re-checks an earlier
score against the task's documents (a `verify` step that can see them) gets the quality right;
every other score step says 0.5 whatever it reads. Accuracies are recomputed here from the
stored rewards with a direct reading of DESIGN.md section 7, not with the engine's metrics."""

import json
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from graders.models import (
    Candidate,
    CandidateStatus,
    Grade,
    GradingRun,
    JudgeEndpoint,
    SearchRun,
)
from graders.search import SearchInvalid, search_resume, search_run_execute, search_start
from labeling.imports import jsonl_import
from labeling.jobs import job_cancel
from labeling.models import Job, JobStatus, Project, Score
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def pair_credits(run: GradingRun, tol: float = 0.1) -> dict[int, list[float]]:
    """DESIGN.md section 7, read directly, per task: over same-task pairs of responses with
    different true scores, 1 if the better one's reward leads by more than tol, 0.5 within
    tol, else 0."""
    rows = Grade.objects.filter(run=run).values_list("response_id", "response__task_id", "reward")
    truth = dict(
        Score.objects.filter(response_id__in=[r for r, _, _ in rows]).values_list(
            "response_id", "value"
        )
    )
    credits: dict[int, list[float]] = defaultdict(list)
    for (a, task_a, reward_a), (b, task_b, reward_b) in combinations(rows, 2):
        if task_a != task_b or a not in truth or b not in truth or truth[a] == truth[b]:
            continue
        (_, better), (_, worse) = sorted([(truth[a], reward_a), (truth[b], reward_b)])[::-1]
        lead = better - worse
        credits[task_a].append(1.0 if lead > tol else 0.5 if abs(lead) <= tol else 0.0)
    return credits


def tolerant_accuracy(run: GradingRun, tol: float = 0.1) -> float:
    credits = [credit for task in pair_credits(run, tol).values() for credit in task]
    return sum(credits) / len(credits)


def verifies_with_documents(program: dict[str, Any]) -> bool:
    steps = {step["id"]: step for step in program["steps"]}
    return "verify" in steps and "{documents}" in steps["verify"]["prompt"]


def finished(search: SearchRun) -> SearchRun:
    search.refresh_from_db()
    search.job.refresh_from_db()
    return search


def test_best_of_n_selects_a_program_that_verifies_against_the_documents(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    # The plain argmax (graders/engine/selection.py): the winner is the best on D_selection.
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="best_of_n",
        endpoint=search_judge,
        n=8,
        seed=3,
        selection_rule="argmax",
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search = finished(search)
    candidates = list(Candidate.objects.filter(search=search).select_related("metagrader"))
    assert len(candidates) == 9 and candidates[0].lineage == "the baseline"
    assert all(c.status == CandidateStatus.GRADED for c in candidates)
    # Selection matters here: some candidates verify with the documents and some do not.
    assert {verifies_with_documents(c.metagrader.program) for c in candidates} == {True, False}
    for candidate in candidates:
        assert candidate.score == pytest.approx(tolerant_accuracy(candidate.selection_run))
    assert candidates[0].score == pytest.approx(0.5)  # the baseline: all ties within tolerance
    winner = search.winner
    assert winner is not None and verifies_with_documents(winner.metagrader.program)
    assert winner.score == pytest.approx(2.5 / 3)
    assert winner.score == max(c.score for c in candidates)
    # Reported on D_eval, which the search never selected on, per domain with tax held out.
    evaluation = winner.eval_run.evaluation
    assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(
        tolerant_accuracy(winner.eval_run)
    )
    assert evaluation["tolerant_ranking_accuracy"]["value"] == pytest.approx(2.5 / 3)
    by_domain = {row["domain"]: row for row in evaluation["by_domain"]}
    assert by_domain["tax"]["held_out"] and not by_domain["legal"]["held_out"]
    # One task per domain: a task bootstrap cannot give an interval, and says so.
    assert by_domain["tax"]["tasks"] == 1 and by_domain["tax"]["ranking_accuracy"]["ci"] is None
    assert evaluation["ranking_accuracy"]["ci"] is not None  # the whole of D_eval has more
    assert search.curve == [
        {
            "iteration": 0,
            "candidate": winner.pk,
            "name": winner.metagrader.name,
            "selection": pytest.approx(2.5 / 3),
            "selection_ci": winner.selection_run.evaluation["tolerant_ranking_accuracy"]["ci"],
            "eval": pytest.approx(2.5 / 3),
            "eval_ci": evaluation["tolerant_ranking_accuracy"]["ci"],
            "candidates": 9,
        }
    ]
    assert search.job.status == JobStatus.SUCCEEDED and search.job.done == search.job.total
    assert search.snapshot is not None and search.snapshot.counts["scores"] == 18


def test_evolutionary_search_climbs_to_a_verifying_program_and_records_its_curve(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="evolutionary",
        endpoint=search_judge,
        n=1,
        iterations=4,
        k=2,
        seed=0,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search = finished(search)
    rounds = Candidate.objects.filter(search=search).values_list("iteration", flat=True)
    assert sorted(set(rounds)) == [0, 1, 2, 3, 4]
    assert [point["iteration"] for point in search.curve] == [0, 1, 2, 3, 4]
    selection = [point["selection"] for point in search.curve]
    assert selection == sorted(selection)  # the best so far never gets worse on D_selection
    assert verifies_with_documents(search.winner.metagrader.program)
    assert search.curve[-1]["selection"] == pytest.approx(2.5 / 3)
    assert search.curve[-1]["candidate"] == search.winner.pk
    # Later rounds breed from earlier candidates: their programs have parents in the search.
    later = Candidate.objects.filter(search=search, iteration__gt=0).select_related("metagrader")
    assert all(c.metagrader.parent_id is not None for c in later)
    for point in search.curve:
        candidate = Candidate.objects.get(pk=point["candidate"])
        assert point["eval"] == pytest.approx(tolerant_accuracy(candidate.eval_run))


def test_a_rerun_of_the_same_search_is_answered_from_the_cache(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    first = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=3, seed=1
    )
    search_run_execute(search_id=first.pk)
    calls = fake_judge.call_count
    again = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=3, seed=1
    )
    search_run_execute(search_id=again.pk)
    assert fake_judge.call_count == calls
    again = finished(again)
    assert again.winner.metagrader_id == finished(first).winner.metagrader_id
    runs = GradingRun.objects.filter(search=again)
    assert sum(run.usage.get("calls", 0) for run in runs) == 0
    assert sum(run.usage.get("cache_hits", 0) for run in runs) > 0


def test_the_search_page_shows_one_count_of_the_judge_calls_made(
    search_project: Project,
    search_judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
    admin_user: Any,
) -> None:
    """The page's judge calls are the requests the judge received, once, under one name; the
    stage line carries no second counter of its own."""
    from django.test import Client
    from django.urls import reverse

    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=2, seed=1
    )
    search_run_execute(search_id=search.pk)
    client = Client()
    client.force_login(admin_user)
    page = client.get(reverse("search", args=["acme", search.pk])).content.decode()
    assert fake_judge.call_count > 0
    assert f"Judge calls {fake_judge.call_count} and cache hits " in page
    assert "proposer calls 0" in page and "answer" not in finished(search).job.stage
    rerun = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=2, seed=1
    )
    search_run_execute(search_id=rerun.pk)
    page = client.get(reverse("search", args=["acme", rerun.pk])).content.decode()
    assert "Judge calls 0 and cache hits " in page  # all answered from the cache


def test_a_spent_budget_stops_the_search_and_resume_finishes_it_without_repeating_calls(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="best_of_n",
        endpoint=search_judge,
        n=3,
        seed=1,
        max_calls=12,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "budget"
    search = finished(search)
    assert search.job.status == JobStatus.BUDGET_SPENT and "budget" in search.job.error
    assert fake_judge.call_count <= 12
    bodies = [json.dumps(r.body, sort_keys=True) for r in fake_judge.requests]
    search_resume(search=search, max_calls=10_000)
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search = finished(search)
    assert search.winner is not None
    everything = [json.dumps(r.body, sort_keys=True) for r in fake_judge.requests]
    assert len(everything) == len(set(everything))  # no answer was asked for twice
    assert set(bodies) <= set(everything)


def test_cancel_stops_a_search_and_keeps_what_it_graded(
    search_project: Project, search_judge: JudgeEndpoint
) -> None:
    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=2
    )
    job_cancel(job=search.job)  # a queued job stops at once
    assert search_run_execute(search_id=search.pk)["skipped"]
    assert finished(search).job.status == JobStatus.CANCELLED
    search_resume(search=search)
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"


def test_a_second_delivery_while_the_lease_is_fresh_comes_back_later(
    search_project: Project, search_judge: JudgeEndpoint, settings: Any
) -> None:
    from django.utils import timezone

    search = search_start(
        project=search_project, kind="scalar", mode="best_of_n", endpoint=search_judge, n=1
    )
    Job.objects.filter(pk=search.job_id).update(
        status=JobStatus.RUNNING, owner="another-worker", heartbeat_at=timezone.now()
    )
    assert search_run_execute(search_id=search.pk)["status"] == "busy"
    assert not Candidate.objects.filter(search=search).exists()
    # Once the other worker stops beating, the lease is stale and this delivery takes over.
    stale = timezone.now() - timezone.timedelta(seconds=settings.JOB_LEASE_SECONDS + 1)
    Job.objects.filter(pk=search.job_id).update(heartbeat_at=stale)
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"


def test_a_search_is_refused_without_expert_labels_on_d_selection(
    project: Project, tmp_path: Path, fake_judge: FakeJudgeServer
) -> None:
    jsonl_import(
        project=project,
        path=write_jsonl(
            tmp_path / "bare.jsonl",
            [
                {"type": "task", "id": "t", "prompt": "p", "split": "selection"},
                {"type": "response", "id": "t/a", "task": "t", "content": "a"},
            ],
        ),
    )
    endpoint = JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=fake_judge.base_url, model="m"
    )
    with pytest.raises(SearchInvalid, match="no expert scores or overall human preferences"):
        search_start(project=project, kind="scalar", mode="best_of_n", endpoint=endpoint, n=2)
    with pytest.raises(SearchInvalid, match="at least one iteration"):
        search_start(project=project, kind="scalar", mode="evolutionary", endpoint=endpoint, n=2)
    assert not SearchRun.objects.exists() and not Job.objects.exists()


def test_a_model_proposer_writes_candidates_and_fixes_an_invalid_one_once(
    search_project: Project, search_judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    from graders.engine.baseline import baseline_program
    from graders.engine.proposer import BLOCKS_BY_NAME
    from tests.graders.conftest import verifying_responder

    baseline = baseline_program("scalar").to_json()
    verifying = BLOCKS_BY_NAME["add_verify_step"].apply(baseline) | {"name": "verifier"}
    broken = baseline | {"name": "broken", "reward": "nowhere.score"}
    fixed = BLOCKS_BY_NAME["add_fresh_rescore"].apply(baseline) | {"name": "rescorer"}

    def responder(body: dict[str, Any]) -> str:
        if "response_format" in body:  # a grading call
            return verifying_responder(body)
        if body["messages"][-1]["role"] == "user" and len(body["messages"]) > 2:  # the repair
            return json.dumps({"programs": [fixed]})
        return "Here they are:\n" + json.dumps({"programs": [verifying, broken]})

    fake_judge.responder = responder
    proposer = JudgeEndpoint.objects.create(
        project=search_project, name="strong", base_url=fake_judge.base_url, model="strong-model"
    )
    search = search_start(
        project=search_project,
        kind="scalar",
        mode="best_of_n",
        endpoint=search_judge,
        proposer=proposer,
        n=2,
    )
    assert search_run_execute(search_id=search.pk)["status"] == "succeeded"
    search = finished(search)
    first, repaired = Candidate.objects.filter(search=search, iteration=0, position__gt=0)
    assert first.metagrader.name == "verifier" and first.errors == []
    assert "Here they are" in first.raw and "D_eval" not in first.prompt
    assert repaired.metagrader.name == "rescorer" and "after one correction" in repaired.lineage
    assert any("nowhere" in error for error in repaired.errors)
    proposer_calls = [r for r in fake_judge.requests if "response_format" not in r.body]
    assert len(proposer_calls) == 2
    repair_message = proposer_calls[1].body["messages"][-1]["content"]
    assert all(error in repair_message for error in repaired.errors)
    # The D_meta material reached the proposer; D_selection's and D_eval's tasks did not,
    # except through the selection results of earlier rounds (there are none in round 0).
    prompt = proposer_calls[0].body["messages"][-1]["content"]
    assert "deal m0" in prompt and "deal s0" not in prompt and "deal e0" not in prompt
    assert search.winner.pk == first.pk
    assert search.usage["calls"] == 2  # the proposer's spending is the search's own
