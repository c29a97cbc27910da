"""The built-in rollers: one response, and a conversation with a simulated user."""

import asyncio
from collections.abc import Iterator

import pytest

from graders.engine.judge import ChatRequest, ChatResult
from graders.engine.synthesis.prompts import steering_wrap
from graders.engine.synthesis.rollout import (
    USER_STOP,
    ConversationRoller,
    RolloutFailed,
    SingleResponseRoller,
)
from graders.engine.synthesis.types import SynthesisTask
from tests.graders.engine.synthesis.helpers import FakeJudge

TASK = SynthesisTask(
    "air-3",
    "airline",
    prompt="I want to cancel my trip.",
    instructions="You are Ana; you want a refund.",
    documents=(("Policy", "Refunds within 24 hours."),),
    tool_names=("cancel_reservation",),
)
ADDITION = steering_wrap("Be cold and dismissive.")


def _lines(*texts: str) -> Iterator[str]:
    return iter(texts)


def test_single_response_answers_the_prompt_with_documents_and_steering() -> None:
    agent = FakeJudge(lambda request: "Fine, cancelled.", cost=0.02)
    rollout = asyncio.run(
        SingleResponseRoller({"m1": agent}).roll(TASK, ADDITION, agent="m1", seed=42)
    )
    [request] = agent.requests
    system, user = request.messages
    assert system["role"] == "system" and system["content"].endswith(ADDITION)
    assert (
        "Refunds within 24 hours." in system["content"]
        and "cancel_reservation" in system["content"]
    )
    assert user == {"role": "user", "content": TASK.prompt}
    assert (request.seed, request.schema) == (42, None)
    assert (rollout.content, rollout.messages, rollout.calls, rollout.cost) == (
        "Fine, cancelled.",
        None,
        1,
        0.02,
    )
    assert (rollout.tokens_in, rollout.tokens_out) == (10, 5)


def test_a_failed_agent_call_fails_the_rollout_with_its_reason() -> None:
    class Failing:
        async def complete(self, request: ChatRequest) -> ChatResult:
            return ChatResult(None, None, "HTTP 500 from the judge")

    with pytest.raises(RolloutFailed, match="rollout m1: HTTP 500 from the judge"):
        asyncio.run(
            SingleResponseRoller({"m1": Failing()}).roll(TASK, ADDITION, agent="m1", seed=0)
        )
    with pytest.raises(ValueError, match="no endpoint for agent 'm9' \\(agents: m1\\)"):
        asyncio.run(
            SingleResponseRoller({"m1": Failing()}).roll(TASK, ADDITION, agent="m9", seed=0)
        )


def test_conversation_runs_until_the_user_says_it_is_done() -> None:
    said = _lines("Hi, I need to cancel.", f"Thanks. {USER_STOP}")
    user = FakeJudge(lambda request: next(said))
    replies = _lines("Why?")
    agent = FakeJudge(lambda request: next(replies))
    rollout = asyncio.run(
        ConversationRoller({"m1": agent}, user, turn_cap=5).roll(TASK, ADDITION, agent="m1", seed=7)
    )
    assert rollout.messages == [
        {"role": "user", "content": "Hi, I need to cancel."},
        {"role": "assistant", "content": "Why?"},
        {"role": "user", "content": "Thanks."},
    ]
    assert rollout.content is None and rollout.calls == 3
    # The agent saw its system prompt (with the steering) and the conversation so far.
    [agent_request] = agent.requests
    assert agent_request.messages[0]["content"].endswith(ADDITION)
    assert agent_request.messages[1:] == ({"role": "user", "content": "Hi, I need to cancel."},)
    # The simulator plays the user side, sees its own turns as its own, and never the steering.
    first, second = user.requests
    assert "You are Ana; you want a refund." in first.messages[0]["content"]
    assert second.messages[1:] == (
        {"role": "assistant", "content": "Hi, I need to cancel."},
        {"role": "user", "content": "Why?"},
    )
    for request in user.requests:
        assert all(
            "Be cold" not in m["content"] and "<behaviour>" not in m["content"]
            for m in request.messages
        )
    assert {request.seed for request in [*user.requests, *agent.requests]} == {7}


def test_conversation_stops_at_the_turn_cap() -> None:
    user = FakeJudge(lambda request: "And another thing.")
    agent = FakeJudge(lambda request: "Noted.")
    rollout = asyncio.run(
        ConversationRoller({"m1": agent}, user, turn_cap=2).roll(TASK, ADDITION, agent="m1", seed=0)
    )
    assert [m["role"] for m in rollout.messages or []] == ["user", "assistant", "user", "assistant"]
    assert (len(user.requests), len(agent.requests), rollout.calls) == (2, 2, 4)


def test_a_user_who_stops_before_the_agent_speaks_fails_the_rollout() -> None:
    user = FakeJudge(lambda request: USER_STOP)
    roller = ConversationRoller({"m1": FakeJudge(lambda request: "hi")}, user, turn_cap=3)
    with pytest.raises(RolloutFailed, match="stopped before the agent said anything"):
        asyncio.run(roller.roll(TASK, ADDITION, agent="m1", seed=0))
    with pytest.raises(ValueError, match="turn_cap must be at least 1"):
        ConversationRoller({}, user, turn_cap=0)
