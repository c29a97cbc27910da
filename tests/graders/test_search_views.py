"""The search pages: starting a search, following it, its leaderboard, curve and winner, and
promoting and evaluating candidates. Searches and their runs are built as rows, as a finished
worker would leave them; starting one only enqueues it."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import (
    Candidate,
    GraderSelection,
    GradingRun,
    JudgeEndpoint,
    Metagrader,
    SearchRun,
)
from graders.program_diff import program_diff, reward_text
from graders.services import metagrader_register
from labeling.imports import jsonl_import
from labeling.jobs import job_create
from labeling.models import Job, JobStatus, Project, Task
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def split_project(project: Project, tmp_path: Path) -> Project:
    """Two D_selection tasks and two D_eval tasks (one in a domain the search never sees),
    each with three responses scored by the true grader."""
    records: list[dict[str, Any]] = []
    for name, split, domain in (
        ("s0", "selection", "legal"),
        ("s1", "selection", "legal"),
        ("e0", "eval", "legal"),
        ("e1", "eval", "tax"),
    ):
        records.append({"type": "task", "id": name, "prompt": f"Task {name}", "split": split, "domain": domain})  # fmt: skip
        for r, truth in enumerate((0.9, 0.5, 0.2)):
            records.append({"type": "response", "id": f"{name}/r{r}", "task": name, "content": "x"})  # fmt: skip
            records.append({"type": "score", "response": f"{name}/r{r}", "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))
    return project


@pytest.fixture
def judge(split_project: Project) -> JudgeEndpoint:
    return JudgeEndpoint.objects.create(
        project=split_project,
        name="judge",
        base_url="http://127.0.0.1:9/v1",
        model="judge-model",
        is_default=True,
    )


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def grader(
    project: Project, name: str, extra: str = "", parent: Metagrader | None = None
) -> Metagrader:
    program = baseline_program("scalar").to_json() | {"name": name}
    program["steps"][0]["prompt"] += extra
    return metagrader_register(project=project, program=program, origin="search", parent=parent)


def metric(value: float) -> dict[str, Any]:
    return {"value": value, "ci": [round(value - 0.1, 3), round(value + 0.05, 3)]}


def evaluation(value: float, **extra: Any) -> dict[str, Any]:
    return {
        "reference": "true_grader",
        "pairs": 6,
        "tasks": 2,
        "graded": 6,
        "failed": 0,
        "tolerance": 0.1,
        "tolerant_ranking_accuracy": metric(value),
        "ranking_accuracy": metric(value - 0.05),
        "within_task_spearman": metric(value - 0.1),
    } | extra


def graded_run(
    search: SearchRun, metagrader: Metagrader, split: str, value: float, **extra: Any
) -> GradingRun:
    job = job_create(kind="grading", project=search.project)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    return GradingRun.objects.create(
        project=search.project,
        metagrader=metagrader,
        endpoint=search.endpoint,
        split=split,
        job=job,
        search=search,
        evaluation=evaluation(value, **extra),
    )


def candidate(
    search: SearchRun,
    position: int,
    name: str | None,
    score: float | None,
    calls: float = 1.0,
    **fields: Any,
) -> Candidate:
    metagrader = grader(search.project, name, extra=f"\n{name}") if name else None
    made = Candidate.objects.create(
        search=search,
        metagrader=metagrader,
        iteration=fields.pop("iteration", 0),
        position=position,
        status=fields.pop("status", "graded" if score is not None else "proposed"),
        score=score,
        calls_per_response=calls if score is not None else None,
        lineage=fields.pop("lineage", "mutation of the baseline"),
        **fields,
    )
    if metagrader is not None and score is not None:
        made.selection_run = graded_run(search, metagrader, "selection", score)
        made.save(update_fields=["selection_run"])
    return made


@pytest.fixture
def search(judge: JudgeEndpoint, admin_user: User) -> SearchRun:
    """A finished best-of-N search: the cheaper of two 0.8 candidates wins, the baseline is
    third, one candidate was never graded and one LLM proposal was rejected."""
    job = job_create(kind="search", project=judge.project, user=admin_user)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, done=24, total=24)
    made = SearchRun.objects.create(
        project=judge.project, job=job, kind="scalar", mode="best_of_n", endpoint=judge, n=4,
        usage={"calls": 3, "cost": 0.5},
    )  # fmt: skip
    candidate(made, 0, "base-line", 0.6, lineage="the baseline")
    candidate(made, 1, "pricey", 0.8, calls=2.0)
    cheap = candidate(made, 2, "cheap", 0.8, calls=1.0)
    candidate(made, 3, "ungraded", None)
    candidate(made, 4, None, None, status="rejected", rejected="the reward names no step",
              errors=["reward: 'x.score' is not an output"], prompt="PROPOSER PROMPT", raw=HOSTILE)  # fmt: skip
    by_domain = [
        {"domain": "legal", "held_out": False, "pairs": 3, "tasks": 1, "ranking_accuracy": metric(0.7),
         "tolerant_ranking_accuracy": metric(0.75), "within_task_spearman": metric(0.6)},
        {"domain": "tax", "held_out": True, "pairs": 3, "tasks": 1, "ranking_accuracy": metric(0.5),
         "tolerant_ranking_accuracy": metric(0.55), "within_task_spearman": metric(0.4)},
    ]  # fmt: skip
    cheap.eval_run = graded_run(made, cheap.metagrader, "eval", 0.65, by_domain=by_domain)  # type: ignore[arg-type]
    cheap.save(update_fields=["eval_run"])
    made.winner = cheap
    made.curve = [
        {"iteration": 0, "candidate": cheap.pk, "name": HOSTILE, "selection": 0.8,
         "selection_ci": [0.7, 0.85], "eval": 0.65, "eval_ci": [0.55, 0.7], "candidates": 3},
    ]  # fmt: skip
    made.save(update_fields=["winner", "curve"])
    return made


def url(name: str, *args: Any) -> str:
    return reverse(name, args=["acme", *args])


def test_who_may_see_and_act(
    search: SearchRun, admin_user: User, reviewer_user: User, expert_user: User, outsider: User
) -> None:
    cheap = Candidate.objects.get(metagrader__name="cheap")
    pages = [
        url("searches"),
        url("search", search.pk),
        url("search-candidate", search.pk, cheap.pk),
    ]
    actions = [
        url("search-cancel", search.pk),
        url("search-resume", search.pk),
        url("candidate-evaluate", search.pk, cheap.pk),
        url("candidate-promote", search.pk, cheap.pk),
        url("program-promote", cheap.metagrader_id),
    ]
    expert, reviewer, stranger = (
        logged_in(expert_user),
        logged_in(reviewer_user),
        logged_in(outsider),
    )
    for page in pages:
        assert expert.get(page).status_code == 403
        assert stranger.get(page).status_code == 404
        assert reviewer.get(page).status_code == 200
    for action in actions:
        assert reviewer.post(action).status_code == 403
        assert stranger.post(action).status_code == 404
    assert reviewer.post(url("searches"), {"kind": "scalar"}).status_code == 403
    html = reviewer.get(url("search", search.pk)).content.decode()
    assert "Promote" not in html and "Evaluate on D_eval" not in html
    assert "Start search" not in reviewer.get(url("searches")).content.decode()
    assert GraderSelection.objects.count() == 0
    nav = reviewer.get(url("graders")).content.decode()
    assert f'href="{url("searches")}"' in nav
    assert f'href="{url("searches")}"' not in expert.get(url("task-list")).content.decode()


def start_form(judge: JudgeEndpoint, **changes: Any) -> dict[str, Any]:
    return {"kind": "scalar", "mode": "best_of_n", "endpoint": judge.pk, "proposer": "", "n": 3,
            "iterations": 0, "k": 3, "seed": 7, "max_calls": 500, "max_cost": ""} | changes  # fmt: skip


def test_starting_a_search_enqueues_it_on_commit(
    judge: JudgeEndpoint, admin_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    admin = logged_in(admin_user)
    page = admin.get(url("searches")).content.decode()
    assert "Structured proposer (no model)" in page and "Not ready to search" not in page
    assert f'<option value="{judge.pk}" selected>' in page  # the default judge
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(url("searches"), start_form(judge, mode="evolutionary", iterations=2))
    search = SearchRun.objects.get()
    assert response.status_code == 302 and response["Location"] == url("search", search.pk)
    assert len(callbacks) == 1
    assert (search.kind, search.mode, search.n, search.iterations, search.k, search.seed) == (
        "scalar", "evolutionary", 3, 2, 3, 7,
    )  # fmt: skip
    assert search.max_calls == 500 and search.proposer is None and search.endpoint == judge
    assert search.job.created_by == admin_user and search.job.status == JobStatus.QUEUED
    listing = admin.get(url("searches")).content.decode()
    assert f'href="{url("search", search.pk)}"' in listing and "Queued" in listing


def test_invalid_settings_are_shown_in_place(
    judge: JudgeEndpoint, admin_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    admin = logged_in(admin_user)
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(url("searches"), start_form(judge, mode="evolutionary"))
        bad_n = admin.post(url("searches"), start_form(judge, n=0))
    assert response.status_code == 400
    assert "an evolutionary search needs at least one iteration" in response.content.decode()
    assert bad_n.status_code == 400 and "greater than or equal to 1" in bad_n.content.decode()
    assert SearchRun.objects.count() == 0 and callbacks == []


@pytest.mark.parametrize("field", ["seed", "max_calls", "n", "k", "iterations"])
def test_a_number_too_large_to_store_is_a_field_error(
    judge: JudgeEndpoint, admin_user: User, field: str
) -> None:
    huge = "9" * 30
    response = logged_in(admin_user).post(url("searches"), start_form(judge, **{field: huge}))
    assert response.status_code == 400
    assert "Ensure this value is less than or equal to" in response.content.decode()
    assert SearchRun.objects.count() == 0


def test_a_project_without_labeled_selection_tasks_says_what_to_do(
    judge: JudgeEndpoint, admin_user: User
) -> None:
    Task.objects.filter(split="selection").update(split="eval")
    admin = logged_in(admin_user)
    page = admin.get(url("searches")).content.decode()
    assert "Not ready to search: D_selection has no tasks with responses" in page
    assert "No searches yet." in page
    response = admin.post(url("searches"), start_form(judge))
    assert response.status_code == 400 and "assign splits first" in response.content.decode()


def names_in_order(html: str, names: list[str]) -> list[str]:
    """`names` sorted by where each first appears as a link text in the leaderboard."""
    board = html[html.index("<h2>Leaderboard</h2>") :]
    return sorted(names, key=lambda name: board.index(f">{name}</a>"))


def test_leaderboard_follows_the_ranking_then_lists_the_unranked(
    search: SearchRun, reviewer_user: User
) -> None:
    html = logged_in(reviewer_user).get(url("search", search.pk)).content.decode()
    # 0.8 ties go to the cheaper program; then the baseline; then the ungraded.
    assert names_in_order(html, ["pricey", "cheap", "base-line", "ungraded"]) == [
        "cheap", "pricey", "base-line", "ungraded",
    ]  # fmt: skip
    assert "0.800 <small>[0.700, 0.850]</small>" in html  # selection accuracy with its CI
    assert "the reward names no step" in html and "no valid program" in html
    cheap = Candidate.objects.get(metagrader__name="cheap")
    assert f'href="{url("grading-run", cheap.selection_run_id)}"' in html
    assert f'href="{url("grading-run", cheap.eval_run_id)}"' in html
    assert "<script>alert(1)" not in html


def test_winner_report_shows_both_splits_and_the_domains(
    search: SearchRun, reviewer_user: User
) -> None:
    html = logged_in(reviewer_user).get(url("search", search.pk)).content.decode()
    report = html[html.index("Winner:") : html.index("Search curve")]
    assert ">cheap</a>" in report
    assert "0.800 <small>[0.700, 0.850]</small>" in report  # tolerant, D_selection
    assert "0.650 <small>[0.550, 0.700]</small>" in report  # tolerant, D_eval
    assert "Within-task Spearman" in report and "Harm-aware" not in report  # none reported
    tax = report[report.index("<td>tax") :]
    assert tax.index("held out") < tax.index("</tr>") and "0.550" in tax
    legal = report[report.index("<td>legal") :]
    assert "held out" not in legal[: legal.index("</tr>")]
    assert 'A held-out domain has no task in <abbr class="term" title="D_meta">' in report

    run = search.winner.eval_run  # type: ignore[union-attr]
    for row in run.evaluation["by_domain"]:
        row["held_out"] = False
        row["ranking_accuracy"]["ci"] = None
    run.save(update_fields=["evaluation"])
    html = logged_in(reviewer_user).get(url("search", search.pk)).content.decode()
    report = html[html.index("Winner:") : html.index("Search curve")]
    assert "A held-out domain" not in report  # nothing to explain
    assert "0.700 <small" in report and "(one task: no interval)</small>" in report


def test_the_curve_is_drawn_with_one_point_per_round_and_a_text_table(
    search: SearchRun, reviewer_user: User
) -> None:
    SearchRun.objects.filter(pk=search.pk).update(
        curve=[
            search.curve[0] | {"selection": 0.80, "eval": 0.78},
            search.curve[0] | {"iteration": 1, "selection": 0.90, "eval": 0.79},
        ]
    )
    html = logged_in(reviewer_user).get(url("search", search.pk)).content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count('class="point selection"') == 2 and svg.count('class="point eval"') == 2
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "widened from 0.02 to 0.11" in html
    table = html[html.index("</figure>") : html.index("<h2>Leaderboard</h2>")]
    assert table.count("<tr>") == 3  # a header and one row per round
    assert "0.790 <small>" in table


def test_candidate_page_shows_a_rejected_proposal_inert(
    search: SearchRun, reviewer_user: User
) -> None:
    rejected = Candidate.objects.get(status="rejected")
    html = (
        logged_in(reviewer_user)
        .get(url("search-candidate", search.pk, rejected.pk))
        .content.decode()
    )
    assert "PROPOSER PROMPT" in html and "reward: &#x27;x.score&#x27; is not an output" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    other = SearchRun.objects.create(
        project=search.project, job=job_create(kind="search", project=search.project),
        kind="scalar", mode="best_of_n", endpoint=search.endpoint, n=1,
    )  # fmt: skip
    wrong = url("search-candidate", other.pk, rejected.pk)
    assert logged_in(reviewer_user).get(wrong).status_code == 404


def test_promoting_versions_the_selection_and_the_graders_page_shows_the_current(
    search: SearchRun, admin_user: User
) -> None:
    admin = logged_in(admin_user)
    cheap = Candidate.objects.get(metagrader__name="cheap")
    pricey = Candidate.objects.get(metagrader__name="pricey")
    response = admin.post(url("candidate-promote", search.pk, cheap.pk))
    assert response.status_code == 302 and response["Location"] == url("search", search.pk)
    assert admin.post(url("program-promote", pricey.metagrader_id)).status_code == 302
    first, second = GraderSelection.objects.order_by("version")
    assert (first.version, first.metagrader, first.search, first.selected_by) == (
        1, cheap.metagrader, search, admin_user,
    )  # fmt: skip
    assert (second.version, second.metagrader, second.search, second.selected_by) == (
        2, pricey.metagrader, None, admin_user,
    )  # fmt: skip
    graders = admin.get(url("graders")).content.decode()
    in_use = graders[graders.index("<h2>In use</h2>") : graders.index("<h2>All graders</h2>")]
    assert f">#{pricey.metagrader_id} pricey</a>" in in_use and "v2" in in_use
    assert "cheap" not in in_use
    program = admin.get(url("program", cheap.metagrader_id)).content.decode()
    assert "The scalar grader in use is" in program and "v1" in program and "v2" in program
    current = admin.get(url("program", pricey.metagrader_id)).content.decode()
    assert "This is the project's scalar grader (version 2)" in current
    assert url("program-promote", pricey.metagrader_id) not in current
    board = admin.get(url("search", search.pk)).content.decode()
    assert "in use, v2" in board
    rejected = Candidate.objects.get(status="rejected")
    assert admin.post(url("candidate-promote", search.pk, rejected.pk)).status_code == 404


def test_evaluating_a_candidate_on_eval_starts_a_run_and_links_it(
    search: SearchRun, admin_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    admin = logged_in(admin_user)
    pricey = Candidate.objects.get(metagrader__name="pricey")
    page = admin.get(url("search", search.pk)).content.decode()
    assert url("candidate-evaluate", search.pk, pricey.pk) in page
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(url("candidate-evaluate", search.pk, pricey.pk))
    assert response.status_code == 302 and len(callbacks) == 1
    pricey.refresh_from_db()
    run = pricey.eval_run
    assert run is not None and run.split == "eval" and run.search is None
    assert run.metagrader == pricey.metagrader and run.endpoint == search.endpoint
    assert run.items.count() == 2  # the two D_eval tasks
    page = admin.get(url("search", search.pk)).content.decode()
    assert f'href="{url("grading-run", run.pk)}"' in page
    assert url("candidate-evaluate", search.pk, pricey.pk) not in page


def test_evaluating_needs_eval_tasks_and_a_stopped_search(
    search: SearchRun, admin_user: User
) -> None:
    admin = logged_in(admin_user)
    base = Candidate.objects.get(metagrader__name="base-line")
    Task.objects.filter(split="eval").update(split="meta")
    page = admin.post(url("candidate-evaluate", search.pk, base.pk), follow=True).content.decode()
    assert "Cannot evaluate on D_eval: no tasks with responses" in page
    Task.objects.filter(split="meta").update(split="eval")
    Job.objects.filter(pk=search.job_id).update(status=JobStatus.RUNNING)
    page = admin.post(url("candidate-evaluate", search.pk, base.pk), follow=True).content.decode()
    assert "Wait for the search to stop" in page
    base.refresh_from_db()
    assert base.eval_run is None


def test_status_polls_as_a_fragment_while_running_and_signals_the_end(
    search: SearchRun, admin_user: User
) -> None:
    Job.objects.filter(pk=search.job_id).update(status=JobStatus.RUNNING, stage="Round 1 of 1: grading candidate 2 of 5 on D_selection", done=6, total=24)  # fmt: skip
    admin = logged_in(admin_user)
    full = admin.get(url("search", search.pk)).content.decode()
    assert "<html" in full and 'hx-trigger="every 1s"' in full and "<h2>Leaderboard</h2>" in full
    assert 'hx-trigger="every 5s, search-finished from:body"' in full
    assert '<progress max="24" value="6">' in full and "6 of 24 task gradings" in full
    assert "Judge calls 0 and cache hits 0" in full and "proposer calls 3" in full
    assert "cost $0.5000" in full
    assert "Cancel" in full and "Promote" not in full  # no actions while it runs
    status = {"HX-Request": "true", "HX-Target": "search-status"}
    fragment = admin.get(url("search", search.pk), headers=status)
    text = fragment.content.decode()
    assert text.lstrip().startswith('<section id="search-status"') and "<html" not in text
    assert "grading candidate 2 of 5" in text and "Leaderboard" not in text
    assert "HX-Trigger" not in fragment.headers
    results = admin.get(url("search", search.pk), headers={"HX-Request": "true", "HX-Target": "search-results"})  # fmt: skip
    text = results.content.decode()
    assert text.lstrip().startswith('<section id="search-results"') and "<html" not in text
    assert "<h2>Leaderboard</h2>" in text and "HX-Trigger" not in results.headers
    Job.objects.filter(pk=search.job_id).update(status=JobStatus.SUCCEEDED)
    done = admin.get(url("search", search.pk), headers=status)
    assert json.loads(done.headers["HX-Trigger"]) == {"search-finished": {}}
    assert "every 1s" not in done.content.decode()


def test_cancel_and_resume_with_a_higher_budget(
    search: SearchRun, admin_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    admin = logged_in(admin_user)
    Job.objects.filter(pk=search.job_id).update(status=JobStatus.RUNNING)
    assert admin.post(url("search-cancel", search.pk)).status_code == 302
    job = Job.objects.get(pk=search.job_id)
    assert job.cancel_requested
    SearchRun.objects.filter(pk=search.pk).update(max_calls=100)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.FAILED, error="The budget is spent.")
    page = admin.get(url("search", search.pk)).content.decode()
    assert url("search-resume", search.pk) in page and "Now 100; a higher limit" in page
    low = admin.post(url("search-resume", search.pk), {"max_calls": 50})
    assert (
        low.status_code == 400 and "Must be above the current limit of 100." in low.content.decode()
    )
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(url("search-resume", search.pk), {"max_calls": 300, "max_cost": ""})
    assert response.status_code == 302 and len(callbacks) == 1
    search.refresh_from_db()
    search.job.refresh_from_db()
    assert search.max_calls == 300 and search.job.status == JobStatus.QUEUED
    again = admin.post(url("search-resume", search.pk), {}, follow=True).content.decode()
    assert "Only a stopped search (cancelled, failed or out of budget) can be resumed." in again


def test_program_page_reads_like_a_program_with_its_diff_and_lineage(
    search: SearchRun, reviewer_user: User
) -> None:
    project = search.project
    root = Metagrader.objects.get(name="base-line")
    parent = grader(project, "parent-prog", extra="\nCheck the cap.", parent=root)
    child_program = parent.program | {"name": "child-prog"}
    child_program["steps"] = [dict(parent.program["steps"][0])]
    child_program["steps"][0]["prompt"] = parent.program["steps"][0]["prompt"].replace(
        "Check the cap.", f"Check the cap twice. {HOSTILE}"
    )
    child_program["steps"].append({"id": "fresh", "prompt": "Score again.\n{response}", "output": {"score": "float[0,1]"}})  # fmt: skip
    child_program["reward"] = {"mean": ["grade.score", "fresh.score"]}
    child = metagrader_register(
        project=project, program=child_program, origin="search", parent=parent
    )
    html = logged_in(reviewer_user).get(url("program", child.pk)).content.decode()
    assert "<title>Grader child-prog</title>" in html
    assert html.count("<h2>Exports and reward calls</h2>") == 1
    assert "<code>mean(grade.score, fresh.score)</code>" in html
    assert '<mark class="placeholder">{response}</mark>' in html
    assert '<span class="diff-removed">-  Check the cap.</span>' in html
    assert '<span class="diff-added">+  Check the cap twice. &lt;script&gt;' in html
    assert '<span class="diff-added">+reward: mean(grade.score, fresh.score)</span>' in html
    lineage = html[html.index("<h2>Lineage</h2>") : html.index("<h2>Changes")]
    assert lineage.index("base-line") < lineage.index("parent-prog") < lineage.index("this program")
    assert f">#{search.pk}</a>" not in html[html.index("<h2>Searches</h2>") :]  # not a candidate
    parent_page = logged_in(reviewer_user).get(url("program", parent.pk)).content.decode()
    assert f">#{child.pk} child-prog</a>" in parent_page  # its children
    cheap = Candidate.objects.get(metagrader__name="cheap")
    cheap_page = logged_in(reviewer_user).get(url("program", cheap.metagrader_id)).content.decode()
    assert f'href="{url("search", search.pk)}"' in cheap_page and "winner" in cheap_page


def test_program_diff_and_reward_text_by_hand() -> None:
    parent = {"kind": "scalar", "name": "p", "steps": [{"id": "a", "prompt": "one\ntwo", "output": {"score": "float[0,1]"}}], "reward": "a.score"}  # fmt: skip
    child = parent | {"name": "c", "reward": {"weighted_mean": [["a.score", 2], [{"clip": ["a.score", 0, 0.5]}, 1]]}}  # fmt: skip
    child["steps"] = [{"id": "a", "prompt": "one\nthree", "output": {"score": "float[0,1]"}}]
    lines = [(line.kind, line.text) for line in program_diff(parent, child)]
    assert ("removed", "-scalar program p") in lines and ("added", "+scalar program c") in lines
    assert ("removed", "-  two") in lines and ("added", "+  three") in lines
    assert ("context", "   one") in lines and lines[0][0] == "hunk"
    assert reward_text(child) == "weighted_mean(a.score: 2, clip(a.score, 0, 0.5): 1)"
    assert reward_text({"kind": "rubric"}) == "the weight share of satisfied criteria"
    assert re.fullmatch(r"@@ .* @@", lines[0][1])


def test_the_start_form_suggests_a_small_search_for_the_local_demo_judge(
    judge: JudgeEndpoint, admin_user: User
) -> None:
    from graders.forms import LOCAL_DEMO_N, SearchForm

    assert SearchForm(project=judge.project).fields["n"].initial == 3
    JudgeEndpoint.objects.filter(pk=judge.pk).update(is_local_demo=True)
    form = SearchForm(project=judge.project)
    assert form.fields["n"].initial == LOCAL_DEMO_N == 1
    assert "local demo judge" in form.fields["n"].help_text


def test_the_polled_status_reads_the_grading_runs_usage_twice_at_most(
    search: SearchRun, admin_user: User
) -> None:
    """The status fragment, polled every second, shows the search's spending and holds it in
    the resume form: its grading runs' usage is read for the judge figures and the total, not
    once more for the form."""
    admin = logged_in(admin_user)
    status = {"HX-Request": "true", "HX-Target": "search-status"}
    table = GradingRun._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        assert admin.get(url("search", search.pk), headers=status).status_code == 200
    usage_reads = [q for q in queries if f'"{table}"."usage" AS "usage" FROM "{table}"' in q["sql"]]
    assert len(usage_reads) == 2
