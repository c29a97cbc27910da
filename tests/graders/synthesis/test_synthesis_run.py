"""A synthesis run end to end through its task function against the scripted fake server
(tests/graders/synthesis/scripted.py): what it stores, what it asks, and that a second
delivery or a resume after a budget stop asks nothing twice."""

import json
from collections import Counter
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from graders.models import JudgeEndpoint, SynthesisRun
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.funnel_selectors import synthesis_funnel_json
from graders.synthesis.runs import SynthesisInvalid, synthesis_resume, synthesis_start
from labeling.models import (
    DrawOutcome,
    JobStatus,
    Preference,
    Project,
    Response,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
)
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.scripted import Script, endpoints, start_arguments, synthesis_project

TASKS = ("t1", "t2", "t3", "t4")
# 4 tasks x 2 dimensions = 8 cells. t3's steering is unusable for every cell of t3 (2 cells
# fail after the re-ask: 4 writer calls); judge-2 vetoes the first draw of (t1, warmth), so
# that cell is drawn again and kept on retry 1.
CELLS, FAILED, KEPT = 8, 2, 6
DRAWS = KEPT + 1  # six cells drawn once, one of them twice
WRITER_CALLS = (CELLS - FAILED) + 2 * FAILED
ROLLOUT_CALLS = 2 * DRAWS
FILTER_CALLS = 2 * DRAWS  # each draw: judge-1 agrees, then judge-2 votes (once vetoing)
ALL_CALLS = WRITER_CALLS + ROLLOUT_CALLS + FILTER_CALLS


@pytest.fixture
def scripted(fake_judge: FakeJudgeServer, project: Project) -> Script:
    script = Script(err_on={("t1", "warmth")}, bad_steering={"t3"})
    fake_judge.responder = script
    synthesis_project(project, fake_judge, TASKS)
    return script


def _start(project: Project, **overrides: Any) -> SynthesisRun:
    return synthesis_start(**start_arguments(project, **overrides))


def _stored(run: SynthesisRun) -> dict[str, Any]:
    draws = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis)
    return {
        "cells": SynthesisCell.objects.filter(synthesis=run.synthesis).count(),
        "failed": SynthesisCell.objects.filter(synthesis=run.synthesis).exclude(error="").count(),
        "draws": draws.count(),
        "kept": draws.filter(outcome=DrawOutcome.KEPT).count(),
        "vetoed": draws.filter(outcome=DrawOutcome.VETOED).count(),
        "votes": SynthesisVote.objects.filter(draw__cell__synthesis=run.synthesis).count(),
        "responses": Response.objects.filter(external_id__startswith=f"{run.synthesis}/").count(),
        "labels": Preference.objects.filter(annotator__name=run.synthesis.external_id).count(),
    }


EXPECTED = {
    "cells": CELLS, "failed": FAILED, "draws": DRAWS, "kept": KEPT, "vetoed": 1,
    "votes": FILTER_CALLS, "responses": ROLLOUT_CALLS, "labels": DRAWS,
}  # fmt: skip


def test_a_run_stores_what_the_script_implies(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    run = _start(project)
    assert run.synthesis.cells.count() == CELLS  # planned at start
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert _stored(run) == EXPECTED
    assert fake_judge.call_count == ALL_CALLS
    run.refresh_from_db()
    assert run.usage["calls"] == ALL_CALLS and run.job.status == JobStatus.SUCCEEDED
    assert run.job.done == run.job.total == CELLS
    assert run.job.stage == f"Cells: {CELLS} of {CELLS} finished · {KEPT} kept, {FAILED} failed"
    assert run.job.result == {"cells": CELLS, "kept": KEPT, "failed": FAILED, "waiting": 0}
    # The retried cell: retry 0 vetoed by judge-2 (position 1), retry 1 kept, same steering.
    cell = SynthesisCell.objects.get(synthesis=run.synthesis, task__external_id="t1",
                                     dimension__name="warmth")  # fmt: skip
    first, second = cell.draws.order_by("retry")
    assert (first.outcome, second.outcome) == (DrawOutcome.VETOED, DrawOutcome.KEPT)
    assert [(v.judge, v.agrees) for v in first.votes.all()] == [
        ("judge-1", True),
        ("judge-2", False),
    ]
    assert cell.steering["bad"].startswith("STEER-BAD for t1")
    assert first.low_response_id != second.low_response_id  # fresh rollouts on the retry
    # Each draw's constructed label prefers the higher level's response, whose text says so,
    # the vetoed draw's too (an import of the draws writes the same).
    for draw in (first, second):
        label = Preference.objects.get(response_a=draw.low_response, response_b=draw.high_response)
        assert (label.choice, label.provider, label.dimension.name) == ("b", "synthetic", "warmth")
        assert label.annotator.name == run.synthesis.external_id
    assert f"quality={['bad', 'ok', 'good'].index(cell.high_level)}" in second.high_response.content
    # A failed cell says why; its task's rollouts were never asked for.
    failed = SynthesisCell.objects.filter(synthesis=run.synthesis, task__external_id="t3")
    assert all(c.error.startswith("steering writer:") and not c.draws.exists() for c in failed)
    # Each rollout is a response of its cell's task, with no agent name and no level in its id.
    for response in Response.objects.filter(external_id__startswith=f"{run.synthesis}/"):
        assert response.source_model == ""
        assert not {"bad", "ok", "good"} & set(response.external_id.split("/")[2:])


def test_draw_costs_add_up_to_what_the_run_spent(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    """A draw's cost is its two rollouts and its votes; the writer's steering is the rest."""
    JudgeEndpoint.objects.filter(project=project).exclude(name="writer").update(
        price_in_per_mtok=1_000.0, price_out_per_mtok=3_000.0
    )
    run = _start(project)
    synthesis_run_execute(run_id=run.pk)
    run.refresh_from_db()
    draws = list(SynthesisDraw.objects.filter(cell__synthesis=run.synthesis))
    assert all(d.cost > 0 for d in draws)
    assert sum(d.cost for d in draws) == pytest.approx(run.usage["cost"])
    assert float(run.job.cost) == pytest.approx(run.usage["cost"], abs=1e-6)
    # Each rollout's own cost is kept with its response (the draw adds its votes to both).
    for draw in draws:
        rollouts = [r.metadata["rollout"]["cost"] for r in (draw.low_response, draw.high_response)]
        assert 0 < sum(rollouts) < draw.cost


def test_each_draw_keeps_its_calls_and_tokens_per_stage(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    """The funnel's stage table of a generated run: what the server answered per stage, the
    steering on each cell's first draw (a failed cell, t3, has none to carry it)."""
    run = _start(project)
    synthesis_run_execute(run_id=run.pk)
    draws = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis)
    assert [d.usage["steer"]["calls"] for d in draws if "steer" in d.usage] == [1] * (
        CELLS - FAILED
    )
    assert all(d.retry == 0 for d in draws if "steer" in d.usage)
    spent = scripted.stages(without={"t3"})
    assert {stage: calls for stage, (calls, _) in spent.items()} == {
        "steer": CELLS - FAILED, "rollout": ROLLOUT_CALLS, "filter": FILTER_CALLS,
    }  # fmt: skip
    assert synthesis_funnel_json(synthesis=run.synthesis)["stages"] == [
        {"stage": stage, "calls": calls, "tokens": tokens, "calls_per_kept": calls / KEPT,
         "tokens_per_kept": tokens / KEPT}
        for stage, (calls, tokens) in sorted(spent.items())
    ]  # fmt: skip


def test_a_second_delivery_repeats_nothing(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    run = _start(project)
    synthesis_run_execute(run_id=run.pk)
    calls = fake_judge.call_count
    assert synthesis_run_execute(run_id=run.pk) == {"run": run.pk, "skipped": True}
    # A worker that died holding the lease: the next one takes it and finds nothing to do.
    run.job.__class__.objects.filter(pk=run.job_id).update(
        status=JobStatus.RUNNING, heartbeat_at=timezone.now() - timezone.timedelta(hours=1)
    )
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert fake_judge.call_count == calls
    assert _stored(run) == EXPECTED


def test_a_budget_stop_resumes_without_asking_anything_twice(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    run = _start(project, max_calls=20)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "budget"
    run.refresh_from_db()
    assert run.job.status == JobStatus.BUDGET_SPENT and "budget is spent" in run.job.error
    assert fake_judge.call_count == 20
    stopped = _stored(run)
    assert stopped["kept"] < KEPT
    synthesis_resume(run=run, max_calls=1000)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert _stored(run) == EXPECTED
    # Nothing answered before the stop went to the server again: the total is one clean run's.
    assert fake_judge.call_count == ALL_CALLS


def test_cancel_stops_before_the_next_call_and_resume_goes_on(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    run = _start(project)
    run.job.__class__.objects.filter(pk=run.job_id).update(cancel_requested=True)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "cancelled"
    assert fake_judge.call_count == 0 and _stored(run)["draws"] == 0
    synthesis_resume(run=run)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    assert _stored(run) == EXPECTED


def test_filter_judges_never_read_steering_or_levels(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    run = _start(project)
    synthesis_run_execute(run_id=run.pk)
    filters = [
        r for r in fake_judge.requests
        if "Compare two responses" in "".join(str(m["content"]) for m in r.body["messages"])
    ]  # fmt: skip
    assert len(filters) == FILTER_CALLS
    steering = [t for c in SynthesisCell.objects.exclude(steering={}) for t in c.steering.values()]
    assert steering
    for request in filters:
        prompt = "\n".join(str(m["content"]) for m in request.body["messages"])
        assert "STEER-" not in prompt and "<behaviour>" not in prompt and "REASONING-" not in prompt
        assert not any(text in prompt for text in steering)
        assert not any(f"{low}-{high}" in prompt for low, high in
                       (("bad", "ok"), ("ok", "good"), ("bad", "good")))  # fmt: skip
        assert "agent-a" not in prompt and "agent-b" not in prompt


def test_start_refuses_bad_settings_and_writes_nothing(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    [foreign] = endpoints(project, "judge-1")
    foreign.pk, foreign.project, foreign.name = None, other, "foreign"
    foreign.save()
    cases = [
        ({"judges": []}, "1 to 8 filter judges"),
        ({"judges": [foreign]}, "must be this project's"),
        ({"retries": -1}, "retries R"),
        ({"split": "eval"}, "no tasks in eval"),
        ({"split": "meta", "domain": "airline"}, "not both"),
        ({"mode": "conversation"}, "user-simulator"),
        ({"mode": "webhook"}, "webhook URL"),
        ({"mode": "webhook", "webhook_url": "http://10.1.2.3/hook"}, "private address"),
        ({"max_calls": 0}, "call budget"),
    ]
    for overrides, message in cases:
        with pytest.raises(SynthesisInvalid, match=message):
            _start(project, **overrides)
    assert not SynthesisRun.objects.exists() and not SynthesisCell.objects.exists()


def test_a_conversation_run_stores_trajectories(
    project: Project, fake_judge: FakeJudgeServer, scripted: Script
) -> None:
    [simulator] = endpoints(project, "user-sim")
    run = _start(project, mode="conversation", user_simulator=simulator, turn_cap=3)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    kept = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis, outcome=DrawOutcome.KEPT)
    assert kept.count() == KEPT
    trajectory = kept.first().low_response.messages  # type: ignore[union-attr]
    assert [m["role"] for m in trajectory] == ["user", "assistant", "user"]
    assert trajectory[0]["content"] == "I need a later flight."
    assert trajectory[1]["content"].startswith("quality=")
    # The simulated user never reads the agent's steering.
    to_user = [r for r in fake_judge.requests if r.body["model"] == "user-sim"]
    assert to_user and not any("STEER-" in json.dumps(r.body) for r in to_user)


def test_the_funnel_stages_count_the_calls_the_server_received_per_role(
    project: Project, fake_judge: FakeJudgeServer
) -> None:
    """A generated run's draws carry their calls and tokens per stage, so synthesis_funnel's
    stages table is what each role was asked: the writer's call on each cell's first draw,
    the agents' on their draws, the judges' on the draws they voted on."""
    fake_judge.responder = Script(err_on={("t1", "warmth")})  # every steering usable
    synthesis_project(project, fake_judge, TASKS)
    run = _start(project)
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    roles = {"writer": "steer", "agent-a": "rollout", "agent-b": "rollout",
             "judge-1": "filter", "judge-2": "filter"}  # fmt: skip
    received = Counter(roles[r.body["model"]] for r in fake_judge.requests)
    # 8 cells, one retried: 8 steering calls, 9 draws of two rollouts and two votes each.
    assert received == {"steer": 8, "rollout": 18, "filter": 18}
    out = StringIO()
    call_command("synthesis_funnel", "--project", project.slug, "--json", stdout=out)
    stages = {row["stage"]: row for row in json.loads(out.getvalue())["stages"]}
    assert {stage: row["calls"] for stage, row in stages.items()} == received
    run.refresh_from_db()
    assert sum(row["tokens"] for row in stages.values()) == (
        run.usage["tokens_in"] + run.usage["tokens_out"]
    )
    assert stages["steer"]["calls_per_kept"] == 1.0  # 8 kept pairs
    # The steering call is on each cell's first draw only.
    for draw in SynthesisDraw.objects.filter(cell__synthesis=run.synthesis):
        assert ("steer" in draw.usage) == (draw.retry == 0)
        assert draw.usage["rollout"]["calls"] == 2 and draw.usage["filter"]["calls"] == 2
