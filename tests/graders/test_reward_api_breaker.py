"""The reward API with a dead judge: once the endpoint's circuit breaker is open
(graders/engine/breaker.py), both endpoints answer at once, each response a failed grade with
the reason (reward null in /reward, 0.0 and grader_failed 1.0 in /get_reward), and nothing
is sent to the judge until the probe; the probe's answer closes the breaker. The fake judge
really goes down (its port refuses connections) and comes back; time is a fake clock in the
process's breakers, so "nothing sent" is counted at the judge, not timed."""

from typing import Any

import pytest
from django.test import Client

from graders.engine import judge as judge_module
from graders.engine.breaker import BreakerPolicy
from graders.models import JudgeEndpoint, Metagrader, RewardUsage
from tests.fakes.clock import FakeClock, breakers_on_fake_clock
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.test_reward_api import (  # noqa: F401 (fixtures)
    bearer,
    group,
    judge,
    post,
    rate_counts_cleared,
    reward_project,
    reward_url,
    scalar,
    token,
)

pytestmark = pytest.mark.django_db

COOLDOWN_S = 15


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Fresh breakers on a fake clock; three failures open one (JUDGE_BREAKER_FAILURES)."""
    fake = breakers_on_fake_clock(monkeypatch)
    monkeypatch.setenv("JUDGE_BREAKER_FAILURES", "3")
    monkeypatch.setenv("JUDGE_BREAKER_COOLDOWN_S", str(COOLDOWN_S))
    return fake


def rewards(client: Client, grader: Metagrader, raw_token: str, task: str) -> dict[str, Any]:
    body = {"task_id": task, "responses": group(task)}
    answer = post(client, reward_url(grader), body, bearer(raw_token))
    assert answer.status_code == 200, answer.json()
    answered: dict[str, Any] = answer.json()
    return answered


def test_a_dead_judge_is_answered_at_once_until_the_probe_brings_it_back(
    client: Client,
    clock: FakeClock,
    scalar: Metagrader,  # noqa: F811 (the fixtures imported above)
    token: str,  # noqa: F811
    judge: JudgeEndpoint,  # noqa: F811
    fake_judge: FakeJudgeServer,
) -> None:
    assert rewards(client, scalar, token, "t0")["rewards"] == [0.9, 0.5, 0.1]
    calls = fake_judge.call_count
    breaker = judge_module.BREAKERS.get(judge.base_url, BreakerPolicy())
    unreachable = f"judge at {fake_judge.host_port} unreachable: "

    fake_judge.go_down()
    # The first request pays for the failures that open the breaker, and no more retries.
    down = rewards(client, scalar, token, "t1")
    assert down["rewards"] == [None, None, None]
    assert all(unreachable in row["error"] for row in down["results"])
    assert breaker.state == "open"

    fake_judge.come_back()
    clock.now += COOLDOWN_S - 1
    rejected = breaker.rejected
    still_open = rewards(client, scalar, token, "t1")
    # The last failure: a refusal, or a kept-alive connection the judge dropped.
    last = breaker._last_failure
    assert last in ("ConnectError: could not connect", "ReadError: the connection failed")
    assert [row["error"] for row in still_open["results"]] == [
        f"step grade: {unreachable}{last}; retrying in 1 s"
    ] * 3
    assert breaker.rejected == rejected + 3
    assert fake_judge.call_count == calls  # the judge is back, but nothing went while open

    # OpenRLHF's protocol: the failure reward and the failure flag, at once.
    prompts = ["Q: cap?\nA:"] * 2
    answer = post(client, reward_url(scalar, name="api-get-reward"), {
        "query": [prompt + " GOOD" for prompt in prompts], "prompts": prompts}, bearer(token))  # fmt: skip
    assert answer.json()["rewards"] == [0.0, 0.0]
    assert answer.json()["extra_logs"] == {"grader_failed": [1.0, 1.0]}
    assert fake_judge.call_count == calls

    clock.now += 1  # the cool-down is over: one call probes, the others still fail at once
    probed = rewards(client, scalar, token, "t1")
    assert fake_judge.call_count == calls + 1
    assert sum(reward is not None for reward in probed["rewards"]) == 1
    assert sum("a probe is under way" in (row["error"] or "") for row in probed["results"]) == 2
    assert breaker.state == "closed"

    assert rewards(client, scalar, token, "t2")["rewards"] == [0.9, 0.5, 0.1]
    assert fake_judge.call_count == calls + 4
    # Failed answers are still counted as served.
    assert RewardUsage.objects.get(metagrader=scalar).requests == 6
