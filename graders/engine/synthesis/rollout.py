"""Rollouts: an agent doing a task with a steering instruction added to its system prompt.

A Roller is whatever produces one rollout; the engine has two (below), the Django side adds the
user's own harness (exported jobs, a webhook) implementing the same protocol.

The steering text lives in the agent's system prompt only. A rollout keeps what a reader of the
conversation sees (the user's and the agent's turns), never the system prompt, so nothing
downstream (labelers, filter judges, evaluators) can read the steering from it. The user
simulator never sees the agent's system prompt either.

Each call passes the rollout's seed (ChatRequest.seed), so a retry's new seed is a new sample
and a new cache key rather than the vetoed rollout served again from the judge cache. Agents
should sample (temperature above 0); at temperature 0 a new seed may still give the same text.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from graders.engine.judge import ChatRequest, ChatResult, Message
from graders.engine.programs import DocumentInput, Judge, documents_render
from graders.engine.synthesis.types import Rollout, SynthesisTask, spent_fields

AGENT_SYSTEM = (
    "You are an assistant helping a user with their request. Use the documents below where "
    "they apply; your tools are listed for reference."
)
# What the user simulator writes, alone or at the end of a message, when it is done.
USER_STOP = "###STOP###"
USER_SYSTEM = (
    "You play a user talking to an assistant, to test the assistant. Your goal and what you "
    "know are described below; stay in that role and never reveal that you are simulated. "
    "Write only your next message to the assistant, as the user would: short, natural, giving "
    "details only when asked. Do not invent facts the description does not give you. When "
    "your goal is met, or the conversation cannot usefully go on, end your message with "
    f"{USER_STOP} on its own (a message may be just {USER_STOP})."
)


class Roller(Protocol):
    """Produces one rollout of `task` by `agent` with `system_addition` (the wrapped steering
    instruction, prompts.steering_wrap) appended to the agent's system prompt. `seed` tells
    attempts apart: the same (task, addition, agent, seed) may be answered from a cache, a new
    seed asks for a fresh rollout. A failed rollout raises RolloutFailed with the reason; one
    that will come later (from a harness) raises RolloutDeferred."""

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout: ...


class RolloutFailed(Exception):
    """A rollout could not be produced; the message says why (it becomes the cell's error)."""


class RolloutDeferred(Exception):
    """The rollout is not to be had yet (the user's harness sends it later): the cell stops
    here without an outcome. Nothing is recorded as failed and its draw stays open, so a later
    pass, once the rollout is stored, goes on from there."""


class SingleResponseRoller:
    """The agent answers the task prompt in one message, with the task's documents in its
    system prompt and the steering appended after them."""

    def __init__(self, judges_by_agent: Mapping[str, Judge]) -> None:
        self._agents = judges_by_agent

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout:
        judge = _agent_judge(self._agents, agent)
        messages = (
            {"role": "system", "content": agent_system(task, system_addition)},
            {"role": "user", "content": task.prompt},
        )
        spent = _Spending()
        text = await spent.ask(judge, ChatRequest(messages, None, f"rollout {agent}", seed=seed))
        return spent.rollout(content=text)


class ConversationRoller:
    """A simulated user (its own endpoint) plays the task's user-side instructions against the
    agent, turn by turn, until it says it is done (USER_STOP) or the agent has answered
    `turn_cap` times. The user opens. The trajectory holds the user and assistant turns."""

    def __init__(self, agents: Mapping[str, Judge], user: Judge, turn_cap: int) -> None:
        if turn_cap < 1:
            raise ValueError("turn_cap must be at least 1")
        self._agents = agents
        self._user = user
        self._turn_cap = turn_cap

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout:
        judge = _agent_judge(self._agents, agent)
        agent_system_message: Message = {
            "role": "system",
            "content": agent_system(task, system_addition),
        }
        user_system_message: Message = {"role": "system", "content": user_system(task)}
        turns: list[Message] = []
        spent = _Spending()
        for turn in range(1, self._turn_cap + 1):
            said = await spent.ask(
                self._user,
                ChatRequest(
                    (user_system_message, *_as_seen_by_user(turns)),
                    None,
                    f"user simulator turn {turn}",
                    seed=seed,
                ),
            )
            message, done = user_stop_split(said)
            if message:
                turns.append({"role": "user", "content": message})
            if done or not message:
                break
            reply = await spent.ask(
                judge,
                ChatRequest(
                    (agent_system_message, *turns), None, f"rollout {agent} turn {turn}", seed=seed
                ),
            )
            turns.append({"role": "assistant", "content": reply})
        if not any(message["role"] == "assistant" for message in turns):
            raise RolloutFailed("the simulated user stopped before the agent said anything")
        return spent.rollout(messages=[dict(message) for message in turns])


def agent_system(task: SynthesisTask, system_addition: str) -> str:
    """The agent's system prompt: its role, the task's documents and tools, then the steering."""
    documents = documents_render([DocumentInput(t, t, text) for t, text in task.documents])
    tools = ", ".join(task.tool_names) or "(none)"
    return f"{AGENT_SYSTEM}\n\nDocuments:\n{documents}\n\nTools: {tools}\n\n{system_addition}"


def user_system(task: SynthesisTask) -> str:
    """The user simulator's system prompt: its role and the task's user side."""
    return f"{USER_SYSTEM}\n\nYour situation and goal:\n{task.instructions.strip() or task.prompt}"


def user_stop_split(text: str) -> tuple[str, bool]:
    """The simulated user's message without the stop token, and whether it said it is done."""
    done = USER_STOP in text
    return text.replace(USER_STOP, "").strip(), done


def _as_seen_by_user(turns: list[Message]) -> list[Message]:
    """The conversation from the simulator's side: its own turns are the assistant's. Before
    anything was said, one user line asks it to open."""
    if not turns:
        return [{"role": "user", "content": "(The assistant is ready. Write your first message.)"}]
    flipped = {"user": "assistant", "assistant": "user"}
    return [{"role": flipped[m["role"]], "content": m["content"]} for m in turns]


def _agent_judge(agents: Mapping[str, Judge], agent: str) -> Judge:
    try:
        return agents[agent]
    except KeyError:
        known = ", ".join(sorted(agents)) or "none"
        raise ValueError(f"no endpoint for agent {agent!r} (agents: {known})") from None


@dataclass
class _Spending:
    """The calls one rollout made and what they cost."""

    results: list[ChatResult] = field(default_factory=list)

    async def ask(self, judge: Judge, request: ChatRequest) -> str:
        result = await judge.complete(request)
        self.results.append(result)
        if result.error is not None or result.text is None:
            raise RolloutFailed(f"{request.name}: {result.error or 'no content'}")
        return result.text

    def rollout(
        self, *, content: str | None = None, messages: list[dict[str, Any]] | None = None
    ) -> Rollout:
        return Rollout(content=content, messages=messages, **spent_fields(self.results))
