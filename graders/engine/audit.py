"""The blind rubric audit (DESIGN.md 7b): one criterion, judged against its task's sources.

The auditor sees the task's prompt, instructions and documents and the text of ONE criterion,
all fenced as data, and nothing that could tell it who wrote the criterion: no author kind or
name, no rubric or item id, no weight (weights differ by author in style and scale) and no
position in a rubric or neighbouring criteria. The prompt is a function of (task, criterion text)
alone, so two authors writing the same criterion get the same verdict, from one cached call.

A verdict has three parts: specificity (a concrete fact, conclusion or calculation, or a general
quality), grounding in the documents (supported, contradicted or unverifiable, with the passage
that shows it) and omission (could a response leave out what the criterion checks and still
pass?). A grounding claim is only as good as its quote: a claimed passage that does not occur in
the documents turns the verdict into "unverifiable", flagged `quote_missing`.

The report side is here too: per author, each share as a mean over tasks of the per-task share,
with a task-bootstrap 95% CI (metrics.task_bootstrap_ci: 10,000 draws, seed 0).
"""

import re
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from graders.engine.fence import data_neutralize, fence_draw
from graders.engine.jsonout import OutputInvalid, validate
from graders.engine.judge import ChatRequest, ChatResult
from graders.engine.metrics import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    FloatArray,
    task_bootstrap_cis,
)
from graders.engine.programs import (
    DocumentInput,
    Judge,
    StepTrace,
    TaskInput,
    documents_render,
)

# The name of the auditor's one call, in requests and traces.
AUDIT_STEP = "audit"
Specificity = Literal["specific", "generic"]
Grounding = Literal["supported", "contradicted", "unverifiable"]
SPECIFICITIES: tuple[Specificity, ...] = get_args(Specificity)
GROUNDINGS: tuple[Grounding, ...] = get_args(Grounding)
QUOTED: tuple[Grounding, ...] = ("supported", "contradicted")

AUDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "specificity": {"type": "string", "enum": list(SPECIFICITIES)},
        "grounding": {"type": "string", "enum": list(GROUNDINGS)},
        "quote": {"type": "string"},
        "omission": {"type": "boolean"},
    },
    "required": ["specificity", "grounding", "quote", "omission"],
    "additionalProperties": False,
}

# Worded so that nothing in it names or hints at a kind of author: the blinding test checks
# the rendered prompts for such words.
AUDIT_TEMPLATE = """\
Audit one criterion that will be used to grade responses to the task below. Judge it only \
against the task and its source documents; use no outside knowledge.

Task:
{prompt}

Instructions given with the task:
{instructions}

Source documents:
{documents}

Criterion:
{criterion}

Answer four questions about the criterion.
- specificity: "specific" if it asks for a concrete fact, conclusion or calculation; "generic" \
if it asks for a general topic or quality (for example clarity, thoroughness or tone).
- grounding: "supported" if the source documents support what the criterion requires, \
"contradicted" if they contradict it, "unverifiable" if they neither confirm nor refute it.
- quote: for "supported" or "contradicted", the one passage of the source documents that \
shows it, copied exactly as written there; for "unverifiable", an empty string.
- omission: true if a response could leave out what the criterion is meant to check and \
still pass it (for example because the criterion is vague or can be met in name only); false \
otherwise.

Reply with only a JSON object with exactly these fields: "specificity", "grounding", "quote", \
"omission"."""

_WHITESPACE = re.compile(r"\s+")
_QUOTE_MARKS = "\"'\u201c\u201d\u2018\u2019"


@dataclass(frozen=True)
class AuditVerdict:
    """The auditor's verdict on one criterion. On a failed call `error` says why and the
    three verdicts are None. With `quote_missing`, the auditor claimed support or contradiction
    with a passage that is not in the documents: grounding is then "unverifiable" and `quote`
    keeps the claimed passage, so a reader can see what was made up."""

    specificity: Specificity | None
    grounding: Grounding | None
    quote: str
    omission: bool | None
    quote_missing: bool
    error: str | None
    trace: StepTrace


def audit_messages(task: TaskInput, criterion_text: str) -> tuple[dict[str, str], ...]:
    """The system and user messages that audit `criterion_text` on `task`, every value fenced."""
    values = {
        "prompt": task.prompt,
        "instructions": task.instructions or "(no instructions)",
        "documents": documents_render(task.documents),
        "criterion": criterion_text,
    }
    fence = fence_draw([AUDIT_TEMPLATE, *values.values()])
    user = AUDIT_TEMPLATE.format(**{name: fence.wrap(text) for name, text in values.items()})
    return ({"role": "system", "content": fence.notice()}, {"role": "user", "content": user})


async def audit_criterion(judge: Judge, task: TaskInput, criterion_text: str) -> AuditVerdict:
    """Audit one criterion of some rubric of `task`, blind to who wrote it.

    Raises only what the judge raises (BudgetExhausted); every other failure is a verdict
    with `error` set, never a guess."""
    messages = audit_messages(task, criterion_text)
    result = await judge.complete(ChatRequest(messages, AUDIT_SCHEMA, AUDIT_STEP))
    trace = _trace(messages, result)
    parsed = _verdict_fields(result)
    if isinstance(parsed, str):
        return AuditVerdict(None, None, "", None, False, parsed, trace)
    grounding: Grounding = parsed["grounding"]
    quote = str(parsed["quote"]).strip()
    quote_missing = grounding in QUOTED and not quote_in_documents(quote, task.documents)
    if quote_missing:
        grounding = "unverifiable"
    elif grounding == "unverifiable":
        quote = ""
    return AuditVerdict(
        parsed["specificity"],
        grounding,
        quote,
        bool(parsed["omission"]),
        quote_missing,
        None,
        trace,
    )


def _verdict_fields(result: ChatResult) -> dict[str, Any] | str:
    """The verdict's fields, or why there are none. The client validates too; checking again
    keeps a lenient judge or a stale cache entry from turning into a verdict."""
    if result.error is not None:
        return result.error
    if result.parsed is None:
        return "the judge returned no JSON object"
    try:
        return validate(result.parsed, AUDIT_SCHEMA)
    except OutputInvalid as invalid:
        return f"unparseable judge output: {invalid}"


def quote_in_documents(quote: str, documents: Sequence[DocumentInput]) -> bool:
    """Whether `quote` occurs, verbatim up to whitespace, in the text of one document.

    Runs of whitespace count as one space, one pair of quotation marks around the whole quote
    is ignored (models add them), and the documents are compared as the auditor read them,
    neutralized by the fence. An empty quote occurs nowhere."""
    wanted = _normalized(quote)
    candidates = [wanted]
    if len(wanted) >= 2 and wanted[0] in _QUOTE_MARKS and wanted[-1] in _QUOTE_MARKS:
        candidates.append(wanted[1:-1].strip())
    texts = [_normalized(document.text) for document in documents]
    return any(candidate and candidate in text for candidate in candidates for text in texts)


def _normalized(text: str) -> str:
    return _WHITESPACE.sub(" ", data_neutralize(text)).strip()


def _trace(messages: tuple[dict[str, str], ...], result: ChatResult) -> StepTrace:
    return StepTrace.of(AUDIT_STEP, "", messages, result, result.error)


# The report ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditedCriterion:
    """One successfully audited criterion, as the report counts it. `author` is known only
    after the fact, from the database; the auditor never saw it."""

    task: Hashable
    author: str
    specificity: Specificity
    grounding: Grounding
    omission: bool


# The shares the report gives per author; "omission" is the share of omission-prone criteria.
SHARES = ("specific", "supported", "contradicted", "unverifiable", "omission")


@dataclass(frozen=True)
class Share:
    """A mean over tasks of a per-task share, with its task-bootstrap 95% interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class AuthorShares:
    author: str
    tasks: int
    criteria: int
    shares: dict[str, Share]

    @property
    def in_order(self) -> tuple[Share, ...]:
        """The shares in the order of SHARES, as the report's columns show them."""
        return tuple(self.shares[key] for key in SHARES)


def _indicators(criterion: AuditedCriterion) -> tuple[bool, ...]:
    """One flag per entry of SHARES, in that order."""
    return (
        criterion.specificity == "specific",
        criterion.grounding == "supported",
        criterion.grounding == "contradicted",
        criterion.grounding == "unverifiable",
        criterion.omission,
    )


def _per_task_counts(criteria: Iterable[AuditedCriterion]) -> dict[str, dict[Hashable, FloatArray]]:
    """author -> task -> [criteria, then one count per entry of SHARES]."""
    counts: dict[str, dict[Hashable, FloatArray]] = defaultdict(dict)
    for criterion in criteria:
        row = counts[criterion.author].setdefault(criterion.task, np.zeros(1 + len(SHARES)))
        row += np.array((True, *_indicators(criterion)), dtype=np.float64)
    return counts


def audit_shares(
    criteria: Iterable[AuditedCriterion],
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> list[AuthorShares]:
    """Per author: each share of SHARES as the mean over the author's tasks of the share among
    that task's criteria by the author (so a task with 30 criteria weighs as much as one with
    3), with a CI from resampling those tasks. Authors in name order."""
    report = []
    for author, by_task in sorted(_per_task_counts(criteria).items()):
        table = np.array(list(by_task.values()))
        per_task = table[:, 1:] / table[:, :1]
        cis = task_bootstrap_cis(per_task, np.ones(len(table)), draws=draws, seed=seed)
        shares = {
            key: Share(float(per_task[:, column].mean()), cis[column].low, cis[column].high)
            for column, key in enumerate(SHARES)
        }
        report.append(AuthorShares(author, len(table), int(table[:, 0].sum()), shares))
    return report


def higher_supported_tasks(
    criteria: Iterable[AuditedCriterion], *, author: str, than: str
) -> tuple[int, int]:
    """(tasks where `author`'s supported share is strictly higher than `than`'s, tasks that
    have audited criteria by both). Compared exactly, by cross-multiplying the counts."""
    counts = _per_task_counts(criteria)
    mine, theirs = counts.get(author, {}), counts.get(than, {})
    both = mine.keys() & theirs.keys()
    supported = 1 + SHARES.index("supported")
    higher = sum(
        1
        for task in both
        if mine[task][supported] * theirs[task][0] > theirs[task][supported] * mine[task][0]
    )
    return higher, len(both)
