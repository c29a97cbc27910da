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
  pair it sees of each (task, dimension) listed there: a veto that forces one retry."""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graders.engine.judge import ChatRequest
from graders.models import JudgeEndpoint
from labeling.models import Dimension, Project, Task
from tests.fakes.openai_server import FakeJudgeServer
from tests.graders.engine.synthesis.helpers import slots

LEVEL_MARKS = {"STEER-BAD": 0, "STEER-OK": 1, "STEER-GOOD": 2}
STEER_TASK = re.compile(r"user-side of (t\d+)")


@dataclass
class Script:
    erring: str = "judge-2"
    err_on: set[tuple[str, str]] = field(default_factory=set)
    bad_steering: set[str] = field(default_factory=set)
    seen: set[tuple[str, str, str]] = field(default_factory=set)

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "write three system-prompt instructions" in text:
            task = _task_of(text)
            if task in self.bad_steering:
                return '{"reasoning": "cut off'
            return json.dumps(
                {
                    "reasoning": f"REASONING-{task}",
                    "bad": f"STEER-BAD for {task}: be curt and unhelpful.",
                    "ok": f"STEER-OK for {task}: do the minimum.",
                    "good": f"STEER-GOOD for {task}: be warm and thorough.",
                }
            )
        if "Compare two responses" in text:
            a, b = slots(ChatRequest(tuple(messages)))
            qa, qb = _quality(a), _quality(b)
            task, dimension = _task_of(a), _dimension_of(text)
            right = "A" if qa > qb else "B"
            answer = right
            first_sight = (body["model"], task, dimension) not in self.seen
            self.seen.add((body["model"], task, dimension))
            if body["model"] == self.erring and (task, dimension) in self.err_on and first_sight:
                answer = "B" if right == "A" else "A"
            return json.dumps({"reasoning": "compared", "answer": answer})
        system = str(messages[0].get("content", ""))
        if "You play a user" in system:  # the user simulator: asks once, then is done
            return "I need a later flight." if len(messages) <= 2 else "Thanks. ###STOP###"
        [level] = [q for mark, q in LEVEL_MARKS.items() if mark in system] or [None]
        task = _task_of(system)
        return f"quality={level} task={task} seed={body.get('seed')}: here is my answer."


def _task_of(text: str) -> str:
    found = re.search(r"\b(t\d+)\b", text)
    return found.group(1) if found else "?"


def _dimension_of(text: str) -> str:
    found = re.search(r"\b(warmth|clarity)\b", text)
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
