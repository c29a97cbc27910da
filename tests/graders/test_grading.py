"""Grading runs end to end: the real engine over real HTTP to the fake judge, grades stored,
evaluated with the exact metrics, and reruns that make no new judge calls."""

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from graders.engine.baseline import baseline_program
from graders.engine.judge import Usage
from graders.grading import grading_run_execute, grading_run_resume
from graders.models import Grade, GradingRun, JudgeCall, JudgeEndpoint
from graders.services import grading_run_start, metagrader_register
from labeling.imports import jsonl_import
from labeling.jobs import job_cancel
from labeling.models import Job, Project, Rubric, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db


def last_user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def quality_responder(body: dict[str, Any]) -> str:
    """Scores by the quality word the fenced response carries; writes rubrics; compares."""
    text = last_user_text(body)
    schema = json.dumps(body.get("response_format", {}))
    if '"criteria"' in schema:
        return json.dumps(
            {
                "criteria": [
                    {"text": "States the cap.", "weight": 2},
                    {"text": "Cites clause 4.", "weight": 1},
                ]
            }
        )
    if '"winner"' in schema:
        first = text.index("Response A")
        a_good = "GOOD" in text[first : text.index("Response B")]
        return json.dumps({"winner": "a" if a_good else "b"})
    if '"verdict"' in schema:
        return json.dumps({"verdict": "GOOD" in text})
    return json.dumps({"score": 0.9 if "GOOD" in text else (0.5 if "OKAY" in text else 0.1)})


@pytest.fixture
def graded_project(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = []
    for t in range(3):
        records.append({"type": "task", "id": f"t{t}", "prompt": f"Review contract {t}", "split": "eval",
                        "domain": "legal" if t < 2 else "finance",
                        "documents": [{"id": "spa", "title": "SPA", "text": "Clause 4: cap of 10%."}]})  # fmt: skip
        for r, (word, truth) in enumerate((("GOOD", 0.9), ("OKAY", 0.5), ("POOR", 0.2))):
            records.append(
                {
                    "type": "response",
                    "id": f"t{t}/r{r}",
                    "task": f"t{t}",
                    "content": f"{word} answer {t}",
                }
            )
            records.append({"type": "score", "response": f"t{t}/r{r}", "value": truth})
    jsonl_import(project=project, path=write_jsonl(tmp_path / "g.jsonl", records))
    return project


@pytest.fixture
def judge(graded_project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = quality_responder
    return JudgeEndpoint.objects.create(
        project=graded_project,
        name="fake",
        base_url=fake_judge.base_url,
        model="fake-judge",
        is_default=True,
    )


def run_for(project: Project, endpoint: JudgeEndpoint, kind: str, **kwargs: Any) -> GradingRun:
    grader = metagrader_register(
        project=project, program=baseline_program(kind).to_json(), origin="baseline"
    )
    return grading_run_start(
        project=project, metagrader=grader, endpoint=endpoint, split="eval", **kwargs
    )


def test_scalar_run_grades_evaluates_and_reruns_for_free(
    graded_project: Project, judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = run_for(graded_project, judge, "scalar")
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    rewards = dict(Grade.objects.filter(run=run).values_list("response__external_id", "reward"))
    assert rewards["t0/r0"] == 0.9 and rewards["t0/r1"] == 0.5 and rewards["t0/r2"] == 0.1
    trace = Grade.objects.get(run=run, response__external_id="t0/r0").trace
    assert trace[0]["text"] == '{"score": 0.9}' and "GOOD answer 0" in json.dumps(
        trace[0]["messages"]
    )
    run.refresh_from_db()
    # 3 tasks x 3 pairs, each ordered correctly: every metric is 1 and so is its interval.
    assert run.evaluation["reference"] == "true_grader" and run.evaluation["pairs"] == 9
    assert run.evaluation["ranking_accuracy"] == {"value": 1.0, "ci": [1.0, 1.0]}
    assert run.evaluation["harm_aware_accuracy"]["value"] == 1.0
    assert run.evaluation["within_task_spearman"]["value"] == 1.0
    assert run.job.status == "succeeded" and run.job.done == 3 and run.usage["calls"] == 9
    calls = fake_judge.call_count
    again = run_for(graded_project, judge, "scalar")
    grading_run_execute(run_id=again.pk)
    assert fake_judge.call_count == calls  # every answer came from the cache
    again.refresh_from_db()
    assert again.usage["cache_hits"] == 9 and again.usage["calls"] == 0
    assert grading_run_execute(run_id=run.pk)["skipped"]  # a second delivery does nothing


def test_rubric_run_generates_each_rubric_once_and_stores_it(
    graded_project: Project, judge: JudgeEndpoint
) -> None:
    run = run_for(graded_project, judge, "rubric")
    grading_run_execute(run_id=run.pk)
    rubrics = Rubric.objects.filter(author_kind="generated")
    assert rubrics.count() == 3
    assert list(rubrics.first().items.values_list("text", "weight")) == [
        ("States the cap.", 2.0),
        ("Cites clause 4.", 1.0),
    ]
    grade = Grade.objects.get(run=run, response__external_id="t1/r0")
    assert grade.reward == 1.0 and [c["passed"] for c in grade.criteria] == [True, True]
    assert Grade.objects.get(run=run, response__external_id="t1/r2").reward == 0.0
    assert JudgeCall.objects.filter(result__text__icontains="criteria").count() == 3


def test_pairwise_run_turns_groups_into_win_rates(
    graded_project: Project, judge: JudgeEndpoint
) -> None:
    run = run_for(graded_project, judge, "pairwise")
    grading_run_execute(run_id=run.pk)
    rewards = dict(Grade.objects.filter(run=run).values_list("response__external_id", "reward"))
    # GOOD wins its 4 comparisons (2 opponents x 2 orders): 1.0. The judge here only knows
    # GOOD from not-GOOD, so OKAY vs POOR goes to whichever is shown as B: 1 of 2 each, and
    # each also loses both to GOOD: (0 + 0 + 1 + 0) / 4... computed per opponent as win rate.
    assert rewards["t0/r0"] == 1.0
    assert rewards["t0/r1"] == rewards["t0/r2"] == 0.25
    run.refresh_from_db()
    assert run.evaluation["tolerance"] == 0.0


def test_budget_stops_cleanly_and_resume_finishes_without_repeating_calls(
    graded_project: Project, judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    run = run_for(graded_project, judge, "scalar", max_calls=4)
    assert grading_run_execute(run_id=run.pk)["status"] == "budget"
    run.refresh_from_db()
    assert run.job.status == "budget_spent" and "budget is spent" in run.job.error
    # The run's own count, not the JudgeCall table, which other tests' workers may write to.
    answered = run.usage["calls"]
    assert answered <= 4 and fake_judge.call_count == answered
    GradingRun.objects.filter(pk=run.pk).update(max_calls=None)
    grading_run_resume(run=run)
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert fake_judge.call_count == 9  # the answers cached before the stop were not asked again
    assert Grade.objects.filter(run=run).count() == 9


def test_a_run_stores_its_usage_as_each_new_judge_answer_lands(
    graded_project: Project,
    judge: JudgeEndpoint,
    fake_judge: FakeJudgeServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's stored usage is the one counter every page shows; it grows per answer, not
    per chunk, so a slow judge's run shows its calls long before a task is done."""
    from graders import grading
    from graders.grading import run_budget, run_grade

    clock = [0.0]

    def tick() -> float:
        clock[0] += 2.0  # every answer is more than a second after the last store
        return clock[0]

    monkeypatch.setattr(grading.time, "monotonic", tick)
    stored: list[tuple[int, float]] = []
    usage_add = grading._usage_add

    def recording(run: GradingRun, usage: Usage) -> None:
        stored.append((usage.calls, usage.cost))
        usage_add(run, usage)

    monkeypatch.setattr(grading, "_usage_add", recording)
    judge.price_in_per_mtok, judge.price_out_per_mtok = 3, 15
    judge.save()
    run = run_for(graded_project, judge, "scalar")
    chunks: list[tuple[int, int]] = []
    run_grade(run, budget=run_budget(None, None, {}), progress=lambda d, t: chunks.append((d, t)))
    # 9 responses, one call each: one store per answer as it lands (and none per chunk).
    assert [calls for calls, _ in stored if calls] == [1] * 9 == [1] * fake_judge.call_count
    run.refresh_from_db()
    assert run.usage["calls"] == 9
    assert (
        run.usage["cost"] == pytest.approx(sum(cost for _, cost in stored))
        and run.usage["cost"] > 0
    )
    assert chunks[0] == (0, 3)  # three tasks, reported chunk by chunk
    rerun = run_for(graded_project, judge, "scalar")
    run_grade(rerun, budget=run_budget(None, None, {}), progress=lambda d, t: None)
    rerun.refresh_from_db()
    assert (rerun.usage["calls"], rerun.usage["cache_hits"]) == (0, 9)  # all from the cache


def test_the_run_usage_is_stored_at_most_once_a_second_and_exactly_at_chunk_end(
    graded_project: Project, judge: JudgeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graders import grading

    now = [100.0]
    monkeypatch.setattr(grading.time, "monotonic", lambda: now[0])
    run = run_for(graded_project, judge, "scalar")
    cache = grading.RunUsageCache(judge, run)
    client = Usage()
    cache.chunk_start(client)

    def calls() -> int:
        return GradingRun.objects.get(pk=run.pk).usage.get("calls", 0)

    client.calls, client.cost = 1, 0.01
    cache._put("k1", {"content": "1"})
    assert calls() == 1
    now[0] += 0.5
    client.calls = 2
    cache._put("k2", {"content": "2"})
    assert calls() == 1  # within the second: not written
    now[0] += 0.6
    client.calls = 3
    cache._put("k3", {"content": "3"})
    assert calls() == 3
    cache.chunk_end(Usage(calls=4, cost=0.02, retries=1))
    stored = GradingRun.objects.get(pk=run.pk).usage
    assert (stored["calls"], stored["retries"], stored["cost"]) == (4, 1, pytest.approx(0.02))
    assert float(Job.objects.get(pk=run.job_id).cost) == pytest.approx(0.02)


def test_cancel_stops_the_run_and_keeps_it_resumable(
    graded_project: Project, judge: JudgeEndpoint
) -> None:
    run = run_for(graded_project, judge, "scalar")
    Job.objects.filter(pk=run.job_id).update(status="running")
    job_cancel(job=run.job)
    assert grading_run_execute(run_id=run.pk)["status"] == "cancelled"
    assert Grade.objects.filter(run=run).count() == 0


def test_failed_parses_are_recorded_failures_never_scores(
    graded_project: Project, judge: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    fake_judge.responder = lambda body: "I would rate this highly."
    run = run_for(graded_project, judge, "scalar")
    grading_run_execute(run_id=run.pk)
    grades = Grade.objects.filter(run=run)
    assert grades.count() == 9 and all(g.reward is None and g.error for g in grades)
    run.refresh_from_db()
    assert run.evaluation["failed"] == 9 and run.evaluation["ranking_accuracy"]["value"] == 0.0


def test_evaluate_command_reports_the_latest_finished_run(
    graded_project: Project, judge: JudgeEndpoint
) -> None:
    run = run_for(graded_project, judge, "scalar")
    with pytest.raises(CommandError, match="no finished run"):
        call_command("evaluate", project="acme", grader=run.metagrader_id)
    grading_run_execute(run_id=run.pk)
    out = io.StringIO()
    call_command("evaluate", project="acme", grader=run.metagrader_id, json=True, stdout=out)
    report = json.loads(out.getvalue())
    assert report["run"] == run.pk and report["ranking_accuracy"]["value"] == 1.0
    text = io.StringIO()
    call_command("evaluate", project="acme", grader=run.metagrader_id, stdout=text)
    # Three tasks: each metric with its task-bootstrap interval.
    assert re.search(r"1\.000 \[\d\.\d{3}, 1\.000\]", text.getvalue()), text.getvalue()
    Task.objects.filter(project=graded_project).exclude(external_id="t0").update(split="meta")
    single = run_for(graded_project, judge, "scalar")  # D_eval is one task now
    grading_run_execute(run_id=single.pk)
    text = io.StringIO()
    call_command("evaluate", project="acme", grader=run.metagrader_id, stdout=text)
    assert "1.000 (one task: no interval)" in text.getvalue()  # the latest run: one task


def test_meta_eval_by_hand(project: Project, tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [{"type": "task", "id": "t", "prompt": "p"}]
    records += [
        {"type": "response", "id": f"r{i}", "task": "t", "content": str(i)} for i in range(4)
    ]
    records += [
        {"type": "preference", "a": "r0", "b": "r1", "choice": "a", "provider": "synthetic", "annotator": "gen"},
        {"type": "preference", "a": "r2", "b": "r3", "choice": "b", "provider": "synthetic", "annotator": "gen"},
        # judge j: run 0 orders both pairs right; run 1 ties the first and fails on r3.
        {"type": "judge_score", "judge": "j", "response": "r0", "run": 0, "score": 0.9},
        {"type": "judge_score", "judge": "j", "response": "r1", "run": 0, "score": 0.2},
        {"type": "judge_score", "judge": "j", "response": "r2", "run": 0, "score": 0.1},
        {"type": "judge_score", "judge": "j", "response": "r3", "run": 0, "score": 0.6},
        {"type": "judge_score", "judge": "j", "response": "r0", "run": 1, "score": 0.5},
        {"type": "judge_score", "judge": "j", "response": "r1", "run": 1, "score": 0.5},
        {"type": "judge_score", "judge": "j", "response": "r2", "run": 1, "score": 0.1},
        {"type": "judge_score", "judge": "j", "response": "r3", "run": 1, "score": None},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", records))
    out = io.StringIO()
    call_command("meta_eval", project="acme", json=True, stdout=out)
    (row,) = json.loads(out.getvalue())["rows"]
    # 4 runs (2 pairs x 2 runs): correct = run 0 both -> 2; run 1: tie, failed -> 0. 2/4.
    # Tie rate: 1 tie of 4. Leniency: the 7 emitted scores sum to 2.9 -> 2.9 / 7.
    # Stability: pair 1 correct then tied -> wobbled; pair 2 picked r3 once, failed once ->
    # stable (failed runs are left out). Distinct: 0.9 0.2 0.1 0.6 0.5 -> 5.
    assert (row["pairs"], row["runs"], row["accuracy"], row["tie_rate"], row["failed_runs"]) == (
        2,
        2,
        0.5,
        0.25,
        1,
    )
    assert row["leniency"] == pytest.approx(2.9 / 7)
    assert (row["wobbled"], row["stable"], row["distinct_scores"]) == (1, 1, 5)


def test_grading_pages_for_reviewers_and_admins_only(
    graded_project: Project,
    judge: JudgeEndpoint,
    admin_user: Any,
    reviewer_user: Any,
    expert_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from django.test import Client
    from django.urls import reverse

    expert, reviewer, admin = Client(), Client(), Client()
    expert.force_login(expert_user)
    reviewer.force_login(reviewer_user)
    admin.force_login(admin_user)
    for name in ("graders", "judges", "meta-eval"):
        assert expert.get(reverse(name, args=["acme"])).status_code == 403
        assert reviewer.get(reverse(name, args=["acme"])).status_code == 200
    grader = metagrader_register(
        project=graded_project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    form = {"grader": grader.pk, "endpoint": judge.pk, "split": "eval"}
    page = admin.get(reverse("graders", args=["acme"])).content.decode()
    assert (
        f'<option value="{grader.pk}">scalar · #{grader.pk} {grader.name} (baseline)</option>'
        in page
    )
    assert reviewer.post(reverse("graders", args=["acme"]), form).status_code == 403
    huge = admin.post(reverse("graders", args=["acme"]), form | {"max_calls": "9" * 30})
    assert huge.status_code == 400 and "less than or equal to" in huge.content.decode()
    with django_capture_on_commit_callbacks() as callbacks:
        response = admin.post(reverse("graders", args=["acme"]), form)
    assert response.status_code == 302 and len(callbacks) == 1
    run = GradingRun.objects.get()
    grading_run_execute(run_id=run.pk)
    page = reviewer.get(response["Location"]).content.decode()
    assert "Ranking accuracy" in page and "1.000" in page and "t2/r2" in page
    grade = Grade.objects.get(run=run, response__external_id="t0/r0")
    trace = reviewer.get(reverse("grade-trace", args=["acme", grade.pk])).content.decode()
    assert "GOOD answer 0" in trace and "Grade this trace" in trace
    program = reviewer.get(reverse("program", args=["acme", grader.pk])).content.decode()
    assert "Grade this trace from 0 to 1" in program


def test_a_run_s_job_page_shows_the_project_links_back_and_cancel_returns_to_the_run(
    graded_project: Project,
    judge: JudgeEndpoint,
    admin_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from django.test import Client
    from django.urls import reverse

    grader = metagrader_register(
        project=graded_project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    admin = Client()
    admin.force_login(admin_user)
    with django_capture_on_commit_callbacks():
        admin.post(
            reverse("graders", args=["acme"]),
            {"grader": grader.pk, "endpoint": judge.pk, "split": "eval"},
        )
    run = GradingRun.objects.get()
    job_url = reverse("job-detail", args=[run.job_id])
    run_url = reverse("grading-run", args=["acme", run.pk])

    page = admin.get(job_url).content.decode()

    assert f"<h1>Grading job #{run.job_id}</h1>" in page
    assert f'Runs the <a href="{run_url}">grading run #{run.pk}</a>' in page
    assert (
        'ada <span class="role">admin</span>' in page and 'href="/p/acme/graders/"' in page
    )  # the project's menu
    on_run_page = "http://testserver" + run_url
    fragment = admin.get(job_url, headers={"HX-Request": "true", "HX-Current-URL": on_run_page})
    assert f'name="next" value="{on_run_page}"' in fragment.content.decode()
    elsewhere = admin.post(
        reverse("job-cancel", args=[run.job_id]), {"next": "https://elsewhere.example/"}
    )
    assert elsewhere["Location"] == job_url  # only this site's pages
    back = admin.post(reverse("job-cancel", args=[run.job_id]), {"next": on_run_page})
    assert back.status_code == 302 and back["Location"] == on_run_page


def test_judges_page_adds_an_endpoint_without_storing_a_key(
    graded_project: Project, admin_user: Any
) -> None:
    from django.test import Client
    from django.urls import reverse

    admin = Client()
    admin.force_login(admin_user)
    form = {"name": "gpt", "base_url": "https://api.openai.com/v1", "model": "gpt-x", "api_key_env": "OPENAI_API_KEY",
            "temperature": 0, "max_tokens": 512, "max_concurrency": 16, "timeout_s": 60, "price_in_per_mtok": 1.25,
            "price_out_per_mtok": 10, "response_format": "json_schema", "is_default": "on"}  # fmt: skip
    assert admin.post(reverse("judges", args=["acme"]), form).status_code == 302
    endpoint = JudgeEndpoint.objects.get(name="gpt")
    assert endpoint.is_default and endpoint.api_key_env == "OPENAI_API_KEY"
    bad = admin.post(
        reverse("judges", args=["acme"]), form | {"name": "other", "base_url": "not a url"}
    )
    assert bad.status_code == 400 and "Enter a valid URL" in bad.content.decode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "gpt"}, "This project already has a judge named &#x27;gpt&#x27;"),
        ({"price_in_per_mtok": -1}, "greater than or equal to 0"),
        ({"timeout_s": 0}, "greater than or equal to 0.1"),
        ({"max_tokens": 0}, "greater than or equal to 1"),
        ({"max_concurrency": 0}, "greater than or equal to 1"),
        ({"max_concurrency": 100_000}, "less than or equal to 1024"),
        ({"temperature": -5}, "greater than or equal to 0"),
        ({"max_tokens": 10**30}, "less than or equal to 1000000"),
    ],
)
def test_judge_settings_a_call_cannot_use_are_field_errors(
    graded_project: Project, admin_user: Any, change: dict[str, Any], message: str
) -> None:
    from django.test import Client
    from django.urls import reverse

    admin = Client()
    admin.force_login(admin_user)
    form = {"name": "gpt", "base_url": "https://api.example.com/v1", "model": "gpt-x",
            "temperature": 0, "max_tokens": 512, "max_concurrency": 16, "timeout_s": 60,
            "price_in_per_mtok": 0, "price_out_per_mtok": 0, "response_format": "json_schema"}  # fmt: skip
    assert admin.post(reverse("judges", args=["acme"]), form).status_code == 302
    count = JudgeEndpoint.objects.count()

    page = admin.post(reverse("judges", args=["acme"]), form | {"name": "other"} | change)

    assert page.status_code == 400 and message in page.content.decode()
    assert "Constraint" not in page.content.decode()  # named by field, not by the database
    assert JudgeEndpoint.objects.count() == count


def test_resume_button_requeues_a_stopped_run(
    graded_project: Project,
    judge: JudgeEndpoint,
    admin_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from django.test import Client
    from django.urls import reverse

    run = run_for(graded_project, judge, "scalar", max_calls=2)
    grading_run_execute(run_id=run.pk)
    admin = Client()
    admin.force_login(admin_user)
    assert "Resume" in admin.get(reverse("grading-run", args=["acme", run.pk])).content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        admin.post(reverse("grading-run-resume", args=["acme", run.pk]), {"max_calls": 10})
    run.job.refresh_from_db()
    assert run.job.status == "queued" and len(callbacks) == 1


def test_a_run_whose_tasks_another_worker_holds_waits_instead_of_succeeding(
    graded_project: Project, judge: JudgeEndpoint, settings: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from graders.models import GradingItem

    settings.CELERY_TASK_ALWAYS_EAGER = False
    run = run_for(graded_project, judge, "scalar")
    # A worker that died mid-run left every task claimed.
    GradingItem.objects.filter(run=run).update(status="running", claimed_at=timezone.now())
    from unittest import mock

    with mock.patch("graders.tasks.grading_run_task.apply_async") as later:
        assert grading_run_execute(run_id=run.pk)["status"] == "waiting"
    later.assert_called_once()
    run.job.refresh_from_db()
    assert run.job.status == "running" and Grade.objects.filter(run=run).count() == 0
    # Once the dead worker's claims are stale, the next look grades them and finishes.
    GradingItem.objects.filter(run=run).update(claimed_at=timezone.now() - timedelta(hours=1))
    assert grading_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert Grade.objects.filter(run=run).count() == 9


def test_spend_before_a_budget_stop_is_accounted(
    graded_project: Project, judge: JudgeEndpoint
) -> None:
    JudgeEndpoint.objects.filter(pk=judge.pk).update(price_in_per_mtok=1000.0)
    judge.refresh_from_db()
    run = run_for(graded_project, judge, "scalar", max_cost=0.05)
    grading_run_execute(run_id=run.pk)
    run.refresh_from_db()
    spent = run.usage["cost"]
    assert spent > 0 and run.job.cost > 0 and run.usage["calls"] == JudgeCall.objects.count()
    assert Grade.objects.filter(run=run).count() > 0  # tasks finished before the stop are kept


def test_an_endpoint_cannot_name_a_secret_that_is_not_a_judge_key(
    graded_project: Project, admin_user: Any, judge: JudgeEndpoint, settings: Any
) -> None:
    from django.test import Client
    from django.urls import reverse

    from graders.services import endpoint_settings

    admin = Client()
    admin.force_login(admin_user)
    settings.JUDGE_API_KEY_HOSTS = ["JUDGE_KEY_ACME=judge.acme.example"]  # where that key goes
    form = {"name": "evil", "base_url": "https://judge.acme.example/v1", "model": "m", "api_key_env": "SECRET_KEY",
            "temperature": 0, "max_tokens": 512, "max_concurrency": 4, "timeout_s": 60, "price_in_per_mtok": 0,
            "price_out_per_mtok": 0, "response_format": "json_schema"}  # fmt: skip
    response = admin.post(reverse("judges", args=["acme"]), form)
    assert (
        response.status_code == 400 and "not an allowed key variable" in response.content.decode()
    )
    assert (
        admin.post(
            reverse("judges", args=["acme"]), form | {"api_key_env": "JUDGE_KEY_ACME"}
        ).status_code
        == 302
    )
    JudgeEndpoint.objects.filter(pk=judge.pk).update(
        api_key_env="DATABASE_URL"
    )  # written around the form
    judge.refresh_from_db()
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        endpoint_settings(judge)


def test_meta_eval_counts_only_pairs_the_judge_scored_and_uses_the_majority(
    project: Project, tmp_path: Path
) -> None:
    from graders.evaluation import meta_eval_rows

    records: list[dict[str, Any]] = [
        {"type": "task", "id": "t", "prompt": "p"},
        {"type": "dimension", "name": "tone"},
        {"type": "dimension", "name": "facts"},
    ]
    records += [
        {"type": "response", "id": f"r{i}", "task": "t", "content": str(i)} for i in range(4)
    ]
    records += [
        # tone: r0 beats r1, scored by j correctly in one run.
        {"type": "preference", "a": "r0", "b": "r1", "choice": "a", "dimension": "tone", "provider": "human", "annotator": "x"},
        {"type": "judge_score", "judge": "j", "response": "r0", "dimension": "tone", "score": 0.8},
        {"type": "judge_score", "judge": "j", "response": "r1", "dimension": "tone", "score": 0.2},
        # facts: never scored by j, so it must not count as failed runs.
        {"type": "preference", "a": "r2", "b": "r3", "choice": "a", "dimension": "facts", "provider": "human", "annotator": "x"},
        # tone r2-r3: humans split 2 to 1 for r3; the judge agrees with the majority.
        {"type": "preference", "a": "r2", "b": "r3", "choice": "b", "dimension": "tone", "provider": "human", "annotator": "x"},
        {"type": "preference", "a": "r2", "b": "r3", "choice": "b", "dimension": "tone", "provider": "human", "annotator": "y"},
        {"type": "preference", "a": "r2", "b": "r3", "choice": "a", "dimension": "tone", "provider": "human", "annotator": "z"},
        {"type": "judge_score", "judge": "j", "response": "r2", "dimension": "tone", "score": 0.1},
        {"type": "judge_score", "judge": "j", "response": "r3", "dimension": "tone", "score": 0.9},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", records))
    (row,) = meta_eval_rows(project=project, reference="human")["rows"]
    assert (row["pairs"], row["runs"], row["accuracy"], row["failed_runs"]) == (2, 1, 1.0, 0)


def test_operators_can_pin_judge_hosts(
    graded_project: Project, admin_user: Any, judge: JudgeEndpoint, settings: Any
) -> None:
    from django.core.exceptions import ValidationError
    from django.test import Client
    from django.urls import reverse

    from graders.services import endpoint_settings

    settings.JUDGE_BASE_URL_HOSTS = ["api.example.com"]
    admin = Client()
    admin.force_login(admin_user)
    form = {"name": "inner", "base_url": "https://judge.other.example/v1", "model": "m", "api_key_env": "",
            "temperature": 0, "max_tokens": 512, "max_concurrency": 4, "timeout_s": 60, "price_in_per_mtok": 0,
            "price_out_per_mtok": 0, "response_format": "json_schema"}  # fmt: skip
    for url in ("https://judge.other.example/v1", "https://api.example.com:8443/v1"):
        response = admin.post(reverse("judges", args=["acme"]), form | {"base_url": url})
        assert response.status_code == 400
        assert "not an allowed judge host" in response.content.decode()
    assert (
        admin.post(
            reverse("judges", args=["acme"]), form | {"base_url": "https://api.example.com/v1"}
        ).status_code
        == 302
    )
    endpoint_settings(judge)  # the fake judge's 127.0.0.1:port is allowed exactly
    settings.JUDGE_PRIVATE_HOSTS = []
    with pytest.raises(ValidationError):
        endpoint_settings(judge)  # 127.0.0.1 is not pinned


def _meta_records(dimensions: list[str | None]) -> list[dict[str, Any]]:
    """One synthetic-labeled pair per dimension (None: an overall preference), scored right by
    the judge j in one run."""
    records: list[dict[str, Any]] = [{"type": "task", "id": "t", "prompt": "p"}]
    records += [{"type": "dimension", "name": d} for d in dimensions if d is not None]
    for i, dim in enumerate(dimensions):
        a, b = f"r{i}a", f"r{i}b"
        records += [
            {"type": "response", "id": a, "task": "t", "content": a},
            {"type": "response", "id": b, "task": "t", "content": b},
            {"type": "preference", "a": a, "b": b, "choice": "a", "provider": "synthetic",
             "annotator": "gen", "dimension": dim},
            {"type": "judge_score", "judge": "j", "response": a, "score": 0.9, "dimension": dim},
            {"type": "judge_score", "judge": "j", "response": b, "score": 0.1, "dimension": dim},
        ]  # fmt: skip
    return records


def test_meta_eval_lists_a_judge_without_dimensions_once(
    project: Project, tmp_path: Path, reviewer_user: Any
) -> None:
    from django.test import Client
    from django.urls import reverse

    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", _meta_records([None])))
    out = io.StringIO()
    call_command("meta_eval", project="acme", json=True, stdout=out)
    report = json.loads(out.getvalue())
    assert [(r["judge"], r["dimension"], r["pairs"]) for r in report["rows"]] == [("j", None, 1)]
    assert report["by_dimension"] == []
    text = io.StringIO()
    call_command("meta_eval", project="acme", stdout=text)
    assert len([line for line in text.getvalue().splitlines() if line.startswith("j\t")]) == 1
    client = Client()
    client.force_login(reviewer_user)
    page = client.get(reverse("meta-eval", args=["acme"])).content.decode()
    assert page.count("<tr><td>j</td>") == 1


def test_meta_eval_breaks_a_judge_down_only_over_two_or_more_dimensions(
    project: Project, tmp_path: Path
) -> None:
    from graders.evaluation import meta_eval_rows

    records = _meta_records([None, "tone"])
    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", records))
    report = meta_eval_rows(project=project)
    assert [(r["dimension"], r["pairs"]) for r in report["rows"]] == [(None, 2)]
    assert [(r["dimension"], r["pairs"]) for r in report["by_dimension"]] == [
        ("(none)", 1),
        ("tone", 1),
    ]
    # Filtered to one dimension, the pooled row is that dimension's and is not repeated.
    report = meta_eval_rows(project=project, dimension="tone")
    assert [(r["dimension"], r["pairs"]) for r in report["rows"]] == [("tone", 1)]
    assert report["by_dimension"] == []
