"""The JSONL import records of FORMATS.md as strict schemas.

Every limit here is documented in the README; a value over a limit is an error that names the
field, never a silent truncation. Unknown extra fields are ignored so that files written for a
newer version (new optional fields) still import.
"""

import hashlib
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from labeling.json_input import JsonTooDeep, json_depth_check

MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_ID = 200
MAX_PROMPT = 200_000
MAX_DOCUMENT_TEXT = 2_000_000
MAX_DOCUMENTS = 100
MAX_RESPONSE_TEXT = 1_000_000
MAX_MESSAGES = 2_000
MAX_RUBRIC_ITEMS = 200
MAX_CRITERION_TEXT = 5_000

DOT_SEGMENTS = frozenset({".", ".."})


def _id_linkable(value: str) -> str:
    """Ids go into links as they are, slashes included (a task's page is /p/<project>/tasks/
    <id>/), and a browser resolves a "." or ".." segment before it asks, so "a/../../admin"
    would lead to another page. reverse() percent-encodes "%" and the backslash (as %25 and
    %5C), which a browser leaves as they are, so ids such as "%2e%2e" or "..%5c.." holding
    them stay inside the task's link and need no refusal. A line break matches no URL pattern
    (a page listing the id could not link to it)."""
    if "\n" in value or "\r" in value:
        raise ValueError("a line break is not allowed in an id")
    if "." in value and DOT_SEGMENTS.intersection(value.split("/")):
        raise ValueError(
            'a "." or ".." between slashes is not allowed in an id: a link to it would lead '
            "to another page"
        )
    return value


Id = Annotated[str, Field(min_length=1, max_length=MAX_ID), AfterValidator(_id_linkable)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
SplitName = Literal["unassigned", "meta", "selection", "train", "eval"]
AuthorKindName = Literal["expert", "generated", "reviewed"]


def _json_plain(value: Any) -> Any:
    """Free JSON (metadata, tool arguments) may hold anything JSON can, except numbers the
    database's JSON cannot store (NaN and infinities) and nesting deeper than MAX_JSON_DEPTH:
    the only fields where the schema lets a line nest freely."""
    json_depth_check(value)
    return _json_finite(value)


def _json_finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinite numbers are not allowed in JSON")
    if isinstance(value, dict):
        for item in value.values():
            _json_finite(item)
    elif isinstance(value, list):
        for item in value:
            _json_finite(item)
    return value


FreeJson = Annotated[dict[str, Any], AfterValidator(_json_plain)]


class Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    def key(self) -> tuple[Any, ...]:
        """Identity within a project: two records with the same key describe the same thing."""
        raise NotImplementedError

    def fingerprint(self) -> bytes:
        """Digest of the content, to tell a harmless repeat from a conflicting duplicate."""
        return hashlib.blake2b(self.model_dump_json().encode(), digest_size=16).digest()


class DimensionRecord(Record):
    type: Literal["dimension"]
    name: Annotated[str, Field(min_length=1, max_length=100)]
    description: Annotated[str, Field(max_length=10_000)] = ""

    def key(self) -> tuple[Any, ...]:
        return ("dimension", self.name)


class DocumentIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    id: Id
    title: Annotated[str, Field(max_length=500)] = ""
    text: Annotated[str, Field(max_length=MAX_DOCUMENT_TEXT)]


class TaskRecord(Record):
    type: Literal["task"]
    id: Id
    domain: Annotated[str, Field(max_length=100)] = ""
    prompt: Annotated[str, Field(min_length=1, max_length=MAX_PROMPT)]
    instructions: Annotated[str, Field(max_length=MAX_PROMPT)] = ""
    documents: Annotated[list[DocumentIn], Field(max_length=MAX_DOCUMENTS)] = Field(
        default_factory=list
    )
    split: SplitName | None = None
    metadata: FreeJson = Field(default_factory=dict)

    @model_validator(mode="after")
    def documents_unique(self) -> "TaskRecord":
        ids = [document.id for document in self.documents]
        if len(ids) != len(set(ids)):
            raise ValueError("documents: document ids must be unique within a task")
        return self

    def key(self) -> tuple[Any, ...]:
        return ("task", self.id)


class ToolCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    id: Annotated[str, Field(max_length=MAX_ID)] | None = None
    name: Name
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def arguments_finite(cls, value: dict[str, Any] | str) -> dict[str, Any] | str:
        return _json_plain(value)


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: Annotated[str, Field(max_length=MAX_RESPONSE_TEXT)] | None = ""
    name: Annotated[str, Field(max_length=200)] | None = None
    tool_calls: Annotated[list[ToolCall], Field(max_length=100)] | None = None
    tool_call_id: Annotated[str, Field(max_length=MAX_ID)] | None = None


class ResponseRecord(Record):
    type: Literal["response"]
    id: Id
    task: Id
    content: Annotated[str, Field(max_length=MAX_RESPONSE_TEXT)] | None = None
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)] | None = None
    source: Annotated[str, Field(max_length=200)] = ""
    metadata: FreeJson = Field(default_factory=dict)

    @model_validator(mode="after")
    def content_or_messages(self) -> "ResponseRecord":
        if (self.content is None) == (self.messages is None):
            raise ValueError("content: give exactly one of 'content' (text) or 'messages'")
        return self

    def key(self) -> tuple[Any, ...]:
        return ("response", self.id)


class RubricItemIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    id: Annotated[str, Field(min_length=1, max_length=100)]
    text: Annotated[str, Field(min_length=1, max_length=MAX_CRITERION_TEXT)]
    weight: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 1.0


class RubricRecord(Record):
    type: Literal["rubric"]
    task: Id
    author: AuthorKindName = "expert"
    origin: Annotated[str, Field(max_length=200)] = ""
    items: Annotated[list[RubricItemIn], Field(min_length=1, max_length=MAX_RUBRIC_ITEMS)]

    @model_validator(mode="after")
    def items_unique(self) -> "RubricRecord":
        ids = [item.id for item in self.items]
        if len(ids) != len(set(ids)):
            raise ValueError("items: item ids must be unique within a rubric")
        return self

    def key(self) -> tuple[Any, ...]:
        return ("rubric", self.task, self.author, self.origin)


class CriterionGradeRecord(Record):
    type: Literal["criterion_grade"]
    response: Id
    item: Annotated[str, Field(min_length=1, max_length=100)]
    passed: StrictBool
    annotator: Name = "imported"
    rubric: AuthorKindName = "expert"
    origin: Annotated[str, Field(max_length=200)] = ""
    note: Annotated[str, Field(max_length=10_000)] = ""

    def key(self) -> tuple[Any, ...]:
        return (
            "criterion_grade",
            self.response,
            self.rubric,
            self.origin,
            self.item,
            self.annotator,
        )


class ScoreRecord(Record):
    type: Literal["score"]
    response: Id
    value: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    provider: Literal["true_grader", "expert", "judge"] = "true_grader"

    def key(self) -> tuple[Any, ...]:
        return ("score", self.response, self.provider)


class PreferenceRecord(Record):
    type: Literal["preference"]
    a: Id
    b: Id
    choice: Literal["a", "b", "tie"]
    confidence: Literal[0, 1, 2] | None = None
    dimension: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    provider: Literal["human", "synthetic", "judge"] = "human"
    annotator: Name | None = None
    slot_order: Literal["ab", "ba", ""] = ""
    seconds_spent: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def sides_and_annotator(self) -> "PreferenceRecord":
        if self.a == self.b:
            raise ValueError("b: a response cannot be compared with itself")
        if self.provider == "human" and self.annotator is None:
            raise ValueError("annotator: a human preference needs an annotator")
        return self

    @property
    def annotator_name(self) -> str:
        return self.annotator if self.annotator is not None else self.provider

    @property
    def winner(self) -> str | None:
        """The winning response id, independent of which side it was written on."""
        return {"a": self.a, "b": self.b}.get(self.choice)

    def key(self) -> tuple[Any, ...]:
        low, high = sorted((self.a, self.b))
        return ("preference", low, high, self.dimension, self.annotator_name)

    def fingerprint(self) -> bytes:
        # The same label written as (a, b, "a") or (b, a, "b") is the same label.
        low, high = sorted((self.a, self.b))
        canonical = (low, high, self.winner, self.confidence, self.provider, self.dimension)
        return hashlib.blake2b(repr(canonical).encode(), digest_size=16).digest()


class JudgeScoreRecord(Record):
    type: Literal["judge_score"]
    judge: Name
    response: Id
    dimension: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    run: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    score: Finite | None

    def key(self) -> tuple[Any, ...]:
        return ("judge_score", self.judge, self.response, self.dimension, self.run)


LevelName = Literal["bad", "ok", "good"]
LEVEL_RANK = {"bad": 0, "ok": 1, "good": 2}
StageName = Annotated[str, Field(min_length=1, max_length=50)]


class UndrawnCellIn(BaseModel):
    """A cell of the synthesis that has no draw (its steering failed, say): it still counts
    among the synthesis's cells (an extension, so that a funnel round-trips)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    id: Id
    task: Id
    dimension: Annotated[str, Field(min_length=1, max_length=100)]
    levels: Annotated[list[LevelName], Field(min_length=2, max_length=2)]
    agent: Annotated[str, Field(max_length=200)] = ""
    error: Annotated[str, Field(max_length=10_000)] = ""

    @model_validator(mode="after")
    def levels_ordered(self) -> "UndrawnCellIn":
        _levels_check(self.levels)
        return self


def _levels_check(levels: list[str]) -> None:
    low, high = levels
    if LEVEL_RANK[low] >= LEVEL_RANK[high]:
        raise ValueError(
            f"levels: two different levels, lower first (bad < ok < good), not {low!r} then "
            f"{high!r}"
        )


class SynthesisRecord(Record):
    """A synthesis: its filter cascade (judge names, in order) and retries R."""

    type: Literal["synthesis"]
    id: Id
    judges: Annotated[list[Name], Field(min_length=1, max_length=20)]
    retries: Annotated[int, Field(ge=0, le=100)] = 2
    undrawn_cells: Annotated[list[UndrawnCellIn], Field(max_length=100_000)] = Field(
        default_factory=list
    )

    @field_validator("undrawn_cells")
    @classmethod
    def cells_unique(cls, value: list[UndrawnCellIn]) -> list[UndrawnCellIn]:
        ids = [cell.id for cell in value]
        if len(ids) != len(set(ids)):
            raise ValueError("a cell may be listed only once")
        return value

    @field_validator("judges")
    @classmethod
    def judges_distinct(cls, value: list[str]) -> list[str]:
        if len(value) != len(set(value)):
            raise ValueError("a judge may appear only once in the cascade")
        return value

    def key(self) -> tuple[Any, ...]:
        return ("synthesis", self.id)


class VoteIn(BaseModel):
    """One filter judge's verdict on a draw. `agrees` null: no verdict after its re-asks, which
    vetoes like false; `slot_order` 'ab' showed the lower level first (extensions, optional)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    judge: Name
    agrees: StrictBool | None
    slot_order: Literal["ab", "ba", ""] = ""
    answers: Annotated[list[Any], Field(max_length=10), AfterValidator(_json_plain)] = Field(
        default_factory=list
    )


class StageUsage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    calls: Annotated[int, Field(ge=0)] = 0
    tokens: Annotated[int, Field(ge=0)] | None = None


DrawOutcomeName = Literal["kept", "vetoed", "failed", "pending"]


class SynthesisDrawRecord(Record):
    """One draw of a cell (FORMATS.md "Synthesis records"). The cell's fields (task,
    dimension, levels, agent) repeat on each of its draws and must agree. `outcome` is
    optional: derived from the votes, it is needed only for a draw that neither went through
    every judge nor was vetoed (failed or pending)."""

    type: Literal["synthesis_draw"]
    synthesis: Id
    cell: Id
    task: Id
    dimension: Annotated[str, Field(min_length=1, max_length=100)]
    levels: Annotated[list[LevelName], Field(min_length=2, max_length=2)]
    retry: Annotated[int, Field(ge=0, le=100)]
    agent: Annotated[str, Field(max_length=200)] = ""
    responses: Annotated[list[Id], Field(min_length=2, max_length=2)] | None = None
    votes: Annotated[list[VoteIn], Field(max_length=20)] = Field(default_factory=list)
    cost: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    outcome: DrawOutcomeName | None = None
    error: Annotated[str, Field(max_length=10_000)] = ""
    usage: dict[StageName, StageUsage] = Field(default_factory=dict)

    @model_validator(mode="after")
    def draw_consistent(self) -> "SynthesisDrawRecord":
        _levels_check(self.levels)
        if self.responses is not None and self.responses[0] == self.responses[1]:
            raise ValueError("responses: the two responses must differ")
        for position, vote in enumerate(self.votes[:-1]):
            if vote.agrees is not True:
                raise ValueError(
                    f"votes: vote {position + 1} is a veto, so the cascade stops there and no "
                    "later judge votes"
                )
        vetoed = bool(self.votes) and self.votes[-1].agrees is not True
        if vetoed and self.outcome not in {None, "vetoed"}:
            raise ValueError(f"outcome: {self.outcome!r} disagrees with the votes, which veto")
        if not vetoed and self.outcome == "vetoed":
            raise ValueError("outcome: 'vetoed' but no vote vetoes")
        return self

    def outcome_for(self, judges: list[str]) -> str:
        """The draw's outcome under its synthesis's cascade; ValueError naming the field when
        the votes do not follow the cascade or an unfinished draw does not say so."""
        for position, vote in enumerate(self.votes):
            if position >= len(judges) or vote.judge != judges[position]:
                expected = judges[position] if position < len(judges) else "no judge"
                raise ValueError(
                    f"votes: vote {position + 1} is by {vote.judge!r}; the cascade "
                    f"{judges} has {expected!r} there"
                )
        if self.votes and self.votes[-1].agrees is not True:
            return "vetoed"
        complete = len(self.votes) == len(judges)
        if self.outcome is None:
            if not complete:
                raise ValueError(
                    f"outcome: votes from {len(self.votes)} of {len(judges)} judges and no "
                    "veto; give 'outcome' ('failed' or 'pending') for an unfinished draw"
                )
            return "kept"
        if (self.outcome == "kept") != complete:
            raise ValueError(
                f"outcome: {self.outcome!r} but {len(self.votes)} of {len(judges)} judges agreed"
            )
        return self.outcome

    @property
    def usage_json(self) -> dict[str, dict[str, int]]:
        return {stage: u.model_dump(exclude_none=True) for stage, u in sorted(self.usage.items())}

    def key(self) -> tuple[Any, ...]:
        return ("synthesis_draw", self.synthesis, self.cell, self.retry)


AnyRecord = Annotated[
    DimensionRecord
    | TaskRecord
    | ResponseRecord
    | RubricRecord
    | CriterionGradeRecord
    | ScoreRecord
    | PreferenceRecord
    | JudgeScoreRecord
    | SynthesisRecord
    | SynthesisDrawRecord,
    Field(discriminator="type"),
]
RECORD_TYPES = (
    "dimension",
    "task",
    "response",
    "rubric",
    "criterion_grade",
    "score",
    "preference",
    "judge_score",
    "synthesis",
    "synthesis_draw",
)
_adapter: TypeAdapter[AnyRecord] = TypeAdapter(AnyRecord)


class RecordInvalid(Exception):
    """A line that is not a valid record; `problems` pairs a field name with a message."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems


def _field_name(location: tuple[int | str, ...], record_type: str | None) -> str:
    parts = [str(part) for part in location]
    if parts and record_type and parts[0] == record_type:
        parts = parts[1:]  # pydantic prefixes the union tag; users never wrote it
    return ".".join(parts) or "(record)"


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "json_invalid":
        problem = error["ctx"].get("error", "invalid")
        # pydantic's parser has a limit of its own (201 levels), above MAX_JSON_DEPTH.
        return str(JsonTooDeep()) if "recursion limit" in problem else f"malformed JSON ({problem})"
    if kind == "union_tag_invalid":
        return f"unknown type {error['ctx']['tag']!r}; expected one of {', '.join(RECORD_TYPES)}"
    if kind == "union_tag_not_found":
        return "missing 'type'"
    if kind == "model_type":
        return "must be a JSON object"
    message: str = error["msg"]
    return message.removeprefix("Value error, ")


def record_parse(line: bytes) -> AnyRecord:
    """Parse one JSONL line into a record, or raise RecordInvalid naming each bad field."""
    if len(line) > MAX_LINE_BYTES:
        raise RecordInvalid([("(line)", f"longer than {MAX_LINE_BYTES} bytes")])
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordInvalid(
            [("(line)", f"not UTF-8: invalid byte at offset {exc.start}")]
        ) from None
    if "\x00" in text or "\\u0000" in text:
        # PostgreSQL cannot store a NUL character in text or JSON.
        raise RecordInvalid(
            [("(line)", "contains a NUL character (\\u0000), which cannot be stored")]
        )
    try:
        return _adapter.validate_json(text)
    except ValidationError as exc:
        record_type = None
        errors = exc.errors(include_url=False)
        if errors and errors[0]["loc"]:
            record_type = str(errors[0]["loc"][0])
        problems = []
        for error in errors:
            field = _field_name(error["loc"], record_type)
            message = _message(error)
            # A validator's message starts with the field it is about ("b: ...").
            head, sep, rest = message.partition(": ")
            if field == "(record)" and sep and " " not in head:
                field, message = head, rest
            if error["type"] in {"union_tag_invalid", "union_tag_not_found"}:
                field = "type"
            problems.append((field, message))
        raise RecordInvalid(problems) from None
