"""The evaluator under test of the PADME sweep (DESIGN.md section 11, paper section 5.3 and
Appendix H.5): one response or trajectory, alone, scored on one named dimension from 0 to 1.

The evaluator sees the dimension's name and description, the request the agent answered, the
task's documents (its tools and the policy it had to follow) and the response, never the other
response of its pair, the levels, the steering text, the filter votes or the agent's model: a
trajectory's system turns are left out too, since an agent's system prompt is where a steering
instruction would sit. Every piece of data is fenced (graders/engine/fence.py).

An answer counts only when it is a JSON object whose `score` is a finite number within [0, 1]:
anything else (no JSON, no score, a string, 1.2, -0.1) is a failed call, recorded as a failure
and never clamped into range, so a sloppy evaluator cannot pass as a harsh or a lenient one.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from graders.engine.fence import fence_draw
from graders.engine.jsonout import OutputInvalid, extract_json_object, validate
from graders.engine.judge import ChatRequest, ChatResult
from graders.engine.programs import (
    DocumentInput,
    Judge,
    ResponseInput,
    documents_render,
    response_render,
)

SCORE_LOW, SCORE_HIGH = 0.0, 1.0
# No x-clamp, no decoding grid: the range is a rule, and how finely an evaluator scores is one
# of the things the sweep measures (distinct scores).
EVALUATOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "score": {"type": "number", "minimum": SCORE_LOW, "maximum": SCORE_HIGH},
    },
    "required": ["reasoning", "score"],
    "additionalProperties": False,
}
REQUEST_NAME = "evaluate"

# Our wording of the paper's pointwise evaluator (H.5): its rules and output keys, kept.
_TEMPLATE = """You are scoring one piece of an AI agent's work on a single named dimension.

DIMENSION: {name}
{description}

Score this dimension and nothing else; leave aside everything its description does not mention.
Work can fail at its task and still do well on the dimension, and the other way round.
Score what the agent did. In a conversation, the customer's turns come from a simulator and are
not being scored.

THE REQUEST the agent was given:
{request}

REFERENCE DOCUMENTS (the agent's tools and the policy it had to follow). Look at them when you
need to check whether the agent was allowed to do something; most of the time you will not.
{documents}

THE WORK TO SCORE. A conversation comes as numbered turns; "-> tool call X" is a call the agent
made and "tool result" is what came back.
{response}

Score the agent on {name} from 0.0 (the worst) to 1.0 (the best). Use the whole range: keep 0.0
and 1.0 for clear cases and put ordinary work between them.

Reply with only a JSON object with exactly two keys:
- "reasoning": at most 3 sentences naming what in the work decided the score
- "score": a number from 0.0 to 1.0"""


@dataclass(frozen=True)
class DimensionInput:
    name: str
    description: str = ""


@dataclass(frozen=True)
class EvaluatorAnswer:
    """One evaluation: `score` is None exactly when `error` says why the call failed."""

    score: float | None
    reasoning: str
    error: str | None


def evaluator_request(
    *,
    dimension: DimensionInput,
    request: str,
    documents: tuple[DocumentInput, ...],
    response: ResponseInput,
    run: int,
) -> ChatRequest:
    """The call that scores `response` on `dimension` in run `run`. The run is the request's
    seed, so the n runs of a sweep are n distinct requests (each cached on its own) rather than
    one answer read back n times."""
    values = {
        "name": dimension.name,
        "description": dimension.description or "(no description)",
        "request": request,
        "documents": documents_render(documents),
        "response": response_render(without_system_turns(response)),
    }
    # Derived from the template and the task's texts, not the response: every response of a
    # task gets the same opening, which servers that cache prompt prefixes reuse.
    shared = [values[key] for key in ("name", "description", "request", "documents")]
    fence = fence_draw([_TEMPLATE, *values.values()], derive_from=[_TEMPLATE, *shared])
    body = _TEMPLATE.format(
        name=fence.wrap(values["name"]),
        description=fence.wrap(values["description"]),
        request=fence.wrap(values["request"]),
        documents=fence.wrap(values["documents"]),
        response=fence.wrap(values["response"]),
    )
    messages = ({"role": "system", "content": fence.notice()}, {"role": "user", "content": body})
    return ChatRequest(messages, EVALUATOR_SCHEMA, REQUEST_NAME, seed=run)


def without_system_turns(response: ResponseInput) -> ResponseInput:
    """A trajectory without its system turns: the agent's system prompt is where a steering
    instruction sits, so no evaluator (judge or metagrader program) may read it."""
    if response.messages is None:
        return response
    turns = tuple(m for m in response.messages if m.get("role") != "system")
    return replace(response, messages=turns)


def evaluator_answer_read(result: ChatResult) -> EvaluatorAnswer:
    """The evaluation in a judge's answer, by the rules of evaluator_answer_parse; a call that
    brought back no text fails with the client's reason."""
    if result.text is None:
        return EvaluatorAnswer(None, "", result.error or "the judge returned no content")
    return evaluator_answer_parse(result.text)


def evaluator_answer_parse(text: str) -> EvaluatorAnswer:
    """The first JSON object in `text`, held to EVALUATOR_SCHEMA: a string `reasoning` and a
    finite number `score` in [0, 1], nothing else. A failure names what was wrong."""
    found = extract_json_object(text)
    if found is None:
        return EvaluatorAnswer(None, "", "no JSON object in the answer")
    try:
        checked = validate(found, EVALUATOR_SCHEMA)
    except OutputInvalid as exc:
        return EvaluatorAnswer(None, _reasoning(found), str(exc))
    return EvaluatorAnswer(float(checked["score"]), checked["reasoning"], None)


def _reasoning(found: Mapping[str, Any]) -> str:
    reasoning = found.get("reasoning")
    return reasoning if isinstance(reasoning, str) else ""


def score_in_range(value: float | None) -> float | None:
    """A metagrader's reward as a sweep score: itself when within [0, 1], else None (a
    failure, as for a judge's answer; never clamped)."""
    if value is None or not SCORE_LOW <= value <= SCORE_HIGH:
        return None
    return value


class SeededJudge:
    """A judge whose every request carries `seed`: a metagrader's program run once per sweep
    run through one client (one concurrency limit per endpoint), each run its own requests."""

    def __init__(self, judge: Judge, seed: int) -> None:
        self.judge, self.seed = judge, seed

    async def complete(self, request: ChatRequest) -> ChatResult:
        return await self.judge.complete(replace(request, seed=self.seed))
