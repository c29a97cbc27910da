"""A scripted synthesis world for the fake OpenAI server (tests/fakes/openai_server.py).

`SynthesisScript.respond` is a FakeJudgeServer responder that plays every endpoint of a
synthesis run, told apart by the request's model name:

- the steering writer writes instructions that name their level and the cell's tag (a hash of
  the dimension and the task's user side); its first answer for a `steer_malformed` share of
  cells is cut off, so the pipeline re-asks it once;
- an agent (any other model) answers "quality=<0|1|2> tag=<tag> seed=<seed>" at the level its
  system prompt steers it to: it answers worse when the steering says so;
- the user simulator (`user` model) opens, then stops after the agent's first reply;
- each filter judge (the keys of `judge_errors`) picks the better side, except on its scripted
  share of draws, where it picks the worse one (a veto); on a `no_verdict` share of first asks
  it states no verdict (the re-ask then answers).

Every decision is a hash of the cell's tag and the draw's rollout seed, so `implied` works out,
without calling anything, which draws are kept and how many calls each stage needs.
"""

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graders.engine.synthesis.pipeline import FILTER_REASKS, rollout_seed
from graders.engine.synthesis.plan import CellPlan
from graders.engine.synthesis.prompts import FILTER_REASK
from graders.engine.synthesis.rollout import USER_STOP
from graders.engine.synthesis.types import LEVELS, DimensionSpec, SynthesisTask

FENCED = re.compile(r"<<<DATA-(\w+)>>>\n(.*?)\n<<<END-DATA-\1>>>", re.DOTALL)
STEERED = re.compile(r"level=(\w+) tag=(\w+)")
ROLLED = re.compile(r"quality=(\d) tag=(\w+) seed=(\d+)")


def share(*parts: object) -> float:
    """A uniform [0, 1) value from `parts`: the script's dice."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def cell_tag(dimension: str, user_side: str) -> str:
    return hashlib.sha256(f"{dimension}\n{user_side}".encode()).hexdigest()[:12]


def task_tag(dimension: DimensionSpec, task: SynthesisTask) -> str:
    """The tag the writer derives from a steering request for this (dimension, task)."""
    return cell_tag(dimension.name, task.instructions.strip() or task.prompt)


@dataclass(frozen=True)
class Implied:
    """What the script implies: steering calls, rollouts and filter calls, and the draw each
    cell is kept at (None: every draw vetoed)."""

    writer: int
    agent: int
    judges: int
    kept_at: dict[str, int | None]

    @property
    def kept(self) -> int:
        return sum(retry is not None for retry in self.kept_at.values())


@dataclass(frozen=True)
class SynthesisScript:
    writer: str = "writer"
    user: str = "user"
    judge_errors: Mapping[str, float] = field(
        default_factory=lambda: {"judge1": 0.20, "judge2": 0.10}
    )
    no_verdict: float = 0.05
    steer_malformed: float = 0.03

    def respond(self, body: dict[str, Any]) -> str:
        model = body["model"]
        messages = body["messages"]
        text = "\n".join(str(message["content"]) for message in messages)
        if model == self.writer:
            return self._steer(text)
        if model in self.judge_errors:
            return self._filter(model, text)
        if model == self.user:
            # In the simulator's view its own earlier turns are the assistant's.
            spoke = any(message["role"] == "assistant" for message in messages[1:])
            return f"Thanks. {USER_STOP}" if spoke else "Hello, I need help with my booking."
        [(level, tag)] = STEERED.findall(messages[0]["content"])
        return f"quality={LEVELS.index(level)} tag={tag} seed={body.get('seed')}"

    def _steer(self, text: str) -> str:
        tag = tag_of(text)
        if "could not be used" not in text and self._malformed(tag):
            return '{"reasoning": "cut short", "bad": "'
        steering = {"reasoning": f"levels for tag={tag}"}
        steering |= {level: f"Act at level={level} tag={tag} throughout." for level in LEVELS}
        return json.dumps(steering)

    def _filter(self, judge: str, text: str) -> str:
        a, b = (ROLLED.search(data).groups() for data in _fenced(text)[-2:])  # type: ignore[union-attr]
        _, tag, seed = a
        if FILTER_REASK not in text and self._silent(judge, tag, int(seed)):
            return "Both have merit; I cannot choose."
        better = "A" if int(a[0]) > int(b[0]) else "B"
        if self._wrong(judge, tag, int(seed)):
            better = "B" if better == "A" else "A"
        return json.dumps({"reasoning": "compared on the dimension", "answer": better})

    def _malformed(self, tag: str) -> bool:
        return share("malformed", tag) < self.steer_malformed

    def _silent(self, judge: str, tag: str, seed: int) -> bool:
        return share("silent", judge, tag, seed) < self.no_verdict

    def _wrong(self, judge: str, tag: str, seed: int) -> bool:
        return share("wrong", judge, tag, seed) < self.judge_errors[judge]

    def implied(
        self,
        cells: Sequence[CellPlan],
        *,
        tasks: Mapping[str, SynthesisTask],
        dimensions: Mapping[str, DimensionSpec],
        judges: Sequence[str],
        retries: int,
        seed: int,
    ) -> Implied:
        """`agent` counts rollouts (two per draw); a conversation makes more calls each."""
        writer = agent = judge_calls = 0
        kept_at: dict[str, int | None] = {}
        for cell in cells:
            tag = task_tag(dimensions[cell.dimension], tasks[cell.task_id])
            writer += 1 + self._malformed(tag)
            kept_at[cell.key] = None
            for retry in range(retries + 1):
                draw_seed = rollout_seed(seed, cell, retry)
                agent += 2
                vetoed = False
                for judge in judges:
                    judge_calls += 1 + self._silent(judge, tag, draw_seed) * min(1, FILTER_REASKS)
                    if self._wrong(judge, tag, draw_seed):
                        vetoed = True
                        break
                if not vetoed:
                    kept_at[cell.key] = retry
                    break
        return Implied(writer, agent, judge_calls, kept_at)


def tag_of(text: str) -> str:
    """The cell tag a request is about: named in rollouts and filter prompts (the steering
    carries it); derived from a steering request's dimension and user side (its first and
    third fenced values)."""
    named = re.search(r"tag=(\w+)", text)
    if named is not None:
        return named.group(1)
    name, _, user_side = _fenced(text)[:3]
    return cell_tag(name, user_side)


def _fenced(text: str) -> list[str]:
    return [data for _, data in FENCED.findall(text)]
