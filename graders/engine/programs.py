"""Metagrader programs: the JSON format, its validation, and the runtime of the four kinds.

A program is data that the engine interprets; nothing in it is ever executed. Format:

    {"kind": "scalar" | "pairwise" | "rubric" | "pairwise_rubric",
     "name": "short-name", "description": "what it does and why (optional)",
     "steps": [{"id": "verify",
                "prompt": "... {task.prompt} ... {documents} ... {response} ...",
                "output": {"reasoning": "str", "score": "float[0,1]"}}, ...],
     "reward": {"mean": ["verify.score"]}}                   (scalar programs only)

Steps run in order; each sends its rendered prompt to the judge and gets back a JSON object with
exactly the fields of its `output`. Output types: str, bool, int, float, int[low,high],
float[low,high], enum[x,y,...], criterion (an object with text and weight) and list[<type>]
(at most MAX_LIST_ITEMS items: a judge that writes more fails the step rather than multiply the
calls, and the cost, of the steps that run once per item).

Placeholders: {task.prompt}, {task.instructions}, {documents} everywhere; {response} (scalar,
rubric), {response_a} and {response_b} (pairwise kinds), {rubric} (rubric kinds), {criterion}
(rubric), and {step_id.field} for an output of an earlier step. Every value is fenced as data
(see fence.py). Other braces, such as a JSON example in a prompt, are left as written.

Roles are given by step ids:

- pairwise kinds: a step `compare` whose output has `winner: enum[a,b,tie]` (or enum[a,b]);
- rubric kinds: a step `rubric` whose output has `criteria: list[criterion]`. It and the steps
  before it write the rubric and see only the task and its documents; the steps after it grade.
  Rubrics are stored and may be edited, so grading steps read them only through {rubric} and
  {criterion}, never through the writing steps' outputs;
- rubric: a step `check` after `rubric`, whose output has `verdict: bool` and whose prompt uses
  {criterion}. It runs once per criterion, as does every step that reads a per-criterion output;
  the other grading steps run once per response.

Rewards: scalar, the `reward` expression (reward.py); rubric, the weight share of satisfied
criteria; pairwise kinds, the win rate in the group (see `grade_group_pairwise`).
"""

import asyncio
import functools
import hashlib
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from graders.engine.fence import fence_draw
from graders.engine.judge import ChatRequest, ChatResult
from graders.engine.reward import (
    Expr,
    RewardInvalid,
    excerpt,
    number_or_none,
    reward_evaluate,
    reward_parse,
    reward_refs,
    reward_to_json,
)

T = TypeVar("T")

Kind = Literal["scalar", "pairwise", "rubric", "pairwise_rubric"]
KINDS: tuple[Kind, ...] = ("scalar", "pairwise", "rubric", "pairwise_rubric")
RUBRIC_KINDS: tuple[Kind, ...] = ("rubric", "pairwise_rubric")
PAIRWISE_KINDS: tuple[Kind, ...] = ("pairwise", "pairwise_rubric")

COMPARE_STEP, WINNER_FIELD = "compare", "winner"
RUBRIC_STEP, CRITERIA_FIELD = "rubric", "criteria"
CHECK_STEP, VERDICT_FIELD = "check", "verdict"

TASK_INPUTS = ("task.prompt", "task.instructions", "documents")
# Inputs the same for every response of a task: the fence nonce is derived from these alone,
# so a task's prompts share their opening (and a server's prompt-prefix cache).
TASK_LEVEL_INPUTS = (*TASK_INPUTS, "rubric")
GRADING_INPUTS: Mapping[Kind, tuple[str, ...]] = {
    "scalar": ("response",),
    "pairwise": ("response_a", "response_b"),
    "rubric": ("response", "rubric", "criterion"),
    "pairwise_rubric": ("response_a", "response_b", "rubric"),
}
# Inputs some grading step must show the judge, or the program grades without looking.
REQUIRED_INPUTS: Mapping[Kind, tuple[str, ...]] = {
    "scalar": ("response",),
    "pairwise": ("response_a", "response_b"),
    "rubric": ("response",),
    "pairwise_rubric": ("response_a", "response_b", "rubric"),
}
FIXED_REWARDS: Mapping[Kind, str] = {
    "pairwise": "its win rate in the group",
    "rubric": "the weight share of satisfied criteria",
    "pairwise_rubric": "its win rate in the group",
}
PROGRAM_KEYS = ("kind", "name", "description", "steps", "reward")
STEP_KEYS = ("id", "prompt", "output")
RESERVED_STEP_IDS = frozenset({"task"})
MAX_STEPS = 20
NO_CRITERIA = "the rubric has no criteria"
MAX_CRITERION_WEIGHT = 1000
# Generated rubrics are a handful to a few dozen criteria; a rubric's check step runs once per
# criterion per response, so a runaway list would multiply the judge calls of every grade.
MAX_LIST_ITEMS = 50
# Local models honour an enum but not minimum/maximum, so small integer ranges list their values.
SMALL_INT_RANGE = 20
FLOAT_GRID_STEPS = 20
TYPE_HELP = (
    "str, bool, int, float, int[low,high], float[low,high], enum[x,y,...], "
    f"list[<type>] (at most {MAX_LIST_ITEMS} items)"
)

# Starts every line of a trajectory's content (see response_render).
QUOTE_MARK = "| "

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\s*\}")
PARAMETRIZED_TYPE = re.compile(r"([a-z]+)\[(.*)\]", re.DOTALL)
ENUM_CHOICE = re.compile(r"[A-Za-z0-9_-]+")


# Output types ------------------------------------------------------------------------------


class SpecInvalid(ValueError):
    """A type spec that does not parse; the message says what is wrong."""


@dataclass(frozen=True)
class TextType:
    def __str__(self) -> str:
        return "str"

    def schema(self) -> dict[str, Any]:
        return {"type": "string"}

    def describe(self) -> str:
        return "a string"

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, str) else f"expected a string, got {excerpt(value)}"


@dataclass(frozen=True)
class BoolType:
    def __str__(self) -> str:
        return "bool"

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}

    def describe(self) -> str:
        return "true or false"

    def problem(self, value: object) -> str | None:
        return None if isinstance(value, bool) else f"expected true or false, got {excerpt(value)}"


@dataclass(frozen=True)
class NumberType:
    integer: bool
    low: float | None = None
    high: float | None = None

    def __str__(self) -> str:
        name = "int" if self.integer else "float"
        if self.low is None or self.high is None:
            return name
        return f"{name}[{_number_text(self.low)},{_number_text(self.high)}]"

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        if self.low is None or self.high is None:
            return schema
        low, high = _json_number(self.low), _json_number(self.high)
        schema |= {"minimum": low, "maximum": high}
        # Local servers (llama.cpp) constrain decoding by enum but ignore minimum/maximum, so a
        # range is also given as its allowed values: every integer of a small integer range, or
        # a grid of FLOAT_GRID_STEPS steps for a float range (0, 0.05, ..., 1 for [0,1]).
        if self.integer and high - low < SMALL_INT_RANGE:
            schema["enum"] = list(range(int(low), int(high) + 1))
        elif not self.integer:
            step = (high - low) / FLOAT_GRID_STEPS
            grid = [_json_number(round(low + n * step, 6)) for n in range(FLOAT_GRID_STEPS + 1)]
            schema |= {"enum": grid, "x-grid": True}
        return schema

    def describe(self) -> str:
        name = "an integer" if self.integer else "a number"
        if self.low is None or self.high is None:
            return name
        return f"{name} from {_number_text(self.low)} to {_number_text(self.high)}"

    def problem(self, value: object) -> str | None:
        number = number_or_none(value)
        if number is None or (self.integer and not number.is_integer()):
            return f"expected {self.describe()}, got {excerpt(value)}"
        if self.low is not None and self.high is not None and not self.low <= number <= self.high:
            return (
                f"{excerpt(value)} is outside [{_number_text(self.low)}, {_number_text(self.high)}]"
            )
        return None


@dataclass(frozen=True)
class EnumType:
    choices: tuple[str, ...]

    def __str__(self) -> str:
        return f"enum[{','.join(self.choices)}]"

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.choices)}

    def describe(self) -> str:
        return "one of " + ", ".join(json.dumps(choice) for choice in self.choices)

    def problem(self, value: object) -> str | None:
        return (
            None if value in self.choices else f"expected {self.describe()}, got {excerpt(value)}"
        )


@dataclass(frozen=True)
class CriterionType:
    def __str__(self) -> str:
        return "criterion"

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "weight": {"type": "number", "minimum": 0, "maximum": MAX_CRITERION_WEIGHT},
            },
            "required": ["text", "weight"],
            "additionalProperties": False,
        }

    def describe(self) -> str:
        return (
            'an object {"text": the criterion, "weight": its importance, a number above 0 '
            f"and at most {MAX_CRITERION_WEIGHT}}}"
        )

    def problem(self, value: object) -> str | None:
        if not isinstance(value, dict):
            return f"expected {self.describe()}, got {excerpt(value)}"
        text, weight = value.get("text"), number_or_none(value.get("weight"))
        if not isinstance(text, str) or not text.strip():
            return f"a criterion needs a non-empty text, got {excerpt(text)}"
        if weight is None or not 0 < weight <= MAX_CRITERION_WEIGHT:
            return f"a criterion weight must be above 0 and at most {MAX_CRITERION_WEIGHT}"
        return None


@dataclass(frozen=True)
class ListType:
    item: "TypeSpec"

    def __str__(self) -> str:
        return f"list[{self.item}]"

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema(), "maxItems": MAX_LIST_ITEMS}

    def describe(self) -> str:
        return f"a list of at most {MAX_LIST_ITEMS} items, each item {self.item.describe()}"

    def problem(self, value: object) -> str | None:
        if not isinstance(value, list):
            return f"expected a list, got {excerpt(value)}"
        if len(value) > MAX_LIST_ITEMS:
            return f"{len(value)} items; a list has at most {MAX_LIST_ITEMS}"
        for index, item in enumerate(value):
            problem = self.item.problem(item)
            if problem is not None:
                return f"item {index}: {problem}"
        return None


TypeSpec = TextType | BoolType | NumberType | EnumType | CriterionType | ListType
SIMPLE_TYPES: Mapping[str, TypeSpec] = {
    "str": TextType(),
    "bool": BoolType(),
    "int": NumberType(integer=True),
    "float": NumberType(integer=False),
    "criterion": CriterionType(),
}


def spec_parse(text: str) -> TypeSpec:
    """Parse a type spec such as "float[0,1]" or "list[str]"; SpecInvalid says what is wrong."""
    text = text.strip()
    if text in SIMPLE_TYPES:
        return SIMPLE_TYPES[text]
    parametrized = PARAMETRIZED_TYPE.fullmatch(text)
    name, inner = parametrized.groups() if parametrized else ("", "")
    match name:
        case "list":
            item = spec_parse(inner)
            if isinstance(item, ListType):
                raise SpecInvalid(f"{text!r}: a list of lists is not supported")
            return ListType(item)
        case "enum":
            return EnumType(_enum_choices(inner, text))
        case "int" | "float":
            return _number_range(name == "int", inner, text)
    raise SpecInvalid(f"unknown type {text!r}; use one of {TYPE_HELP}")


def _enum_choices(inner: str, text: str) -> tuple[str, ...]:
    choices = tuple(part.strip() for part in inner.split(","))
    if len(choices) < 2 or not all(ENUM_CHOICE.fullmatch(choice) for choice in choices):
        raise SpecInvalid(
            f"{text!r}: an enum needs two or more choices made of letters, digits, _ or -"
        )
    if len(set(choices)) != len(choices):
        raise SpecInvalid(f"{text!r}: enum choices must be distinct")
    return choices


def _number_range(integer: bool, inner: str, text: str) -> NumberType:
    bound = int if integer else float
    try:
        # Unpacking raises ValueError too, when there are not exactly two bounds.
        low, high = (float(bound(part.strip())) for part in inner.split(","))
    except ValueError:
        kind = "integers" if integer else "numbers"
        raise SpecInvalid(f"{text!r}: expected [low,high] with {kind} as bounds") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SpecInvalid(f"{text!r}: the bounds must be finite, with low below high")
    return NumberType(integer, low, high)


# Programs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    id: str
    prompt: str
    output: Mapping[str, TypeSpec]

    # A step is immutable, and every judge call of a step sends the same schema and output
    # instructions, so each is built once per step (cached_property writes to the instance's
    # __dict__, which a frozen dataclass allows; equality still compares the fields only).
    @functools.cached_property
    def placeholders(self) -> tuple[str, ...]:
        """The names the prompt uses, each once, in order of first use."""
        return tuple(dict.fromkeys(PLACEHOLDER.findall(self.prompt)))

    def schema(self) -> dict[str, Any]:
        """The JSON schema the judge's answer must satisfy (sent as ChatRequest.schema). The
        same object on every call: treat it as read-only."""
        return self._schema

    @functools.cached_property
    def _schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {name: spec.schema() for name, spec in self.output.items()},
            "required": list(self.output),
            "additionalProperties": False,
        }

    @functools.cached_property
    def output_instructions(self) -> str:
        """The reply format, spelled out in the prompt as well as sent as a schema: not every
        server enforces schemas."""
        fields = "\n".join(f'- "{name}": {spec.describe()}' for name, spec in self.output.items())
        return f"Reply with only a JSON object with exactly these fields:\n{fields}"


@dataclass(frozen=True)
class Program:
    """A validated program; build one with `program_validate`."""

    kind: Kind
    name: str
    description: str
    steps: tuple[Step, ...]
    reward: Expr | None = None

    @property
    def rubric_steps(self) -> tuple[Step, ...]:
        """The steps that write a rubric: up to and including the rubric step."""
        return self.steps[: _rubric_end(self)]

    @property
    def grading_steps(self) -> tuple[Step, ...]:
        """The steps that look at responses: all of them, or those after the rubric step."""
        return self.steps[_rubric_end(self) :]

    def to_json(self) -> dict[str, Any]:
        """The program as JSON, normalized (type specs and numbers written one way)."""
        document: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "description": self.description,
            "steps": [
                {
                    "id": step.id,
                    "prompt": step.prompt,
                    "output": {name: str(spec) for name, spec in step.output.items()},
                }
                for step in self.steps
            ],
        }
        if self.reward is not None:
            document["reward"] = reward_to_json(self.reward)
        return document

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON: the same program always hashes the same, whatever the
        key order or spacing it was written with."""
        canonical = json.dumps(
            self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def _rubric_end(program: Program) -> int:
    if program.kind not in RUBRIC_KINDS:
        return 0
    index = _step_index(program.steps, RUBRIC_STEP)
    return 0 if index is None else index + 1


def _step_index(steps: Sequence[Step], step_id: str) -> int | None:
    return next((index for index, step in enumerate(steps) if step.id == step_id), None)


# Validation ----------------------------------------------------------------------------------


class ProgramInvalid(ValueError):
    """The program cannot run; `messages` holds one actionable line per problem, each starting
    with the path of the offending part (``steps[1].prompt: ...``)."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


def program_validate(data: object) -> Program:
    """Parse and check a program document, reporting every problem at once.

    Shape problems (missing keys, bad types) are reported first and alone: checks of
    placeholders, roles and the reward on a half-parsed program would only add noise.
    """
    errors: list[str] = []
    program = _program_parse(data, errors)
    if program is None:
        raise ProgramInvalid(errors)
    problems = [
        *_placeholder_problems(program),
        *_role_problems(program),
        *_input_problems(program),
        *_reward_problems(program),
    ]
    if problems:
        raise ProgramInvalid(problems)
    return program


def _program_parse(data: object, errors: list[str]) -> Program | None:
    if not isinstance(data, dict):
        errors.append(f"program: expected a JSON object, got {excerpt(data)}")
        return None
    errors.extend(
        f"program: unknown key {key!r}; allowed: {', '.join(PROGRAM_KEYS)}"
        for key in data
        if key not in PROGRAM_KEYS
    )
    kind = _kind_parse(data.get("kind"), errors)
    name = _text_parse(data.get("name"), "name", errors)
    description = _text_parse(data.get("description", ""), "description", errors, empty=True)
    steps = _steps_parse(data.get("steps"), errors)
    reward = None
    if "reward" in data:
        try:
            reward = reward_parse(data["reward"])
        except RewardInvalid as invalid:
            errors.extend(invalid.messages)
    if errors or kind is None or name is None or description is None:
        return None
    return Program(kind, name, description, steps, reward)


def _kind_parse(value: object, errors: list[str]) -> Kind | None:
    for kind in KINDS:
        if value == kind:
            return kind
    errors.append(f"kind: expected one of {', '.join(KINDS)}; got {excerpt(value)}")
    return None


def _text_parse(value: object, path: str, errors: list[str], empty: bool = False) -> str | None:
    if isinstance(value, str) and (empty or value.strip()):
        return value
    wanted = "a string" if empty else "a non-empty string"
    errors.append(f"{path}: expected {wanted}, got {excerpt(value)}")
    return None


def _steps_parse(data: object, errors: list[str]) -> tuple[Step, ...]:
    if not isinstance(data, list) or not data:
        errors.append(f"steps: expected a non-empty list of steps, got {excerpt(data)}")
        return ()
    if len(data) > MAX_STEPS:
        errors.append(f"steps: {len(data)} steps; a program has at most {MAX_STEPS}")
    steps: list[Step] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(data):
        step = _step_parse(item, f"steps[{index}]", errors)
        if step is None:
            continue
        if step.id in first_index:
            errors.append(
                f"steps[{index}].id: duplicate id {step.id!r} (also steps[{first_index[step.id]}])"
            )
        first_index.setdefault(step.id, index)
        steps.append(step)
    return tuple(steps)


def _step_parse(data: object, path: str, errors: list[str]) -> Step | None:
    if not isinstance(data, dict):
        errors.append(f"{path}: expected an object with {', '.join(STEP_KEYS)}")
        return None
    errors.extend(
        f"{path}: unknown key {key!r}; allowed: {', '.join(STEP_KEYS)}"
        for key in data
        if key not in STEP_KEYS
    )
    step_id = _step_id_parse(data.get("id"), f"{path}.id", errors)
    prompt = _text_parse(data.get("prompt"), f"{path}.prompt", errors)
    output = _output_parse(data.get("output"), f"{path}.output", errors)
    if step_id is None or prompt is None or output is None:
        return None
    return Step(step_id, prompt, output)


def _step_id_parse(value: object, path: str, errors: list[str]) -> str | None:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        errors.append(
            f"{path}: expected an identifier (letters, digits and _, not starting with a digit), "
            f"got {excerpt(value)}"
        )
        return None
    if value in RESERVED_STEP_IDS:
        errors.append(
            f"{path}: {value!r} is reserved for {{task.prompt}} and {{task.instructions}}"
        )
        return None
    return value


def _output_parse(data: object, path: str, errors: list[str]) -> dict[str, TypeSpec] | None:
    if not isinstance(data, dict) or not data:
        errors.append(
            f'{path}: expected an object of field: type, e.g. {{"score": "float[0,1]"}}; '
            f"got {excerpt(data)}"
        )
        return None
    fields: dict[str, TypeSpec] = {}
    for name, text in data.items():
        if not IDENTIFIER.fullmatch(name):
            errors.append(f"{path}: field name {name!r} is not an identifier")
        elif not isinstance(text, str):
            errors.append(f"{path}.{name}: expected a type ({TYPE_HELP}), got {excerpt(text)}")
        else:
            try:
                fields[name] = spec_parse(text)
            except SpecInvalid as invalid:
                errors.append(f"{path}.{name}: {invalid}")
    return fields if len(fields) == len(data) else None


def _placeholder_problems(program: Program) -> Iterator[str]:
    """Each placeholder must be an input of its phase or an output of an earlier step of it."""
    writing, grading = program.rubric_steps, program.grading_steps
    grading_inputs = GRADING_INPUTS[program.kind]
    phases = (
        (0, writing, TASK_INPUTS, grading_inputs, ()),
        (len(writing), grading, TASK_INPUTS + grading_inputs, (), writing),
    )
    for offset, steps, inputs, unavailable, hidden in phases:
        for position, step in enumerate(steps):
            known = [*inputs, *(f"{s.id}.{f}" for s in steps[:position] for f in s.output)]
            for name in step.placeholders:
                if name not in known:
                    problem = _placeholder_problem(
                        name, known, steps[position:], unavailable, hidden
                    )
                    yield f"steps[{offset + position}].prompt: {problem}"


def _placeholder_problem(
    name: str,
    known: Sequence[str],
    not_run_yet: Sequence[Step],
    unavailable: Sequence[str],
    hidden: Sequence[Step],
) -> str:
    step_id = name.partition(".")[0]
    if "." in name and any(step.id == step_id for step in not_run_yet):
        return (
            f"{{{name}}} reads step {step_id!r}, which has not run yet; a step can only read "
            "the outputs of earlier steps"
        )
    if "." in name and any(step.id == step_id for step in hidden):
        return (
            f"{{{name}}} reads step {step_id!r}, which writes the rubric; rubrics are stored and "
            "may be edited, so grading steps read them only through {rubric} and {criterion}"
        )
    if name in unavailable:
        return (
            f"{{{name}}} is not available while writing the rubric, which sees only the task "
            "and its documents"
        )
    return f"unknown placeholder {{{name}}}; known: {', '.join(f'{{{k}}}' for k in known)}"


@dataclass(frozen=True)
class _Role:
    """A step the runtime looks for by id, and what its output and prompt must hold."""

    step_id: str
    field: str
    expected: str
    accepts: Callable[[TypeSpec | None], bool]
    uses: str | None = None


def _is_winner(spec: TypeSpec | None) -> bool:
    return isinstance(spec, EnumType) and set(spec.choices) in ({"a", "b"}, {"a", "b", "tie"})


def _is_criteria(spec: TypeSpec | None) -> bool:
    return isinstance(spec, ListType) and isinstance(spec.item, CriterionType)


COMPARE_ROLE = _Role(COMPARE_STEP, WINNER_FIELD, "enum[a,b,tie] (or enum[a,b])", _is_winner)
RUBRIC_ROLE = _Role(RUBRIC_STEP, CRITERIA_FIELD, "list[criterion]", _is_criteria)
CHECK_ROLE = _Role(
    CHECK_STEP, VERDICT_FIELD, "bool", lambda spec: isinstance(spec, BoolType), uses="criterion"
)
ROLES: Mapping[Kind, tuple[_Role, ...]] = {
    "scalar": (),
    "pairwise": (COMPARE_ROLE,),
    "rubric": (RUBRIC_ROLE, CHECK_ROLE),
    "pairwise_rubric": (RUBRIC_ROLE, COMPARE_ROLE),
}


def _role_problems(program: Program) -> Iterator[str]:
    for role in ROLES[program.kind]:
        index = _step_index(program.steps, role.step_id)
        grading_role = role is not RUBRIC_ROLE
        after = " after the 'rubric' step" if grading_role and program.kind in RUBRIC_KINDS else ""
        if index is None:
            yield (
                f"steps: a {program.kind} program needs a step with id {role.step_id!r}{after} "
                f"whose output has {role.field}: {role.expected}"
            )
            continue
        step = program.steps[index]
        if grading_role and step not in program.grading_steps:
            yield f"steps[{index}]: the {role.step_id!r} step must come{after}"
        spec = step.output.get(role.field)
        if not role.accepts(spec):
            got = f"; got {spec}" if spec is not None else f"; it has no field {role.field!r}"
            yield (
                f"steps[{index}].output.{role.field}: the {role.step_id!r} step must output "
                f"{role.field}: {role.expected}{got}"
            )
        if role.uses is not None and role.uses not in step.placeholders:
            yield (
                f"steps[{index}].prompt: the {role.step_id!r} step must use {{{role.uses}}}; "
                "it runs once per criterion"
            )


def _input_problems(program: Program) -> Iterator[str]:
    used = {name for step in program.grading_steps for name in step.placeholders}
    for name in REQUIRED_INPUTS[program.kind]:
        if name not in used:
            yield (
                f"steps: no step uses {{{name}}}; a {program.kind} program must show it to the "
                "judge"
            )


def _reward_problems(program: Program) -> Iterator[str]:
    if program.kind != "scalar":
        if program.reward is not None:
            yield (
                f"reward: a {program.kind} program takes no reward expression; its reward is "
                f"{FIXED_REWARDS[program.kind]}"
            )
        return
    if program.reward is None:
        yield (
            "reward: a scalar program needs a reward expression over number outputs, "
            'e.g. {"mean": ["verify.score"]}'
        )
        return
    specs = {f"{s.id}.{name}": spec for s in program.steps for name, spec in s.output.items()}
    numbers = [name for name, spec in specs.items() if isinstance(spec, NumberType)]
    refs = list(reward_refs(program.reward))
    if not refs:
        yield "reward: the expression reads no step output, so every response would score the same"
    for path, ref in refs:
        spec = specs.get(str(ref))
        if spec is None:
            yield f"{path}: unknown output {ref}; number outputs: {', '.join(numbers) or 'none'}"
        elif not isinstance(spec, NumberType):
            yield f"{path}: {ref} is {spec}; the reward can only read int or float outputs"


# Runtime inputs and results ------------------------------------------------------------------


class DocumentInput(NamedTuple):
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class TaskInput:
    id: str
    prompt: str
    instructions: str = ""
    documents: tuple[DocumentInput, ...] = ()


@dataclass(frozen=True)
class ResponseInput:
    """A response: plain text, or an agent trajectory as chat messages (role, content,
    tool_calls with name and arguments, tool_call_id, name), which takes precedence."""

    id: str
    text: str = ""
    messages: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class Criterion:
    id: str
    text: str
    weight: float = 1.0


@dataclass(frozen=True)
class StepTrace:
    """One judge call of one step, enough to replay or audit it. `label` tells repeated runs of a
    step apart (which criterion, which ordered pair)."""

    step_id: str
    label: str
    messages: tuple[dict[str, str], ...]
    text: str | None
    parsed: dict[str, Any] | None
    error: str | None
    cached: bool
    request_key: str
    tokens_in: int
    tokens_out: int
    cost: float
    latency_s: float

    @classmethod
    def of(
        cls,
        step_id: str,
        label: str,
        messages: tuple[dict[str, str], ...],
        result: ChatResult,
        error: str | None,
    ) -> "StepTrace":
        """The trace of one call: what was sent, what came back, what it cost."""
        return cls(
            step_id=step_id,
            label=label,
            messages=messages,
            text=result.text,
            parsed=result.parsed,
            error=error,
            cached=result.cached,
            request_key=result.request_key,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            cost=result.cost,
            latency_s=result.latency_s,
        )


@dataclass(frozen=True)
class CriterionResult:
    criterion: Criterion
    passed: bool | None
    error: str | None


@dataclass(frozen=True)
class Comparison:
    """One directed comparison: `first` was shown to the judge as response A, `second` as B."""

    first: str
    second: str
    winner: Literal["a", "b", "tie"] | None
    error: str | None
    trace: tuple[StepTrace, ...]

    def score_for(self, response_id: str) -> float | None:
        """1 for a win, 0.5 for a tie, 0 for a loss; None when the comparison failed."""
        if self.winner is None:
            return None
        if self.winner == "tie":
            return 0.5
        won = self.first if self.winner == "a" else self.second
        return 1.0 if won == response_id else 0.0


@dataclass(frozen=True)
class Grade:
    """The grade of one response. `reward` is None exactly when `error` says why: a failed step
    fails the grade, it never becomes a score."""

    response_id: str
    reward: float | None
    error: str | None
    trace: tuple[StepTrace, ...] = ()
    criteria: tuple[CriterionResult, ...] = ()
    all_pass: bool | None = None
    comparisons: tuple[Comparison, ...] = ()


@dataclass(frozen=True)
class GeneratedRubric:
    task_id: str
    criteria: tuple[Criterion, ...]
    error: str | None
    trace: tuple[StepTrace, ...]


class Judge(Protocol):
    """What the runtime needs of a judge; graders.engine.judge.JudgeClient is one."""

    async def complete(self, request: ChatRequest) -> ChatResult: ...


# Runtime -------------------------------------------------------------------------------------


async def grade_scalar(
    program: Program, task: TaskInput, response: ResponseInput, judge: Judge
) -> Grade:
    """Grade one response: run every step, then evaluate the reward expression."""
    if program.kind != "scalar" or program.reward is None:
        raise ValueError(f"grade_scalar needs a scalar program; {program.name!r} is {program.kind}")
    inputs = {**_task_values(task), "response": response_render(response)}
    run = await _steps_run(program.steps, inputs, judge)
    if run.error is not None:
        return Grade(response.id, None, run.error, run.trace)
    return Grade(response.id, reward_evaluate(program.reward, run.outputs), None, run.trace)


async def rubric_generate(program: Program, task: TaskInput, judge: Judge) -> GeneratedRubric:
    """Write a rubric for a task. The writing steps are given the task's prompt, instructions and
    documents and nothing else: no response and no reference answer can reach them."""
    _kind_require(program, RUBRIC_KINDS)
    run = await _steps_run(program.rubric_steps, _task_values(task), judge)
    if run.error is not None:
        return GeneratedRubric(task.id, (), run.error, run.trace)
    criteria = tuple(
        Criterion(f"c{number}", item["text"].strip(), float(item["weight"]))
        for number, item in enumerate(run.outputs[RUBRIC_STEP][CRITERIA_FIELD], 1)
    )
    error = None if criteria else "the rubric step wrote no criteria"
    return GeneratedRubric(task.id, criteria, error, run.trace)


async def grade_rubric(
    program: Program,
    task: TaskInput,
    rubric: Sequence[Criterion],
    response: ResponseInput,
    judge: Judge,
) -> Grade:
    """Check a response against each criterion of a rubric (generated, expert or reviewed).

    reward = sum of the weights of satisfied criteria / sum of all weights; all_pass when every
    criterion is satisfied. The criteria are checked concurrently.
    """
    _kind_require(program, ("rubric",))
    if not rubric:
        return Grade(response.id, None, NO_CRITERIA)
    inputs = {
        **_task_values(task),
        "response": response_render(response),
        "rubric": rubric_render(rubric),
    }
    per_criterion = _criterion_steps(program.grading_steps)
    once = [step for step in program.grading_steps if step not in per_criterion]
    shared = await _steps_run(once, inputs, judge)
    if shared.error is not None:
        return Grade(response.id, None, shared.error, shared.trace)
    runs = await gather_all(
        _steps_run(
            per_criterion, {**shared.values, "criterion": c.text}, judge, f"criterion {c.id}"
        )
        for c in rubric
    )
    results = tuple(
        CriterionResult(c, run.value(CHECK_STEP, VERDICT_FIELD), run.error)
        for c, run in zip(rubric, runs, strict=True)
    )
    trace = shared.trace + tuple(entry for run in runs for entry in run.trace)
    return _rubric_grade(response.id, results, trace)


async def grade_group_pairwise(
    program: Program,
    task: TaskInput,
    responses: Sequence[ResponseInput],
    judge: Judge,
    rubric: Sequence[Criterion] | None = None,
) -> list[Grade]:
    """Grade a group of responses to one task by comparing every pair, in both orders.

    Each comparison scores 1 for the winner and 0 for the loser, 0.5 each for a tie; a
    response's reward is its mean score over its comparisons, i.e. its win rate against the n-1
    others with ties as half a win. A failed comparison is kept in both responses' grades and
    left out of both denominators: a judge failure is neither a win nor a loss. A response whose
    comparisons all failed, or that has no opponent, gets no reward and the reason.

    A pairwise_rubric program needs the task's `rubric`; a pairwise program takes none.
    """
    _kind_require(program, PAIRWISE_KINDS)
    if (program.kind == "pairwise_rubric") != (rubric is not None):
        raise ValueError("a pairwise_rubric program needs a rubric; a pairwise program takes none")
    if len({response.id for response in responses}) != len(responses):
        raise ValueError("response ids must be unique within a group")
    if len(responses) < 2:
        reason = "a pairwise reward needs at least two responses in the group"
        return [Grade(response.id, None, reason) for response in responses]
    if rubric is not None and not rubric:
        return [Grade(response.id, None, NO_CRITERIA) for response in responses]
    inputs = _task_values(task)
    if rubric is not None:
        inputs["rubric"] = rubric_render(rubric)
    texts = {response.id: response_render(response) for response in responses}
    pairs = [(a.id, b.id) for a in responses for b in responses if a.id != b.id]
    runs = await gather_all(
        _steps_run(
            program.grading_steps,
            {**inputs, "response_a": texts[a], "response_b": texts[b]},
            judge,
            f"A={a}, B={b}",
        )
        for a, b in pairs
    )
    comparisons = [
        Comparison(a, b, run.value(COMPARE_STEP, WINNER_FIELD), run.error, run.trace)
        for (a, b), run in zip(pairs, runs, strict=True)
    ]
    return [_win_rate_grade(response.id, comparisons) for response in responses]


def grading_requests(program: Program, responses: int, criteria: int) -> int:
    """The judge requests (cache hits included) that grading one task's `responses` against a
    stored rubric of `criteria` criteria makes when no step fails: what progress counts to."""
    steps = program.grading_steps
    if program.kind in RUBRIC_KINDS and not criteria:
        return 0
    if program.kind == "scalar":
        return responses * len(steps)
    if program.kind == "rubric":
        per_criterion = len(_criterion_steps(steps))
        return responses * (len(steps) - per_criterion + criteria * per_criterion)
    return responses * (responses - 1) * len(steps)  # every ordered pair


def _kind_require(program: Program, kinds: Sequence[Kind]) -> None:
    if program.kind not in kinds:
        raise ValueError(
            f"this needs a {' or '.join(kinds)} program; {program.name!r} is {program.kind}"
        )


def _rubric_grade(
    response_id: str, results: tuple[CriterionResult, ...], trace: tuple[StepTrace, ...]
) -> Grade:
    failures = [result.error for result in results if result.error is not None]
    if failures:
        error = f"{len(failures)} of {len(results)} criterion checks failed; first: {failures[0]}"
        return Grade(response_id, None, error, trace, results)
    total = math.fsum(result.criterion.weight for result in results)
    satisfied = math.fsum(result.criterion.weight for result in results if result.passed)
    all_pass = all(result.passed for result in results)
    return Grade(response_id, satisfied / total, None, trace, results, all_pass)


def _win_rate_grade(response_id: str, comparisons: Sequence[Comparison]) -> Grade:
    involved = tuple(c for c in comparisons if response_id in (c.first, c.second))
    trace = tuple(entry for comparison in involved for entry in comparison.trace)
    scores = [s for c in involved if (s := c.score_for(response_id)) is not None]
    if not scores:
        error = f"all {len(involved)} comparisons failed; first: {involved[0].error}"
        return Grade(response_id, None, error, trace, comparisons=involved)
    reward = math.fsum(scores) / len(scores)
    return Grade(response_id, reward, None, trace, comparisons=involved)


def _criterion_steps(steps: Sequence[Step]) -> tuple[Step, ...]:
    """The steps that must run once per criterion: those that use {criterion} or read the
    output of a step that does."""
    dependent: list[Step] = []
    for step in steps:
        readers = {"criterion", *(f"{s.id}.{name}" for s in dependent for name in s.output)}
        if readers.intersection(step.placeholders):
            dependent.append(step)
    return tuple(dependent)


@dataclass(frozen=True)
class _Run:
    """What a sequence of steps produced: parsed outputs by step id, every placeholder value a
    later step could read, the trace, and the first failure."""

    outputs: Mapping[str, Mapping[str, Any]]
    values: Mapping[str, str]
    trace: tuple[StepTrace, ...]
    error: str | None

    def value(self, step_id: str, field: str) -> Any:
        """One output field, or None when the run failed."""
        return None if self.error is not None else self.outputs[step_id][field]


async def _steps_run(
    steps: Sequence[Step], inputs: Mapping[str, str], judge: Judge, label: str = ""
) -> _Run:
    """Run steps in order, each reading `inputs` and earlier outputs; stop at the first failure,
    since a later step would read an output that does not exist."""
    values = dict(inputs)
    outputs: dict[str, dict[str, Any]] = {}
    trace: list[StepTrace] = []
    for step in steps:
        messages = _messages_render(step, values)
        name = f"{step.id} [{label}]" if label else step.id
        result = await judge.complete(ChatRequest(messages, step.schema(), name))
        output = _step_output(step, result)
        trace.append(_trace_entry(step, label, messages, result, output))
        if isinstance(output, str):
            where = f" ({label})" if label else ""
            return _Run(outputs, values, tuple(trace), f"step {step.id}{where}: {output}")
        outputs[step.id] = output
        values |= {f"{step.id}.{field}": _value_text(value) for field, value in output.items()}
    return _Run(outputs, values, tuple(trace), None)


def _step_output(step: Step, result: ChatResult) -> dict[str, Any] | str:
    """The step's fields from the judge's answer, or why the answer cannot be used. The client
    validates against the schema too; checking again here keeps a lenient client or a cached
    answer from turning into a score."""
    if result.error is not None:
        return result.error
    if result.parsed is None:
        return "the judge returned no JSON object"
    for name, spec in step.output.items():
        if name not in result.parsed:
            return f"the output has no field {name!r}"
        problem = spec.problem(result.parsed[name])
        if problem is not None:
            return f"output {name}: {problem}"
    return {name: result.parsed[name] for name in step.output}


def _trace_entry(
    step: Step,
    label: str,
    messages: tuple[dict[str, str], ...],
    result: ChatResult,
    output: dict[str, Any] | str,
) -> StepTrace:
    return StepTrace.of(
        step.id, label, messages, result, output if isinstance(output, str) else None
    )


async def gather_all(coroutines: Iterable[Awaitable[T]]) -> list[T]:
    """Await concurrently, so the judge client's semaphore can keep many calls in flight.

    If one raises (BudgetExhausted, CallsStopped), the others still finish, so answers already
    paid for reach the client's cache and a resumed job does not pay twice; then the first
    exception is raised.
    """
    outcomes = await asyncio.gather(*coroutines, return_exceptions=True)
    results: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        results.append(outcome)
    return results


# Rendering -----------------------------------------------------------------------------------


def _messages_render(step: Step, values: Mapping[str, str]) -> tuple[dict[str, str], ...]:
    """The system and user messages of one step, every placeholder value fenced as data."""
    instructions = _output_instructions(step)
    shared = [values[name] for name in step.placeholders if name in TASK_LEVEL_INPUTS]
    fence = fence_draw(
        [step.prompt, instructions, *(values[name] for name in step.placeholders)],
        derive_from=[step.prompt, instructions, *shared],
    )
    body = PLACEHOLDER.sub(lambda match: fence.wrap(values[match.group(1)]), step.prompt)
    return (
        {"role": "system", "content": fence.notice()},
        {"role": "user", "content": f"{body}\n\n{instructions}"},
    )


def _output_instructions(step: Step) -> str:
    return step.output_instructions


def _task_values(task: TaskInput) -> dict[str, str]:
    return {
        "task.prompt": task.prompt,
        "task.instructions": task.instructions or "(no instructions)",
        "documents": documents_render(task.documents),
    }


def _value_text(value: Any) -> str:
    """How an earlier step's output reads inside a later prompt."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        lines = (f"{number}. {_value_text(item)}" for number, item in enumerate(value, 1))
        return "\n".join(lines) or "(none)"
    return json.dumps(value, ensure_ascii=False)


def documents_render(documents: Sequence[DocumentInput]) -> str:
    """All task documents as one text, each headed by its number and title."""
    if not documents:
        return "(no documents)"
    return "\n\n".join(
        f"Document {number}: {document.title or document.id}\n{document.text}"
        for number, document in enumerate(documents, 1)
    )


def response_render(response: ResponseInput) -> str:
    """A response as the judge reads it: its text, or a trajectory as numbered turns with each
    tool call (name and arguments) and each tool result.

    In a trajectory, only the renderer starts a line without QUOTE_MARK: every line of content,
    tool output and arguments is quoted, and the names and ids in a header are folded onto it,
    so no message (a policy's output, a tool's reply) can write a line that reads as a turn
    header or a tool call. Every line break str.splitlines knows counts, not only "\\n"."""
    if response.messages is None:
        return response.text
    return "\n\n".join(
        _turn_render(number, message) for number, message in enumerate(response.messages, 1)
    )


def _turn_render(number: int, message: Mapping[str, Any]) -> str:
    role = _one_line(message.get("role", "unknown"))
    header = f"[Turn {number}] {role}"
    if role == "tool":
        about = [_one_line(message[key]) for key in ("name", "tool_call_id") if message.get(key)]
        header = f"[Turn {number}] tool result" + (f" ({', '.join(about)})" if about else "")
    lines = [header]
    content = message.get("content")
    if content:
        lines += _quoted(content if isinstance(content, str) else json.dumps(content))
    for call in message.get("tool_calls") or ():
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        call_id = f" (call {_one_line(call['id'])})" if call.get("id") else ""
        first, *rest = arguments.splitlines() or [""]
        lines.append(f"-> tool call {_one_line(call.get('name', '?'))}{call_id}: {first}")
        lines += _quoted("\n".join(rest))
    return "\n".join(lines)


def _quoted(text: str) -> list[str]:
    return [f"{QUOTE_MARK}{line}" if line else QUOTE_MARK.rstrip() for line in text.splitlines()]


def _one_line(value: Any) -> str:
    """`value` as text on one line: every run of whitespace, line breaks included, one space."""
    return " ".join(str(value).split())


def rubric_render(criteria: Sequence[Criterion]) -> str:
    """A rubric as a numbered list with weights, in the order of the criteria's ids (c1, c2,
    ..., c10: the order they were written in), not the order a reviewer arranged them in: a
    reorder changes no grade, so it must change no prompt and no cache key either."""
    return "\n".join(
        f"{number}. {criterion.text} (weight {_number_text(criterion.weight)})"
        for number, criterion in enumerate(sorted(criteria, key=_criterion_order), 1)
    )


def _criterion_order(criterion: Criterion) -> list[str | int]:
    """A sort key for criterion ids in their natural order: c2 before c10."""
    return [int(part) if part.isdigit() else part for part in _DIGIT_RUNS.split(criterion.id)]


_DIGIT_RUNS = re.compile(r"(\d+)")


def _json_number(value: float) -> int | float:
    """A bound as people write it: 1, not 1.0."""
    return int(value) if value.is_integer() else value


def _number_text(value: float) -> str:
    return str(_json_number(value))
