"""The evaluator sweep against the fake judge: each kept response scored alone, n runs that are
n distinct requests, JudgeScore rows the meta-evaluation ranks, failures kept as failures,
budget stops and resumes, cancel, idempotent reruns, and blinding as the judge receives it."""

import io
import json
import re
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from graders.engine.baseline import baseline_program
from graders.evaluation import meta_eval_rows
from graders.models import JudgeEndpoint, SynthesisSweep
from graders.services import metagrader_register
from graders.synthesis.sweep import SweepInvalid, sweep_resume, sweep_start, synthesis_labels_ensure
from graders.synthesis.sweep_run import eta_text, sweep_execute, sweep_units
from labeling.models import DrawOutcome, Job, JobStatus, JudgeScore, Preference, Project
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis_rows import (
    AGENT_MARK,
    STEERING_MARK,
    VOTE_MARK,
    DrawSpec,
    synthesis_rows,
)

KEPT, VETOED = DrawOutcome.KEPT, DrawOutcome.VETOED


def _prompt(body: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in body["messages"])


def scoring_responder(body: dict[str, Any]) -> str:
    """The higher side scores higher; each run (seed) adds 0.01, so runs differ. The evaluator
    prompt's schema has reasoning and score; the baseline scalar grader's has score only."""
    prompt = _prompt(body)
    base = 0.8 if "HIGHSIDE" in prompt else 0.3
    score = round(base + 0.01 * body.get("seed", 0), 4)
    properties = body["response_format"]["json_schema"]["schema"]["properties"]
    if "reasoning" in properties:
        return json.dumps({"reasoning": "it reads warmly", "score": score})
    return json.dumps({"score": score})


@pytest.fixture
def evaluator(project: Project, fake_judge: FakeJudgeServer) -> JudgeEndpoint:
    fake_judge.responder = scoring_responder
    return JudgeEndpoint.objects.create(
        project=project,
        name="small",
        base_url=fake_judge.base_url,
        model="tiny-1b",
        max_concurrency=4,
        is_default=True,
    )


def _start(project: Project, judges: list[JudgeEndpoint], **options: Any) -> SynthesisSweep:
    synthesis = project.syntheses.get()
    return sweep_start(synthesis=synthesis, judges=judges, **options)


def test_each_kept_response_is_scored_alone_in_n_runs_and_meta_eval_ranks_the_judge(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec(), DrawSpec(trajectory=True), DrawSpec(VETOED)])
    sweep = _start(project, [evaluator])
    outcome = sweep_execute(sweep_id=sweep.pk)
    assert outcome["status"] == "succeeded"
    # 2 kept pairs x 2 responses x 3 runs; the vetoed draw is not scored.
    assert fake_judge.call_count == 12
    assert sorted(r.body["seed"] for r in fake_judge.requests) == [0] * 4 + [1] * 4 + [2] * 4
    scores = JudgeScore.objects.filter(judge="small (tiny-1b)")
    assert scores.count() == 12
    assert set(scores.values_list("dimension__name", flat=True)) == {"friendliness"}
    high = scores.filter(response__external_id="padme-test/high-0").order_by("run")
    assert list(high.values_list("score", flat=True)) == [0.8, 0.81, 0.82]
    assert not scores.filter(response__external_id__endswith="-2").exists()
    (row,) = meta_eval_rows(project=project)["rows"]
    assert (row["judge"], row["pairs"], row["runs"], row["accuracy"]) == (
        "small (tiny-1b)",
        2,
        3,
        1.0,
    )
    assert row["score_sd"] == pytest.approx(0.01)
    job = Job.objects.get(pk=sweep.job_id)
    assert (job.status, job.done, job.total) == (JobStatus.SUCCEEDED, 12, 12)
    assert job.stage == "Scoring responses · 12 of 12"  # nothing left: no time estimate
    assert job.result["scored_now"] == 12 and job.result["failed_now"] == {}
    assert SynthesisSweep.objects.get(pk=sweep.pk).usage["calls"] == 12


def test_the_kept_pairs_get_their_synthetic_label_once(
    project: Project, evaluator: JudgeEndpoint
) -> None:
    synthesis = synthesis_rows(project, [DrawSpec(), DrawSpec(VETOED)])
    _start(project, [evaluator])
    (label,) = Preference.objects.filter(provider="synthetic")
    assert (label.response_b.external_id, label.choice, label.annotator.name) == (
        "padme-test/high-0", "b", "padme-test",
    )  # fmt: skip
    assert synthesis_labels_ensure(synthesis=synthesis) == 0


def test_a_rerun_and_a_second_sweep_write_no_duplicate_and_call_nothing_again(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec(), DrawSpec()])
    first = _start(project, [evaluator], runs=2)
    sweep_execute(sweep_id=first.pk)
    assert sweep_execute(sweep_id=first.pk) == {"sweep": first.pk, "skipped": True}
    assert fake_judge.call_count == 8
    again = _start(project, [evaluator], runs=2)
    sweep_execute(sweep_id=again.pk)
    assert fake_judge.call_count == 8  # every unit already has its row
    more = _start(project, [evaluator], runs=3)
    assert len(sweep_units(more)[0]) == 4  # only run 2 is left
    sweep_execute(sweep_id=more.pk)
    assert fake_judge.call_count == 12
    assert JudgeScore.objects.count() == 12
    assert Job.objects.get(pk=more.job_id).total == 12


def test_failed_and_out_of_range_answers_are_failures_never_clamped(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec()])

    def responder(body: dict[str, Any]) -> str:
        if "HIGHSIDE" in _prompt(body):
            return json.dumps({"reasoning": "superb", "score": 1.4})
        return "Three out of ten."

    fake_judge.responder = responder
    sweep = _start(project, [evaluator], runs=1)
    sweep_execute(sweep_id=sweep.pk)
    assert list(JudgeScore.objects.values_list("score", flat=True)) == [None, None]
    result = Job.objects.get(pk=sweep.job_id).result
    assert result["failed_now"] == {"small (tiny-1b)": 2}
    assert result["failure_examples"]["small (tiny-1b)"] in (
        "score: 1.4 is above the maximum 1.0",
        "no JSON object in the answer",
    )
    (row,) = meta_eval_rows(project=project)["rows"]
    assert (row["accuracy"], row["failed_runs"], row["leniency"]) == (0.0, 1, None)


def test_a_scalar_grader_is_swept_by_its_own_program(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec(), DrawSpec(trajectory=True)])
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    sweep = _start(project, [evaluator], graders=[grader], runs=2)
    sweep_execute(sweep_id=sweep.pk)
    name = f"baseline-scalar #{grader.pk} on small (tiny-1b)"
    assert [e["name"] for e in sweep.evaluators] == ["small (tiny-1b)", name]
    grader_scores = JudgeScore.objects.filter(judge=name)
    assert grader_scores.count() == 8
    assert set(grader_scores.values_list("score", flat=True)) == {0.3, 0.31, 0.8, 0.81}
    judges = {row["judge"] for row in meta_eval_rows(project=project)["rows"]}
    assert judges == {"small (tiny-1b)", name}


def test_a_budget_stop_is_resumed_with_a_higher_budget_and_nothing_asked_twice(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec(), DrawSpec()])
    sweep = _start(project, [evaluator], runs=2, max_calls=3)
    assert sweep_execute(sweep_id=sweep.pk)["status"] == "budget"
    job = Job.objects.get(pk=sweep.job_id)
    assert job.status == JobStatus.BUDGET_SPENT and "3 judge calls" in job.error
    assert (JudgeScore.objects.count(), fake_judge.call_count) == (3, 3)
    sweep_resume(sweep=sweep, max_calls=20)
    assert sweep_execute(sweep_id=sweep.pk)["status"] == "succeeded"
    assert (JudgeScore.objects.count(), fake_judge.call_count) == (8, 8)
    assert SynthesisSweep.objects.get(pk=sweep.pk).usage["calls"] == 8


def test_a_cancelled_sweep_sends_nothing_more_and_resumes(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec()])
    sweep = _start(project, [evaluator], runs=1)
    Job.objects.filter(pk=sweep.job_id).update(cancel_requested=True)  # asked while queued
    assert sweep_execute(sweep_id=sweep.pk)["status"] == "cancelled"
    assert (fake_judge.call_count, JudgeScore.objects.count()) == (0, 0)
    assert "scores so far are kept" in Job.objects.get(pk=sweep.job_id).error
    sweep_resume(sweep=sweep)
    assert sweep_execute(sweep_id=sweep.pk)["status"] == "succeeded"
    assert JudgeScore.objects.count() == 2


def test_the_evaluator_sees_one_response_and_nothing_of_its_origin(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec(), DrawSpec(trajectory=True), DrawSpec(trajectory=True)])
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    sweep_execute(sweep_id=_start(project, [evaluator], graders=[grader], runs=1).pk)
    assert len(fake_judge.requests) == 12
    for received in fake_judge.requests:
        prompt = _prompt(received.body)
        for hidden in (STEERING_MARK, VOTE_MARK, AGENT_MARK, "padme-test", "judge1"):
            assert hidden not in prompt
        assert not re.search(r"\b(bad|ok|good|low|high)\b", prompt, re.IGNORECASE)
        # One response, never its pair: exactly one side's text.
        assert len(re.findall(r"(LOW|HIGH)SIDE \d", prompt)) == 1
    evaluated = [r for r in fake_judge.requests if "DIMENSION:" in _prompt(r.body)]
    assert len(evaluated) == 6 and all(
        "Changes cost 50 dollars." in _prompt(r.body) for r in evaluated
    )


def test_a_sweep_that_cannot_start_says_why_and_writes_nothing(
    project: Project, evaluator: JudgeEndpoint
) -> None:
    synthesis_rows(project, [DrawSpec(VETOED)])
    synthesis = project.syntheses.get()
    pairwise = metagrader_register(
        project=project, program=baseline_program("pairwise").to_json(), origin="baseline"
    )
    other = Project.objects.create(slug="other", name="Other")
    foreign = JudgeEndpoint.objects.create(
        project=other, name="x", base_url=evaluator.base_url, model="m"
    )
    cases = [
        ({}, "choose at least one judge endpoint or scalar grader"),
        ({"judges": [evaluator], "runs": 0}, "runs must be from 1 to 20, not 0"),
        ({"judges": [foreign]}, "not in project 'acme': x (m)"),
        ({"graders": [pairwise]}, "only scalar graders score one response alone"),
        ({"judges": [evaluator, evaluator]}, "an evaluator is listed twice"),
        ({"judges": [evaluator]}, "synthesis 'padme-test' has no kept pair with responses"),
    ]
    for options, message in cases:
        with pytest.raises(SweepInvalid, match=re.escape(message)):
            sweep_start(synthesis=synthesis, **options)
    assert not SynthesisSweep.objects.exists() and not Job.objects.exists()
    assert not Preference.objects.exists()


def test_the_command_starts_a_sweep_and_refuses_bad_input(
    project: Project, evaluator: JudgeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graders import tasks

    synthesis_rows(project, [DrawSpec()])
    # --wait follows the job; the worker is this process.
    monkeypatch.setattr(
        tasks.synthesis_sweep_task, "delay_on_commit", lambda pk: sweep_execute(sweep_id=pk)
    )
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "synthesis_sweep", project="acme", synthesis="padme-test", judge=[evaluator.pk],
        runs=2, max_calls=50, wait=True, stdout=out, stderr=err,
    )  # fmt: skip
    sweep = SynthesisSweep.objects.get()
    assert f"Sweep {sweep.pk} queued as job {sweep.job_id}" in out.getvalue()
    assert "succeeded: 4/4 scores" in err.getvalue()
    assert (sweep.runs, sweep.max_calls, JudgeScore.objects.count()) == (2, 50, 4)
    bad = [
        ({"synthesis": "nope", "judge": [evaluator.pk]}, "synthesis 'nope' is not in project 'acme'"),
        ({"synthesis": "padme-test", "judge": [999]}, "judge endpoint 999 is not in project 'acme'"),
        ({"synthesis": "padme-test", "grader": [999]}, "grader 999 is not in project 'acme'"),
        ({"synthesis": "padme-test"}, "give --judge ENDPOINT_ID ... or --grader ID ..."),
        ({"synthesis": "padme-test", "judge": [evaluator.pk], "runs": 99}, "runs must be from 1 to 20"),
    ]  # fmt: skip
    for options, message in bad:
        with pytest.raises(CommandError, match=re.escape(message)):
            call_command("synthesis_sweep", project="acme", **options)


@pytest.mark.parametrize(
    ("done", "left", "elapsed", "text"),
    [(0, 10, 5.0, ""), (10, 0, 5.0, ""), (10, 10, 5.0, "about 5 s left"),
     (10, 300, 5.0, "about 2 min left"), (1, 10_000, 2.0, "about 5.6 h left")],
)  # fmt: skip
def test_eta_text(done: int, left: int, elapsed: float, text: str) -> None:
    assert eta_text(done, left, elapsed) == text


def test_a_judge_and_a_grader_on_one_endpoint_share_its_concurrency_limit(
    project: Project, evaluator: JudgeEndpoint, fake_judge: FakeJudgeServer
) -> None:
    synthesis_rows(project, [DrawSpec() for _ in range(4)])
    JudgeEndpoint.objects.filter(pk=evaluator.pk).update(max_concurrency=2)
    evaluator.refresh_from_db()
    fake_judge.latency_s = 0.05
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    sweep_execute(sweep_id=_start(project, [evaluator], graders=[grader], runs=1).pk)
    assert fake_judge.call_count == 16  # 8 responses x 2 evaluators
    assert fake_judge.max_in_flight == 2


def test_the_command_resumes_a_stopped_sweep_with_a_raised_budget(
    project: Project, evaluator: JudgeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graders import tasks

    synthesis_rows(project, [DrawSpec()])
    sweep = _start(project, [evaluator], runs=2, max_calls=1)
    sweep_execute(sweep_id=sweep.pk)
    monkeypatch.setattr(
        tasks.synthesis_sweep_task, "delay_on_commit", lambda pk: sweep_execute(sweep_id=pk)
    )
    for options, message in [
        ({"resume": 999}, "sweep 999 is not in project 'acme'"),
        ({"resume": sweep.pk, "judge": [evaluator.pk]}, "leave out --judge, --grader"),
        ({"resume": sweep.pk}, "--max-calls: The limit of 1 is spent"),
    ]:
        with pytest.raises(CommandError, match=re.escape(message)):
            call_command("synthesis_sweep", project="acme", **options)
    out = io.StringIO()
    call_command("synthesis_sweep", project="acme", resume=sweep.pk, max_calls=10, wait=True,
                 stdout=out, stderr=io.StringIO())  # fmt: skip
    assert f"Sweep {sweep.pk} resumed as job {sweep.job_id}." in out.getvalue()
    assert JudgeScore.objects.count() == 4
    with pytest.raises(CommandError, match="is succeeded: only a stopped sweep"):
        call_command("synthesis_sweep", project="acme", resume=sweep.pk)
