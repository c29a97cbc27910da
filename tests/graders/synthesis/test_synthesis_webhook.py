"""Webhook rollouts: each job POSTed to the run's URL through the egress policy, with no secret
in it; the trajectory it returns stored as the rollout; a job that keeps failing, answers too
much or too late fails its cell with a clear reason while the other cells go on."""

import asyncio
import json
from typing import Any

import pytest

from graders.engine.egress import EgressPolicy
from graders.engine.judge import Usage
from graders.engine.synthesis.rollout import RolloutFailed
from graders.engine.synthesis.types import SynthesisTask
from graders.synthesis.execute import synthesis_run_execute
from graders.synthesis.runs import synthesis_start
from graders.synthesis.webhook import WebhookRoller, trajectory_from
from labeling.models import DrawOutcome, Project, SynthesisCell, SynthesisDraw
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.synthesis.hook import Hook
from tests.graders.synthesis.scripted import Script, start_arguments, synthesis_project

FAILING = "airline.clarity.t2"


def test_webhook_rollouts_store_trajectories_and_fail_one_job_clearly(
    project: Project, fake_judge: FakeJudgeServer, hook: Hook
) -> None:
    fake_judge.responder = Script()
    hook.fails = lambda body: body["cell"] == FAILING
    synthesis_project(project, fake_judge, ("t1", "t2", "t3"))
    run = synthesis_start(**start_arguments(project, mode="webhook", webhook_url=hook.url))
    assert synthesis_run_execute(run_id=run.pk)["status"] == "succeeded"
    # 6 cells: 5 rolled twice; the failing one tried 3 times per level (2 retries each).
    assert len(hook.bodies) == 5 * 2 + 2 * 3
    failed = SynthesisCell.objects.get(synthesis=run.synthesis, external_id=FAILING)
    assert failed.error.startswith("rollout ")
    assert f"rollout webhook, job {FAILING}" in failed.error
    assert "gave up after 3 attempts; last: HTTP 500" in failed.error
    assert "SECRET-INTERNAL-DETAIL" not in failed.error
    draw = SynthesisDraw.objects.get(cell=failed)
    assert draw.outcome == DrawOutcome.FAILED and draw.error == failed.error
    kept = SynthesisDraw.objects.filter(cell__synthesis=run.synthesis, outcome=DrawOutcome.KEPT)
    assert kept.count() == 5
    response = kept.first().high_response  # type: ignore[union-attr]
    assert response.messages[-1]["content"].endswith("via hook") and response.content == ""
    assert all(d.cost == pytest.approx(1.0) for d in kept)  # two rollouts at $0.5
    # A harness reports no tokens: the rollout stage counts its calls, its tokens unknown.
    assert all(d.usage["rollout"] == {"calls": 2} and d.usage["filter"]["tokens"] > 0 for d in kept)
    # What the webhook was sent: the job and the task, no key, no endpoint URL.
    body = hook.bodies[0]
    assert set(body) == {"synthesis", "cell", "task", "level", "attempt", "agent",
                         "system_addition", "seed"}  # fmt: skip
    assert body["system_addition"].startswith("<behaviour>") and body["attempt"] == 0
    assert all("authorization" not in h for h in hook.headers)
    assert fake_judge.base_url not in json.dumps(hook.bodies)
    run.refresh_from_db()
    # Judge calls (6 steering, 10 votes) and the webhook's 16 posts; the hook's reported cost.
    assert run.usage["calls"] == 16 + len(hook.bodies) and run.usage["cost"] == pytest.approx(5.0)


def _roller(run_url: str, **options: Any) -> WebhookRoller:
    class _Run:
        webhook_url = run_url
        retries = 0
        seed = 0

        class synthesis:
            external_id = "s"

    class _Jobs:
        def resolve(self, *args: Any) -> Any:
            from graders.synthesis.rollers import RolloutJob

            return RolloutJob("c", "t", "bad", 0, "agent", "<behaviour>x</behaviour>")

        def release(self, job: Any) -> None:
            pass

    roller = WebhookRoller(_Run(), None, usage=Usage(), **options)  # type: ignore[arg-type]
    roller.jobs = _Jobs()  # type: ignore[assignment]
    return roller


async def _roll(roller: WebhookRoller) -> Any:
    async with roller:
        return await roller.roll(SynthesisTask("t", "d", "p"), "x", agent="agent", seed=1)


@pytest.mark.parametrize(
    ("mode", "options", "reason"),
    [
        ("huge", {"max_bytes": 1000}, "over the limit of 1000 bytes"),
        ("slow", {"timeout_s": 0.2, "retries": 1, "backoff_s": 0}, "no answer within 0.2 s"),
    ],
)
def test_a_job_too_large_or_too_slow_fails_with_its_reason(
    hook: Hook, mode: str, options: dict[str, Any], reason: str, settings: Any
) -> None:
    hook.mode = mode
    roller = _roller(hook.url, **options)
    with pytest.raises(RolloutFailed, match=reason):
        asyncio.run(_roll(roller))


def test_the_egress_policy_refuses_a_private_webhook(hook: Hook) -> None:
    roller = _roller(hook.url, policy=EgressPolicy.parse())
    with pytest.raises(Exception, match="JUDGE_PRIVATE_HOSTS"):
        asyncio.run(_roll(roller))
    assert hook.bodies == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({}, "content: give exactly one of"),
        ({"content": 3}, "content: text of at most"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"content": "ok", "cost": -1}, "cost: a number of dollars"),
    ],
)
def test_a_malformed_trajectory_names_its_field(answer: dict[str, Any], reason: str) -> None:
    with pytest.raises(RolloutFailed, match=reason):
        trajectory_from(answer)
