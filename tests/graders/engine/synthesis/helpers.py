"""Fakes for the synthesis engine tests: an in-memory CellStore, scripted judges and a roller
whose answers follow the steering it was given."""

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graders.engine.judge import ChatRequest, ChatResult
from graders.engine.slots import call_priority
from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.rollout import RolloutDeferred, RolloutFailed
from graders.engine.synthesis.types import Rollout, Steering, SynthesisTask, Vote

STEERING = Steering(
    "why the levels differ", "STEER-BAD be cold", "STEER-OK be plain", "STEER-GOOD be warm"
)
STEER_ANSWER = json.dumps(STEERING.as_dict())
QUALITY = {"STEER-BAD": 0, "STEER-OK": 1, "STEER-GOOD": 2}
_FENCED = re.compile(r"<<<DATA-(\w+)>>>\n(.*?)\n<<<END-DATA-\1>>>", re.DOTALL)


def fenced(request: ChatRequest) -> list[str]:
    """The fenced data blocks of a request's last message, in order (a filter or steering
    request's first one is the dimension's name)."""
    return [text for _, text in _FENCED.findall(request.messages[-1]["content"])]


def slots(request: ChatRequest) -> tuple[str, str]:
    """The texts a filter request shows as response A and response B."""
    blocks = fenced(request)
    return blocks[-2], blocks[-1]


def quality(text: str) -> int:
    """The level a FakeRoller rollout was steered to, read back from its text."""
    return int(re.search(r"quality=(\d)", text).group(1))  # type: ignore[union-attr]


def verdict(choice: str) -> str:
    return json.dumps({"reasoning": "compared", "answer": choice})


def right_answer(request: ChatRequest) -> str:
    """What a judge that always sees the constructed difference answers."""
    a, b = slots(request)
    return verdict("A" if quality(a) > quality(b) else "B")


def wrong_answer(request: ChatRequest) -> str:
    a, b = slots(request)
    return verdict("B" if quality(a) > quality(b) else "A")


@dataclass
class FakeJudge:
    """A Judge whose answer is `answer(request)`; records every request. `gate`, when set,
    is awaited before answering requests for which `held(request)` is true."""

    answer: Callable[[ChatRequest], str]
    requests: list[ChatRequest] = field(default_factory=list)
    cost: float = 0.01
    gate: asyncio.Event | None = None
    held: Callable[[ChatRequest], bool] = lambda request: False
    fail: Callable[[ChatRequest], BaseException | None] = lambda request: None
    latency_s: float = 0.0
    priorities: list[float] = field(default_factory=list)

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        self.priorities.append(call_priority.get())
        raised = self.fail(request)
        if raised is not None:
            raise raised
        if self.gate is not None and self.held(request):
            await self.gate.wait()
        await asyncio.sleep(0)
        text = self.answer(request)
        return ChatResult(
            text, None, None, tokens_in=10, tokens_out=5, cost=self.cost, latency_s=self.latency_s
        )


@dataclass
class FakeRoller:
    """Rolls out "quality=<level> task=<id> seed=<seed>": a rollout that follows its steering."""

    calls: list[tuple[str, str, str, int]] = field(default_factory=list)
    fail_level: int | None = None
    # Rollouts deferred (a harness sends them later), by (task id, seed).
    defer: Callable[[str, int], bool] = lambda task, seed: False
    gate: asyncio.Event | None = None
    held_task: str | None = None
    latency_s: float = 0.0
    priorities: list[float] = field(default_factory=list)

    async def roll(
        self, task: SynthesisTask, system_addition: str, *, agent: str, seed: int
    ) -> Rollout:
        [level] = [q for marker, q in QUALITY.items() if marker in system_addition]
        self.calls.append((task.id, system_addition, agent, seed))
        self.priorities.append(call_priority.get())
        if self.gate is not None and task.id == self.held_task:
            await self.gate.wait()
        await asyncio.sleep(0)
        if level == self.fail_level:
            raise RolloutFailed("the agent endpoint answered 500")
        if self.defer(task.id, seed):
            raise RolloutDeferred(f"{task.id} waits for its harness")
        text = f"quality={level} task={task.id} seed={seed}"
        return Rollout(text, None, cost=0.1, calls=1, latency_s=self.latency_s)


@dataclass
class MemoryStore:
    """A CellStore in dictionaries that refuses to store anything twice (a pipeline that
    re-asks what it has would fail here) and logs every event in order."""

    steerings: dict[str, Steering] = field(default_factory=dict)
    rollouts: dict[tuple[str, int, str], Rollout] = field(default_factory=dict)
    votes: dict[tuple[str, int, int], Vote] = field(default_factory=dict)
    ends: dict[tuple[str, int], bool] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    failed_in: dict[str, int | None] = field(default_factory=dict)  # the retry a cell failed in
    events: list[tuple[Any, ...]] = field(default_factory=list)

    def steering(self, cell: CellPlan) -> Steering | None:
        return self.steerings.get(cell.key)

    def steering_put(self, cell: CellPlan, steering: Steering) -> None:
        assert cell.key not in self.steerings, f"steering of {cell.key} stored twice"
        self.steerings[cell.key] = steering
        self.events.append(("steering", cell.key))

    def rollout(self, cell: CellPlan, retry: int, level: str) -> Rollout | None:
        return self.rollouts.get((cell.key, retry, level))

    def rollout_put(self, cell: CellPlan, retry: int, level: str, rollout: Rollout) -> None:
        key = (cell.key, retry, level)
        assert key not in self.rollouts, f"rollout {key} stored twice"
        self.rollouts[key] = rollout
        self.events.append(("rollout", *key))

    def vote(self, cell: CellPlan, retry: int, position: int) -> Vote | None:
        return self.votes.get((cell.key, retry, position))

    def vote_put(self, cell: CellPlan, retry: int, vote: Vote) -> None:
        key = (cell.key, retry, vote.position)
        assert key not in self.votes, f"vote {key} stored twice"
        self.votes[key] = vote
        self.events.append(("vote", *key))

    def draw_end(self, cell: CellPlan, retry: int, kept: bool) -> None:
        key = (cell.key, retry)
        assert self.ends.get(key, kept) == kept, f"draw {key} ended both ways"
        self.ends[key] = kept
        self.events.append(("end", *key, kept))

    def cell_fail(self, cell: CellPlan, retry: int | None, reason: str) -> None:
        self.failures[cell.key] = reason
        self.failed_in[cell.key] = retry
        self.events.append(("fail", cell.key, reason))

    def kept_cells(self) -> set[str]:
        return set(self.kept_at())

    def kept_at(self) -> dict[str, int]:
        """The retry each kept cell was kept at."""
        return {key: retry for (key, retry), kept in self.ends.items() if kept}
