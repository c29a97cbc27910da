"""Programs: the format and its validator, and the runtime of the four kinds against a scripted
judge (no HTTP). Every expected reward below is worked out by hand in a comment."""

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from graders.engine.baseline import BASELINES, GENERIC_JUDGE_INSTRUCTION, baseline_program
from graders.engine.jsonout import OutputInvalid, extract_json_object, validate, wire_schema
from graders.engine.judge import ChatRequest, ChatResult, JudgeClient, JudgeSettings, MemoryCache
from graders.engine.programs import (
    Criterion,
    DocumentInput,
    Kind,
    ProgramInvalid,
    ResponseInput,
    TaskInput,
    grade_group_pairwise,
    grade_rubric,
    grade_scalar,
    program_validate,
    rubric_generate,
    spec_parse,
)

LEASE = DocumentInput(
    "lease", "Lease", "Clause 9: either party may end the lease with 60 days written notice."
)
TASK = TaskInput("t1", "Explain how the tenant can end the lease.", "Cite clauses.", (LEASE,))
TASK_WITHOUT_DOCUMENTS = TaskInput("t2", "Explain how the tenant can end the lease.")

BEST = ResponseInput("r1", "Give 60 days written notice under clause 9.")
VAGUE = ResponseInput("r2", "Tell the landlord you are leaving.")
ALSO_VAGUE = ResponseInput("r3", "Send the landlord a message.")
QUALITY = {BEST.text: 3, VAGUE.text: 2, ALSO_VAGUE.text: 2}

SEED_LIKE_SCALAR: dict[str, Any] = {
    "kind": "scalar",
    "name": "requirements-verify-fresh",
    "description": "Requirements and a first score, a verification of that score, a fresh score.",
    "steps": [
        {
            "id": "requirements",
            "prompt": "List the task's core requirements, then score the trace.\n\n"
            "Task:\n{task.prompt}\n\nDocuments:\n{documents}\n\nTrace:\n{response}",
            "output": {"requirements": "list[str]", "score": "float[0,1]"},
        },
        {
            "id": "verify",
            "prompt": "Check the earlier score against the trace.\n\n"
            "Requirements:\n{requirements.requirements}\n\nEarlier score:\n{requirements.score}"
            "\n\nDocuments:\n{documents}\n\nTrace:\n{response}",
            "output": {"score": "float[0,1]"},
        },
        {
            "id": "fresh",
            "prompt": "Score the trace from scratch.\n\nTask:\n{task.prompt}\n\nTrace:\n{response}",
            "output": {"score": "float[0,1]"},
        },
    ],
    "reward": {"mean": ["verify.score", "fresh.score"]},
}

RUBRIC_WITH_CLAIMS: dict[str, Any] = {
    "kind": "rubric",
    "name": "claims-then-check",
    "steps": [
        {
            "id": "rubric",
            "prompt": "Write a rubric.\n\nTask:\n{task.prompt}\n\nDocuments:\n{documents}",
            "output": {"criteria": "list[criterion]"},
        },
        {
            "id": "claims",
            "prompt": "List the claims the response makes.\n\nResponse:\n{response}",
            "output": {"claims": "list[str]"},
        },
        {
            "id": "check",
            "prompt": "Is the criterion met, judging by the claims?\n\n"
            "Claims:\n{claims.claims}\n\nCriterion:\n{criterion}",
            "output": {"verdict": "bool"},
        },
    ],
}

CRITERIA: list[dict[str, Any]] = [
    {"text": "States the 60-day notice period", "weight": 3},
    {"text": "Cites clause 9", "weight": 1},
    {"text": "Mentions a penalty for leaving early", "weight": 2},
]
LEASE_RUBRIC = tuple(
    Criterion(f"c{number}", item["text"], item["weight"]) for number, item in enumerate(CRITERIA, 1)
)
KEYWORDS = {
    "States the 60-day notice period": "60 days",
    "Cites clause 9": "clause 9",
    "Mentions a penalty for leaving early": "penalty",
}


# The scripted judge ------------------------------------------------------------------------


@dataclass
class Call:
    """A request as the script sees it: the step and the fenced data blocks by their label
    (the line before each block, without its colon)."""

    step: str
    data: dict[str, str]


Reply = dict[str, Any] | str


def data_blocks(request: ChatRequest) -> dict[str, str]:
    nonce = re.search(r"<<<DATA-([0-9a-f]+)>>>", request.messages[0]["content"])
    assert nonce is not None
    fenced = re.compile(
        rf"([^\n]*)\n<<<DATA-{nonce.group(1)}>>>\n(.*?)\n<<<END-DATA-{nonce.group(1)}>>>",
        re.DOTALL,
    )
    return {
        label.rstrip(":"): text for label, text in fenced.findall(request.messages[1]["content"])
    }


class ScriptedJudge:
    """Answers like the real client: a dict reply is sent as its JSON text, a string as is;
    the text is then extracted and validated against the request's schema (jsonout), unless
    `validates` is False, which stands for a lenient client or a stale cache entry."""

    def __init__(self, script: Callable[[Call], Reply], validates: bool = True) -> None:
        self.script = script
        self.validates = validates
        self.requests: list[ChatRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        # Yield once, so that calls issued together are all in flight before any returns.
        await asyncio.sleep(0)
        self.in_flight -= 1
        reply = self.script(Call(request.name.split(" ")[0], data_blocks(request)))
        text = reply if isinstance(reply, str) else json.dumps(reply)
        parsed, error = self._interpret(text, request.schema)
        return ChatResult(
            text,
            parsed,
            error,
            tokens_in=len(request.messages[1]["content"]) // 4,
            tokens_out=len(text) // 4,
            latency_s=0.01,
            cost=0.001,
            request_key=hashlib.sha256(json.dumps(request.messages).encode()).hexdigest(),
        )

    def _interpret(
        self, text: str, schema: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        obj = extract_json_object(text)
        if obj is None:
            return None, "unparseable judge output: no JSON object found"
        if not self.validates or schema is None:
            return obj, None
        try:
            return validate(obj, schema), None
        except OutputInvalid as invalid:
            return None, f"unparseable judge output: {invalid}"

    def steps_called(self) -> list[str]:
        return [request.name for request in self.requests]


def seed_like_script(call: Call) -> Reply:
    match call.step:
        case "requirements":
            return {"requirements": ["Give the notice period", "Cite the clause"], "score": 0.5}
        case "verify":
            return {"score": 0.9 if LEASE.text in call.data["Documents"] else 0.2}
        case _:
            return {"score": 0.7}


def quality_script(call: Call) -> Reply:
    a, b = QUALITY[call.data["Response A"]], QUALITY[call.data["Response B"]]
    return {"winner": "a" if a > b else "b" if b > a else "tie"}


def rubric_script(call: Call) -> Reply:
    if call.step == "rubric":
        return {"criteria": CRITERIA}
    return {"verdict": KEYWORDS[call.data["Criterion"]] in call.data["Response"]}


# Format and validation -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", BASELINES)
def test_baselines_are_valid_programs_of_their_kind(kind: Kind) -> None:
    program = baseline_program(kind)

    assert program.kind == kind
    assert program.to_json() == program_validate(BASELINES[kind]).to_json()


def test_scalar_baseline_keeps_the_generic_judge_instruction() -> None:
    prompt = baseline_program("scalar").steps[0].prompt

    assert prompt.startswith(
        "Grade this trace from 0 to 1, where 0 means failure and 1 means full success."
    )
    assert GENERIC_JUDGE_INSTRUCTION in prompt


@pytest.mark.parametrize(
    ("spec", "schema"),
    [
        (
            "float[0,1]",
            {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "enum": [n / 20 for n in range(21)],
                "x-grid": True,
            },
        ),
        (
            "int[1,10]",
            {"type": "integer", "minimum": 1, "maximum": 10, "enum": list(range(1, 11))},
        ),
        ("int[0,100]", {"type": "integer", "minimum": 0, "maximum": 100}),
        ("float", {"type": "number"}),
        ("str", {"type": "string"}),
        ("bool", {"type": "boolean"}),
        ("list[str]", {"type": "array", "items": {"type": "string"}, "maxItems": 50}),
        ("enum[a, b, tie]", {"type": "string", "enum": ["a", "b", "tie"]}),
        (
            "list[int[1,3]]",
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": 3, "enum": [1, 2, 3]},
                "maxItems": 50,
            },
        ),
    ],
)
def test_type_specs_compile_to_json_schema(spec: str, schema: dict[str, Any]) -> None:
    assert spec_parse(spec).schema() == schema


def test_step_schema_lists_every_field_and_is_accepted_by_the_client_validator() -> None:
    step = program_validate(SEED_LIKE_SCALAR).steps[0]
    answer = {"requirements": ["a"], "score": 0.5}

    assert step.schema()["required"] == ["requirements", "score"]
    assert step.schema()["additionalProperties"] is False
    assert validate(answer, step.schema()) == answer
    criteria_schema = program_validate(BASELINES["rubric"]).steps[0].schema()
    assert validate({"criteria": CRITERIA}, criteria_schema) == {"criteria": CRITERIA}


def broken(base: Mapping[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    program: dict[str, Any] = json.loads(json.dumps(base))
    change(program)
    return program


def set_prompt(index: int, prompt: str) -> Callable[[dict[str, Any]], None]:
    return lambda program: program["steps"][index].update(prompt=prompt)


def set_output(index: int, output: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    return lambda program: program["steps"][index].update(output=output)


PAIRWISE = BASELINES["pairwise"]
RUBRIC = BASELINES["rubric"]
PAIRWISE_RUBRIC = BASELINES["pairwise_rubric"]
KNOWN_AT_VERIFY = (
    "known: {task.prompt}, {task.instructions}, {documents}, {response}, "
    "{requirements.requirements}, {requirements.score}"
)


@pytest.mark.parametrize(
    ("program", "message"),
    [
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_prompt(1, "Score {verify.scor} of {response}")),
            "steps[1].prompt: {verify.scor} reads step 'verify', which has not run yet; a step "
            "can only read the outputs of earlier steps",
            id="self-reference",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_prompt(1, "Check {requirements.scor} on {response}")),
            f"steps[1].prompt: unknown placeholder {{requirements.scor}}; {KNOWN_AT_VERIFY}",
            id="unknown-field",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_prompt(1, "Check {respons}")),
            f"steps[1].prompt: unknown placeholder {{respons}}; {KNOWN_AT_VERIFY}",
            id="unknown-placeholder",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_prompt(0, "Use {fresh.score} on {response}")),
            "steps[0].prompt: {fresh.score} reads step 'fresh', which has not run yet; a step "
            "can only read the outputs of earlier steps",
            id="forward-reference",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p["steps"][2].update(id="verify")),
            "steps[2].id: duplicate id 'verify' (also steps[1])",
            id="duplicate-id",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_output(2, {"score": "float[0-1]"})),
            "steps[2].output.score: 'float[0-1]': expected [low,high] with numbers as bounds",
            id="bad-range",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_output(2, {"score": "number"})),
            "steps[2].output.score: unknown type 'number'; use one of str, bool, int, float, "
            "int[low,high], float[low,high], enum[x,y,...], list[<type>] (at most 50 items)",
            id="unknown-type",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, set_output(2, {"score": "float[1,0]"})),
            "steps[2].output.score: 'float[1,0]': the bounds must be finite, with low below high",
            id="inverted-range",
        ),
        pytest.param(
            broken(
                SEED_LIKE_SCALAR,
                lambda p: p.update(reward={"mean": ["verify.score", "fresh.scor"]}),
            ),
            "reward.mean[1]: unknown output fresh.scor; number outputs: requirements.score, "
            "verify.score, fresh.score",
            id="reward-unknown-output",
        ),
        pytest.param(
            broken(
                SEED_LIKE_SCALAR, lambda p: p.update(reward={"max": ["requirements.requirements"]})
            ),
            "reward.max[0]: requirements.requirements is list[str]; the reward can only read int "
            "or float outputs",
            id="reward-reads-text",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.update(reward={"avg": ["verify.score"]})),
            "reward: unknown operator 'avg'; use one of mean, weighted_mean, min, max, clip",
            id="reward-unknown-operator",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.update(reward=0.5)),
            "reward: the expression reads no step output, so every response would score the same",
            id="reward-constant",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.pop("reward")),
            'reward: a scalar program needs a reward expression over number outputs, e.g. {"mean": ["verify.score"]}',
            id="reward-missing",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.update(rewards=p["reward"])),
            "program: unknown key 'rewards'; allowed: kind, name, description, steps, reward",
            id="unknown-key",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.update(kind="ranking")),
            'kind: expected one of scalar, pairwise, rubric, pairwise_rubric; got "ranking"',
            id="unknown-kind",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p["steps"][0].update(id="task")),
            "steps[0].id: 'task' is reserved for {task.prompt} and {task.instructions}",
            id="reserved-id",
        ),
        pytest.param(
            broken(SEED_LIKE_SCALAR, lambda p: p.update(steps=[])),
            "steps: expected a non-empty list of steps, got []",
            id="no-steps",
        ),
        pytest.param(
            broken(PAIRWISE, lambda p: p["steps"][0].update(id="judge")),
            "steps: a pairwise program needs a step with id 'compare' whose output has winner: "
            "enum[a,b,tie] (or enum[a,b])",
            id="missing-compare",
        ),
        pytest.param(
            broken(PAIRWISE, set_output(0, {"winner": "enum[first,second]"})),
            "steps[0].output.winner: the 'compare' step must output winner: enum[a,b,tie] (or "
            "enum[a,b]); got enum[first,second]",
            id="compare-wrong-choices",
        ),
        pytest.param(
            broken(PAIRWISE, set_prompt(0, "Which is better?\n{response_a}\n{task.prompt}")),
            "steps: no step uses {response_b}; a pairwise program must show it to the judge",
            id="compare-misses-b",
        ),
        pytest.param(
            broken(PAIRWISE, lambda p: p.update(reward="compare.winner")),
            "reward: a pairwise program takes no reward expression; its reward is its win rate "
            "in the group",
            id="pairwise-with-reward",
        ),
        pytest.param(
            broken(RUBRIC, set_prompt(1, "Does {response} satisfy the rubric {rubric}?")),
            "steps[1].prompt: the 'check' step must use {criterion}; it runs once per criterion",
            id="check-without-criterion",
        ),
        pytest.param(
            broken(RUBRIC, set_output(1, {"verdict": "enum[yes,no]"})),
            "steps[1].output.verdict: the 'check' step must output verdict: bool; got enum[yes,no]",
            id="check-verdict-not-bool",
        ),
        pytest.param(
            broken(RUBRIC, set_output(0, {"criteria": "list[str]"})),
            "steps[0].output.criteria: the 'rubric' step must output criteria: list[criterion]; "
            "got list[str]",
            id="criteria-without-weights",
        ),
        pytest.param(
            broken(RUBRIC, set_prompt(0, "Write a rubric for {task.prompt}, as {response} did.")),
            "steps[0].prompt: {response} is not available while writing the rubric, which sees "
            "only the task and its documents",
            id="rubric-sees-response",
        ),
        pytest.param(
            broken(RUBRIC, lambda p: p["steps"].reverse()),
            "steps[0]: the 'check' step must come after the 'rubric' step",
            id="check-before-rubric",
        ),
        pytest.param(
            broken(
                RUBRIC_WITH_CLAIMS,
                set_prompt(2, "Criterion {criterion}, criteria {rubric.criteria}, {claims.claims}"),
            ),
            "steps[2].prompt: {rubric.criteria} reads step 'rubric', which writes the rubric; "
            "rubrics are stored and may be edited, so grading steps read them only through "
            "{rubric} and {criterion}",
            id="grading-reads-writer",
        ),
        pytest.param(
            broken(PAIRWISE_RUBRIC, set_prompt(1, "Compare {response_a} and {response_b}.")),
            "steps: no step uses {rubric}; a pairwise_rubric program must show it to the judge",
            id="pairwise-rubric-ignores-rubric",
        ),
    ],
)
def test_validator_names_the_path_and_what_to_do(program: dict[str, Any], message: str) -> None:
    with pytest.raises(ProgramInvalid) as raised:
        program_validate(program)

    assert message in raised.value.messages


def test_validator_reports_every_problem_at_once() -> None:
    program = broken(SEED_LIKE_SCALAR, set_prompt(2, "Score {response} against {fresh.score}"))
    program["reward"] = {"mean": ["verify.score", "fresh.missing"]}

    with pytest.raises(ProgramInvalid) as raised:
        program_validate(program)

    assert len(raised.value.messages) == 2
    assert raised.value.messages[0].startswith("steps[2].prompt: {fresh.score} reads step")
    assert raised.value.messages[1].startswith("reward.mean[1]: unknown output fresh.missing")


def test_shape_errors_are_reported_together_and_alone() -> None:
    program = {"kind": "scalar", "name": "", "steps": [{"id": "1st", "prompt": "x"}]}

    with pytest.raises(ProgramInvalid) as raised:
        program_validate(program)

    assert raised.value.messages == [
        'name: expected a non-empty string, got ""',
        'steps[0].id: expected an identifier (letters, digits and _, not starting with a digit), got "1st"',
        'steps[0].output: expected an object of field: type, e.g. {"score": "float[0,1]"}; got null',
    ]


def test_braces_that_are_not_placeholders_stay_literal() -> None:
    program = broken(
        SEED_LIKE_SCALAR, set_prompt(2, 'Answer like {"score": 0.5}.\n\nTrace:\n{response}')
    )

    assert program_validate(program).steps[2].placeholders == ("response",)


def test_content_hash_ignores_key_order_and_spacing_but_not_content() -> None:
    program = program_validate(SEED_LIKE_SCALAR)
    reordered = json.loads(json.dumps(SEED_LIKE_SCALAR, sort_keys=True))
    reordered["steps"][0]["output"] = {"score": "float[ 0, 1 ]", "requirements": "list[str]"}
    reordered["reward"] = {"mean": ["verify.score", "fresh.score"]}
    edited = broken(SEED_LIKE_SCALAR, set_prompt(2, "Score it again.\n{response}"))

    assert list(reordered) != list(SEED_LIKE_SCALAR)
    assert program_validate(reordered).content_hash == program.content_hash
    assert program_validate(edited).content_hash != program.content_hash
    assert re.fullmatch(r"[0-9a-f]{64}", program.content_hash)


def test_to_json_round_trips() -> None:
    program = program_validate(SEED_LIKE_SCALAR)

    again = program_validate(json.loads(json.dumps(program.to_json())))

    assert again == program
    assert again.content_hash == program.content_hash


# Scalar ---------------------------------------------------------------------------------------


def test_scalar_grade_runs_steps_in_order_and_evaluates_the_reward() -> None:
    program = program_validate(SEED_LIKE_SCALAR)
    judge = ScriptedJudge(seed_like_script)

    grade = asyncio.run(grade_scalar(program, TASK, BEST, judge))

    # mean(verify 0.9, because the documents were in its prompt; fresh 0.7) = 0.8
    assert grade.reward == pytest.approx(0.8)
    assert grade.error is None
    assert grade.response_id == "r1"
    assert [entry.step_id for entry in grade.trace] == ["requirements", "verify", "fresh"]
    first = grade.trace[0]
    assert first.messages[0]["role"] == "system"
    assert first.messages[1]["role"] == "user"
    assert first.text == json.dumps(first.parsed)
    assert first.parsed == {
        "requirements": ["Give the notice period", "Cite the clause"],
        "score": 0.5,
    }
    assert (first.error, first.cached, first.cost, first.latency_s) == (None, False, 0.001, 0.01)
    assert first.request_key == hashlib.sha256(json.dumps(first.messages).encode()).hexdigest()
    assert first.tokens_in > 0 and first.tokens_out > 0
    assert judge.requests[1].schema == program.steps[1].schema()


def test_scalar_grade_fills_placeholders_with_task_documents_and_earlier_outputs() -> None:
    judge = ScriptedJudge(seed_like_script)

    asyncio.run(grade_scalar(program_validate(SEED_LIKE_SCALAR), TASK, BEST, judge))

    verify = data_blocks(judge.requests[1])
    assert verify == {
        "Requirements": "1. Give the notice period\n2. Cite the clause",
        "Earlier score": "0.5",
        "Documents": f"Document 1: Lease\n{LEASE.text}",
        "Trace": BEST.text,
    }
    first = data_blocks(judge.requests[0])
    assert first["Task"] == TASK.prompt


def test_scalar_reward_follows_the_inputs() -> None:
    grade = asyncio.run(
        grade_scalar(
            program_validate(SEED_LIKE_SCALAR),
            TASK_WITHOUT_DOCUMENTS,
            BEST,
            ScriptedJudge(seed_like_script),
        )
    )

    # verify sees "(no documents)" and answers 0.2: mean(0.2, 0.7) = 0.45
    assert grade.reward == pytest.approx(0.45)


def test_unparseable_output_fails_the_grade_with_its_reason_and_stops() -> None:
    def script(call: Call) -> Reply:
        return "The trace looks fine to me." if call.step == "verify" else seed_like_script(call)

    judge = ScriptedJudge(script)

    grade = asyncio.run(grade_scalar(program_validate(SEED_LIKE_SCALAR), TASK, BEST, judge))

    assert grade.reward is None
    assert grade.error == "step verify: unparseable judge output: no JSON object found"
    assert [entry.step_id for entry in grade.trace] == ["requirements", "verify"]
    assert grade.trace[1].text == "The trace looks fine to me."
    assert grade.trace[1].error == "unparseable judge output: no JSON object found"
    assert judge.steps_called() == ["requirements", "verify"]


def test_out_of_range_score_fails_the_grade() -> None:
    def script(call: Call) -> Reply:
        return {"score": 1.5} if call.step == "fresh" else seed_like_script(call)

    grade = asyncio.run(
        grade_scalar(program_validate(SEED_LIKE_SCALAR), TASK, BEST, ScriptedJudge(script))
    )

    assert grade.reward is None
    assert grade.error == "step fresh: unparseable judge output: score: 1.5 is above the maximum 1"


def test_a_score_between_grid_points_is_accepted() -> None:
    # The grid steers local decoders; a real judge's 0.73 is still a valid score in [0, 1].
    def script(call: Call) -> Reply:
        return {"score": 0.73} if call.step == "fresh" else seed_like_script(call)

    grade = asyncio.run(
        grade_scalar(program_validate(SEED_LIKE_SCALAR), TASK, BEST, ScriptedJudge(script))
    )
    assert grade.error is None and grade.reward is not None


def test_a_lenient_client_cannot_turn_bad_output_into_a_reward() -> None:
    def script(call: Call) -> Reply:
        return {"score": "high"} if call.step == "fresh" else seed_like_script(call)

    judge = ScriptedJudge(script, validates=False)

    grade = asyncio.run(grade_scalar(program_validate(SEED_LIKE_SCALAR), TASK, BEST, judge))

    assert grade.reward is None
    assert grade.error == 'step fresh: output score: expected a number from 0 to 1, got "high"'


def test_a_trajectory_is_shown_as_numbered_turns_with_tool_calls_and_results() -> None:
    trajectory = ResponseInput(
        "traj",
        messages=(
            {"role": "user", "content": "Cancel order A1."},
            {
                "role": "assistant",
                "content": "Looking it up.",
                "tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "A1"}}],
            },
            {
                "role": "tool",
                "name": "get_order",
                "tool_call_id": "c1",
                "content": '{"status": "paid"}',
            },
            {"role": "assistant", "content": "Order A1 is cancelled."},
        ),
    )
    judge = ScriptedJudge(lambda call: {"score": 1.0})

    asyncio.run(grade_scalar(baseline_program("scalar"), TASK, trajectory, judge))

    assert data_blocks(judge.requests[0])["Trace"] == (
        "[Turn 1] user\n| Cancel order A1.\n\n"
        "[Turn 2] assistant\n| Looking it up.\n"
        '-> tool call get_order (call c1): {"order_id": "A1"}\n\n'
        '[Turn 3] tool result (get_order, c1)\n| {"status": "paid"}\n\n'
        "[Turn 4] assistant\n| Order A1 is cancelled."
    )


def test_grading_with_a_program_of_another_kind_is_a_programming_error() -> None:
    judge = ScriptedJudge(quality_script)

    with pytest.raises(ValueError, match="grade_scalar needs a scalar program"):
        asyncio.run(grade_scalar(baseline_program("pairwise"), TASK, BEST, judge))
    with pytest.raises(ValueError, match="needs a rubric or pairwise_rubric program"):
        asyncio.run(rubric_generate(baseline_program("scalar"), TASK, judge))
    assert judge.requests == []


def test_a_rerun_through_the_real_client_is_served_from_its_cache() -> None:
    # The fence nonce is a hash of the prompt, so the same grade renders the same messages.
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        completion = {"choices": [{"message": {"content": '{"score": 0.75}'}}]}
        return httpx.Response(200, json=completion)

    async def grade_twice() -> list[Any]:
        settings = JudgeSettings("http://judge.test/v1", "judge-model", None)
        transport = httpx.MockTransport(handler)
        async with JudgeClient(settings, MemoryCache(), transport=transport) as client:
            program = baseline_program("scalar")
            return [await grade_scalar(program, TASK, BEST, client) for _ in range(2)]

    first, second = asyncio.run(grade_twice())

    assert (first.reward, second.reward) == (0.75, 0.75)
    assert (first.trace[0].cached, second.trace[0].cached) == (False, True)
    assert first.trace[0].request_key == second.trace[0].request_key
    assert len(bodies) == 1
    sent_schema = bodies[0]["response_format"]["json_schema"]["schema"]
    # What is sent is the step's schema without our own "x-" keywords.
    assert sent_schema == wire_schema(baseline_program("scalar").steps[0].schema())


# Pairwise -------------------------------------------------------------------------------------


def test_pairwise_rewards_are_win_rates_over_both_orders_with_ties_as_half() -> None:
    judge = ScriptedJudge(quality_script)

    grades = asyncio.run(
        grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST, VAGUE, ALSO_VAGUE], judge)
    )

    # r1 wins all 4 of its comparisons; r2 and r3 lose 2 to r1 and tie 2 with each other:
    # (0 + 0 + 0.5 + 0.5) / 4 = 0.25.
    assert [(g.response_id, g.reward) for g in grades] == [("r1", 1.0), ("r2", 0.25), ("r3", 0.25)]
    assert len(judge.requests) == 6
    assert {(c.first, c.second) for c in grades[0].comparisons} == {
        ("r1", "r2"),
        ("r2", "r1"),
        ("r1", "r3"),
        ("r3", "r1"),
    }
    assert [entry.label for entry in grades[1].trace] == [
        "A=r1, B=r2",
        "A=r2, B=r1",
        "A=r2, B=r3",
        "A=r3, B=r2",
    ]
    assert judge.max_in_flight == 6


def test_pairwise_both_orders_cancel_a_position_bias() -> None:
    always_a = ScriptedJudge(lambda call: {"winner": "a"})

    grades = asyncio.run(
        grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST, VAGUE], always_a)
    )

    assert [g.reward for g in grades] == [0.5, 0.5]


def test_a_failed_comparison_is_recorded_and_left_out_of_the_denominator() -> None:
    def script(call: Call) -> Reply:
        if (call.data["Response A"], call.data["Response B"]) == (VAGUE.text, BEST.text):
            return "Both have merit."
        return quality_script(call)

    grades = asyncio.run(
        grade_group_pairwise(
            baseline_program("pairwise"), TASK, [BEST, VAGUE, ALSO_VAGUE], ScriptedJudge(script)
        )
    )

    # r1: 3 successful wins of 3 = 1.0; r2: loss 0, ties 0.5 and 0.5 over 3 = 1/3; r3 as before.
    assert [g.reward for g in grades] == [pytest.approx(1.0), pytest.approx(1 / 3), 0.25]
    assert all(g.error is None for g in grades)
    failed = [c for c in grades[1].comparisons if c.error is not None]
    assert [(c.first, c.second, c.winner) for c in failed] == [("r2", "r1", None)]
    assert (
        failed[0].error
        == "step compare (A=r2, B=r1): unparseable judge output: no JSON object found"
    )
    assert failed[0] in grades[0].comparisons
    assert failed[0].score_for("r1") is None


def test_a_response_whose_comparisons_all_failed_gets_no_reward() -> None:
    judge = ScriptedJudge(lambda call: {"winner": "first"})

    grades = asyncio.run(
        grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST, VAGUE], judge)
    )

    assert [g.reward for g in grades] == [None, None]
    assert grades[0].error == (
        "all 2 comparisons failed; first: step compare (A=r1, B=r2): unparseable judge output: "
        'winner: "first" is not one of "a", "b", "tie"'
    )


def test_a_single_response_group_has_no_pairwise_reward() -> None:
    judge = ScriptedJudge(quality_script)

    grades = asyncio.run(grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST], judge))

    assert [(g.response_id, g.reward) for g in grades] == [("r1", None)]
    assert grades[0].error == "a pairwise reward needs at least two responses in the group"
    assert judge.requests == []


def test_pairwise_rejects_duplicate_ids_and_a_misplaced_rubric() -> None:
    judge = ScriptedJudge(quality_script)
    rubric = [Criterion("c1", "Cites clause 9")]

    with pytest.raises(ValueError, match="unique"):
        asyncio.run(grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST, BEST], judge))
    with pytest.raises(ValueError, match="a pairwise program takes none"):
        asyncio.run(
            grade_group_pairwise(baseline_program("pairwise"), TASK, [BEST, VAGUE], judge, rubric)
        )
    with pytest.raises(ValueError, match="needs a rubric"):
        asyncio.run(
            grade_group_pairwise(baseline_program("pairwise_rubric"), TASK, [BEST, VAGUE], judge)
        )


# Rubric ---------------------------------------------------------------------------------------


def test_rubric_generation_sees_only_the_task_and_its_documents() -> None:
    judge = ScriptedJudge(rubric_script)

    rubric = asyncio.run(rubric_generate(baseline_program("rubric"), TASK, judge))

    assert rubric.error is None
    assert rubric.criteria == (
        Criterion("c1", "States the 60-day notice period", 3.0),
        Criterion("c2", "Cites clause 9", 1.0),
        Criterion("c3", "Mentions a penalty for leaving early", 2.0),
    )
    assert [entry.step_id for entry in rubric.trace] == ["rubric"]
    assert data_blocks(judge.requests[0]) == {
        "Task": TASK.prompt,
        "Instructions given with the task": TASK.instructions,
        "Source documents": f"Document 1: Lease\n{LEASE.text}",
    }


def test_rubric_generation_failure_and_empty_rubric_are_errors() -> None:
    garbled = asyncio.run(
        rubric_generate(baseline_program("rubric"), TASK, ScriptedJudge(lambda c: "{"))
    )
    empty = asyncio.run(
        rubric_generate(baseline_program("rubric"), TASK, ScriptedJudge(lambda c: {"criteria": []}))
    )
    weightless = asyncio.run(
        rubric_generate(
            baseline_program("rubric"),
            TASK,
            ScriptedJudge(lambda c: {"criteria": [{"text": "x", "weight": 0}]}, validates=False),
        )
    )

    assert (garbled.criteria, garbled.error) == (
        (),
        "step rubric: unparseable judge output: no JSON object found",
    )
    assert (empty.criteria, empty.error) == ((), "the rubric step wrote no criteria")
    assert weightless.error == (
        "step rubric: output criteria: item 0: a criterion weight must be above 0 and at most 1000"
    )


@pytest.mark.parametrize("validates", [True, False])
def test_a_rubric_longer_than_the_list_bound_fails_instead_of_multiplying_checks(
    validates: bool,
) -> None:
    def criteria(count: int) -> Callable[[Call], Reply]:
        return lambda call: {"criteria": [{"text": f"c{n}", "weight": 1} for n in range(count)]}

    program = baseline_program("rubric")
    at_bound = asyncio.run(rubric_generate(program, TASK, ScriptedJudge(criteria(50), validates)))
    runaway = asyncio.run(rubric_generate(program, TASK, ScriptedJudge(criteria(51), validates)))

    assert (len(at_bound.criteria), at_bound.error) == (50, None)
    assert runaway.criteria == ()
    # The client's schema check words it one way, the engine's own check (a lenient client or
    # a cached answer from before the bound) the other; both name the count and the bound.
    assert runaway.error == (
        "step rubric: unparseable judge output: criteria: 51 items, more than the maximum 50"
        if validates
        else "step rubric: output criteria: 51 items; a list has at most 50"
    )


def test_rubric_reward_is_the_weight_share_of_satisfied_criteria() -> None:
    program = baseline_program("rubric")
    rubric = asyncio.run(rubric_generate(program, TASK, ScriptedJudge(rubric_script))).criteria
    judge = ScriptedJudge(rubric_script)

    grade = asyncio.run(grade_rubric(program, TASK, rubric, BEST, judge))

    # 60 days (3) and clause 9 (1) satisfied, penalty (2) not: 4 / 6.
    assert grade.reward == pytest.approx(4 / 6)
    assert grade.all_pass is False
    assert [(r.criterion.id, r.passed, r.error) for r in grade.criteria] == [
        ("c1", True, None),
        ("c2", True, None),
        ("c3", False, None),
    ]
    assert [entry.label for entry in grade.trace] == [
        "criterion c1",
        "criterion c2",
        "criterion c3",
    ]
    assert judge.max_in_flight == 3


def test_rubric_all_pass_when_every_criterion_is_satisfied() -> None:
    thorough = ResponseInput(
        "r4", "Give 60 days written notice under clause 9; no penalty applies."
    )

    grade = asyncio.run(
        grade_rubric(
            baseline_program("rubric"), TASK, LEASE_RUBRIC, thorough, ScriptedJudge(rubric_script)
        )
    )

    assert (grade.reward, grade.all_pass) == (1.0, True)


def test_a_failed_criterion_check_fails_the_grade_but_keeps_the_other_verdicts() -> None:
    def script(call: Call) -> Reply:
        return "Hard to say." if call.data["Criterion"] == "Cites clause 9" else rubric_script(call)

    grade = asyncio.run(
        grade_rubric(baseline_program("rubric"), TASK, LEASE_RUBRIC, BEST, ScriptedJudge(script))
    )

    assert grade.reward is None
    assert grade.all_pass is None
    assert grade.error == (
        "1 of 3 criterion checks failed; first: step check (criterion c2): unparseable judge "
        "output: no JSON object found"
    )
    assert [r.passed for r in grade.criteria] == [True, None, False]


def test_an_empty_rubric_cannot_be_graded() -> None:
    judge = ScriptedJudge(rubric_script)

    grade = asyncio.run(grade_rubric(baseline_program("rubric"), TASK, [], BEST, judge))

    assert (grade.reward, grade.error) == (None, "the rubric has no criteria")
    assert judge.requests == []


def test_grading_steps_that_do_not_use_the_criterion_run_once_per_response() -> None:
    def script(call: Call) -> Reply:
        if call.step == "claims":
            return {"claims": ["60 days written notice", "clause 9"]}
        return {"verdict": KEYWORDS[call.data["Criterion"]] in call.data["Claims"]}

    judge = ScriptedJudge(script)

    grade = asyncio.run(
        grade_rubric(program_validate(RUBRIC_WITH_CLAIMS), TASK, LEASE_RUBRIC, BEST, judge)
    )

    assert judge.steps_called() == [
        "claims",
        "check [criterion c1]",
        "check [criterion c2]",
        "check [criterion c3]",
    ]
    assert grade.reward == pytest.approx(4 / 6)
    assert data_blocks(judge.requests[1])["Claims"] == "1. 60 days written notice\n2. clause 9"


# Pairwise with a rubric ---------------------------------------------------------------------


def test_pairwise_rubric_compares_against_the_stored_rubric() -> None:
    def script(call: Call) -> Reply:
        if call.step == "rubric":
            return {"criteria": CRITERIA}
        lines = call.data["Rubric"].splitlines()
        assert lines[0] == "1. States the 60-day notice period (weight 3)"

        def score(text: str) -> int:
            return sum(c["weight"] for c in CRITERIA if KEYWORDS[c["text"]] in text)

        a, b = score(call.data["Response A"]), score(call.data["Response B"])
        return {"winner": "a" if a > b else "b" if b > a else "tie"}

    program = baseline_program("pairwise_rubric")
    judge = ScriptedJudge(script)
    rubric = asyncio.run(rubric_generate(program, TASK, judge)).criteria

    grades = asyncio.run(grade_group_pairwise(program, TASK, [VAGUE, BEST], judge, rubric=rubric))

    # BEST satisfies 4 of 6 weight, VAGUE none: BEST wins both orders.
    assert [(g.response_id, g.reward) for g in grades] == [("r2", 0.0), ("r1", 1.0)]
    assert judge.steps_called()[0] == "rubric"
    assert len(judge.requests) == 3


def test_prompts_about_one_task_share_their_opening_up_to_the_response() -> None:
    """So a server's prompt-prefix cache serves every response of a task after the first."""
    from graders.engine.programs import _messages_render

    program = baseline_program("scalar")
    step = program.steps[0]
    task = {"task.prompt": "Review the deal.", "task.instructions": "", "documents": "SPA"}
    first = _messages_render(step, task | {"response": "Answer one"})
    second = _messages_render(step, task | {"response": "Answer two"})
    assert first[0] == second[0]  # the same system message, nonce included
    cut = first[1]["content"].index("Answer one")
    assert second[1]["content"][:cut] == first[1]["content"][:cut]
