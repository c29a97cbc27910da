"""The values synthesis generation passes between its stages (DESIGN.md section 11).

Pure data: no Django, no I/O. The Django side builds DimensionSpec and SynthesisTask from its rows
and stores Steering, Rollout and Vote; the engine never sees a database.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from graders.engine.judge import ChatResult

Level = Literal["bad", "ok", "good"]
SlotOrder = Literal["ab", "ba"]

# The three quality levels in order, worst first; a contrast is two of them, lower first.
LEVELS: tuple[Level, ...] = ("bad", "ok", "good")
CONTRASTS: tuple[tuple[Level, Level], ...] = (("bad", "ok"), ("ok", "good"), ("bad", "good"))


@dataclass(frozen=True)
class DimensionSpec:
    """A grading dimension as every stage sees it: the same name and description for the
    steering writer, the agent's wrapper, the filter judges and the evaluators."""

    name: str
    description: str


@dataclass(frozen=True)
class SynthesisTask:
    """One task. `prompt` is what the agent is asked; `instructions` is the user side (what the
    user is trying to get done; a tau2 task's user-simulator instructions), which the steering
    writer and the user simulator read and the agent never does."""

    id: str
    domain: str
    prompt: str
    instructions: str = ""
    documents: tuple[tuple[str, str], ...] = ()  # (title, text)
    tool_names: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Spent:
    """What producing a value cost: judge calls made (retries of one call not counted; cache
    hits counted as calls that cost nothing), dollars and tokens. Keyword-only, so a subclass's
    own fields come first: Steering("why", "bad", "ok", "good", cost=0.01)."""

    cost: float = 0.0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    # Seconds the calls took once sent, in sequence (queueing excluded): how far this value
    # moved its cell along; the pipeline serves cells that have come furthest first.
    latency_s: float = 0.0


def spent_fields(results: Sequence[ChatResult]) -> dict[str, Any]:
    """The Spent fields (those of a Rollout too) of a value made by these calls."""
    return {
        "cost": sum(result.cost for result in results),
        "calls": len(results),
        "tokens_in": sum(result.tokens_in for result in results),
        "tokens_out": sum(result.tokens_out for result in results),
        "latency_s": sum(result.latency_s for result in results),
    }


@dataclass(frozen=True)
class Steering(Spent):
    """WriteSteer's answer for one cell: the writer's reasoning and one instruction body per
    level. Admins may read it; an agent gets one level's body in its system prompt (wrapped);
    labelers, the user simulator, filter judges and evaluators never see any of it."""

    reasoning: str
    bad: str
    ok: str
    good: str

    def for_level(self, level: str) -> str:
        """The instruction body for `level` ("bad", "ok" or "good")."""
        if level == "bad":
            return self.bad
        if level == "ok":
            return self.ok
        if level == "good":
            return self.good
        raise ValueError(f"unknown level {level!r}; levels are bad, ok, good")

    def as_dict(self) -> dict[str, str]:
        """The four texts as stored on a cell (SynthesisCell.steering)."""
        return {"reasoning": self.reasoning, "bad": self.bad, "ok": self.ok, "good": self.good}


@dataclass(frozen=True)
class Rollout:
    """One rollout: plain text (`content`) or a trajectory (`messages`, in the FORMATS.md
    response shape: role, content, tool_calls, tool_call_id, name), exactly one of them set.
    `calls` counts every judge call the rollout made (a conversation makes several)."""

    content: str | None
    messages: list[dict[str, Any]] | None
    cost: float = 0.0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0  # as Spent.latency_s

    def __post_init__(self) -> None:
        if (self.content is None) == (self.messages is None):
            raise ValueError("a rollout has exactly one of content and messages")


@dataclass(frozen=True)
class Vote(Spent):
    """One filter judge's vote on one draw. `agrees` is True when the judge preferred the higher
    level, False when it preferred the lower (a veto), None when it stated no verdict in any of
    its asks (counted as a veto). `slot_order` is "ab" when the lower level was shown as A.
    `answers` holds every raw answer, re-asks included, in order."""

    position: int
    judge: str
    agrees: bool | None
    slot_order: SlotOrder
    answers: tuple[str, ...] = field(default=())

    @property
    def keeps(self) -> bool:
        return self.agrees is True
