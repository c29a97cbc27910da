"""A scripted fake OpenAI server for synthesis runs: one responder plays the steering writer,
the agents and the filter judges, told apart by what each request asks (and the endpoint's
model name), so a test knows exactly which calls a run makes and what it stores.

- The writer answers steering whose three instructions carry a marker of their level
  (STEER-BAD, STEER-OK, STEER-GOOD) and of the task; for a task listed in `bad_steering` it
  answers unusable JSON every time, so the cell fails after its one re-ask.
- An agent answers "quality=N ..." with N the level its system prompt steers it to: a
  rollout that follows its steering, as a real agent should.
- The user simulator asks once, then says it is done.
- A filter judge picks the higher quality, except the judge named in `erring` on the first
  pair it sees of each (task, dimension) listed there: a veto that forces one retry; and, with
  `err_share`, any judge on its n-th pair of a (task, dimension) when `errs` says so, a
  deterministic hash of (judge, task, dimension, n) below the share, so a test can work out
  every draw a run makes (as long as no judge is asked the same pair twice).

It notes each answer's stage, task and tokens as the fake server reports them (`answered`), so
a test can add up what each stage of a run took."""

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graders.engine.judge import ChatRequest
from graders.models import JudgeEndpoint
from labeling.models import Dimension, Project, Task
from tests.fakes.openai_server import FakeJudgeServer, approx_tokens
from tests.graders.engine.synthesis.helpers import fenced, slots

LEVEL_MARKS = {"STEER-BAD": 0, "STEER-OK": 1, "STEER-GOOD": 2}
STEERED = re.compile(r"STEER-\w+ for (t\d+) on (\w+)")


@dataclass(frozen=True)
class Answered:
    stage: str  # "steer", "rollout" (an agent or the user simulator) or "filter"
    task: str
    tokens: int  # prompt and completion, as the fake server counts them


@dataclass
class Script:
    erring: str = "judge-2"
    err_on: set[tuple[str, str]] = field(default_factory=set)
    bad_steering: set[str] = field(default_factory=set)
    err_share: float = 0.0
    # How many pairs of each (task, dimension) each judge has seen.
    sights: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    answered: list[Answered] = field(default_factory=list)

    def errs(self, judge: str, task: str, dimension: str, sight: int) -> bool:
        """Whether `judge` prefers the lower level on its `sight`-th pair (0 first) of the
        (task, dimension) cell."""
        if judge == self.erring and (task, dimension) in self.err_on and sight == 0:
            return True
        digest = hashlib.sha256(f"{judge}:{task}:{dimension}:{sight}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.err_share

    def __call__(self, body: dict[str, Any]) -> str:
        stage, task, answer = self._answer(body)
        prompt = "".join(str(m.get("content", "")) for m in body["messages"])
        self.answered.append(Answered(stage, task, approx_tokens(prompt) + approx_tokens(answer)))
        return answer

    def stages(self, *, without: Iterable[str] = ()) -> dict[str, tuple[int, int]]:
        """(calls, tokens) per stage of what was answered, leaving out the tasks `without`."""
        spent: dict[str, tuple[int, int]] = {}
        for answer in self.answered:
            if answer.task not in without:
                calls, tokens = spent.get(answer.stage, (0, 0))
                spent[answer.stage] = (calls + 1, tokens + answer.tokens)
        return spent

    def _answer(self, body: dict[str, Any]) -> tuple[str, str, str]:
        messages = body["messages"]
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "write three system-prompt instructions" in text:
            task = _task_of(text)
            if task in self.bad_steering:
                return "steer", task, '{"reasoning": "cut off'
            on = f"{task} on {fenced(ChatRequest(tuple(messages)))[0]}"
            return (
                "steer",
                task,
                json.dumps(
                    {
                        "reasoning": f"REASONING-{task}",
                        "bad": f"STEER-BAD for {on}: be curt and unhelpful.",
                        "ok": f"STEER-OK for {on}: do the minimum.",
                        "good": f"STEER-GOOD for {on}: be warm and thorough.",
                    }
                ),
            )
        if "Compare two responses" in text:
            request = ChatRequest(tuple(messages))
            a, b = slots(request)
            right = "A" if _quality(a) > _quality(b) else "B"
            cell = (body["model"], _task_of(a), fenced(request)[0])
            sight = self.sights[cell]
            self.sights[cell] += 1
            answer = right
            if self.errs(*cell, sight):
                answer = "B" if right == "A" else "A"
            return "filter", cell[1], json.dumps({"reasoning": "compared", "answer": answer})
        system = str(messages[0].get("content", ""))
        if "You play a user" in system:  # the user simulator: asks once, then is done
            done = len(messages) > 2
            return (
                "rollout",
                _task_of(system),
                "Thanks. ###STOP###" if done else "I need a later flight.",
            )
        [level] = [q for mark, q in LEVEL_MARKS.items() if mark in system] or [None]
        steered = STEERED.search(system)
        task, dimension = steered.groups() if steered else (_task_of(system), "?")
        return (
            "rollout",
            task,
            f"quality={level} task={task} dimension={dimension} seed={body.get('seed')}: "
            "here is my answer.",
        )


def _task_of(text: str) -> str:
    found = re.search(r"\b(t\d+)\b", text)
    return found.group(1) if found else "?"


def _quality(text: str) -> int:
    found = re.search(r"quality=(\d)", text)
    assert found, f"not a scripted rollout: {text[:80]!r}"
    return int(found.group(1))


def synthesis_project(project: Project, server: FakeJudgeServer, tasks: Iterable[str]) -> None:
    """Two dimensions, the tasks (prompt and user side name the task), two agents, a writer
    and two filter judges, all on the fake server."""
    Dimension.objects.create(project=project, name="warmth", description="Warm to the user.")
    Dimension.objects.create(project=project, name="clarity", description="Easy to follow.")
    for task in tasks:
        Task.objects.create(
            project=project,
            external_id=task,
            domain="airline",
            prompt=f"Prompt of {task}: help me change my flight.",
            instructions=f"The user-side of {task}: wants a later flight.",
            split="meta",
        )
    for name in ("agent-a", "agent-b", "writer", "judge-1", "judge-2", "user-sim"):
        JudgeEndpoint.objects.create(
            project=project, name=name, base_url=server.base_url, model=name
        )


def endpoints(project: Project, *names: str) -> list[JudgeEndpoint]:
    by_name = {e.name: e for e in JudgeEndpoint.objects.filter(project=project)}
    return [by_name[n] for n in names]


def start_arguments(project: Project, **overrides: Any) -> dict[str, Any]:
    agents = endpoints(project, "agent-a", "agent-b")
    writer, judge1, judge2 = endpoints(project, "writer", "judge-1", "judge-2")
    return {
        "project": project,
        "dimensions": list(Dimension.objects.filter(project=project)),
        "agents": agents,
        "writer": writer,
        "judges": [judge1, judge2],
        **overrides,
    }
