"""Programs as a reviewer reads them, and the line diff of a program against its parent.

A program is stored as JSON, where quoting, escaped newlines and nested reward objects hide
what a search actually changed. The page and the diff use one rendering, so a line the diff
marks is a line the page shows."""

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from graders.engine.programs import FIXED_REWARDS, PLACEHOLDER
from graders.engine.reward import Clip, Combine, Const, Expr, Ref, WeightedMean, reward_parse

Program = Mapping[str, Any]


@dataclass(frozen=True)
class StepView:
    """A step for the page: its prompt cut into (text, is_placeholder) pieces, so the template
    can highlight placeholders while autoescaping every piece."""

    id: str
    segments: list[tuple[str, bool]]
    outputs: list[tuple[str, str]]


@dataclass(frozen=True)
class DiffLine:
    kind: Literal["added", "removed", "context", "hunk"]
    text: str


def program_steps(program: Program) -> list[StepView]:
    return [
        StepView(
            id=step["id"],
            segments=prompt_segments(step["prompt"]),
            outputs=list(step["output"].items()),
        )
        for step in program.get("steps", [])
    ]


def prompt_segments(prompt: str) -> list[tuple[str, bool]]:
    segments: list[tuple[str, bool]] = []
    at = 0
    for match in PLACEHOLDER.finditer(prompt):
        if match.start() > at:
            segments.append((prompt[at : match.start()], False))
        segments.append((match.group(0), True))
        at = match.end()
    if at < len(prompt):
        segments.append((prompt[at:], False))
    return segments


def reward_text(program: Program) -> str:
    """A scalar program's reward as an expression ("mean(verify.score, fresh.score)"); the
    other kinds' fixed reward in words."""
    if program.get("reward") is None:
        return FIXED_REWARDS.get(program.get("kind", ""), "")
    return _expr_text(reward_parse(program["reward"]))


def _expr_text(expr: Expr) -> str:
    match expr:
        case Const(value=value):
            return f"{value:g}"
        case Ref():
            return str(expr)
        case Combine(op=op, args=args):
            return f"{op}({', '.join(_expr_text(arg) for arg in args)})"
        case WeightedMean(terms=terms):
            inner = ", ".join(f"{_expr_text(arg)}: {weight:g}" for arg, weight in terms)
            return f"weighted_mean({inner})"
        case Clip(arg=arg, low=low, high=high):
            return f"clip({_expr_text(arg)}, {low:g}, {high:g})"


def program_lines(program: Program) -> list[str]:
    """The whole program as plain lines: the text the diff compares."""
    lines = [f"{program.get('kind')} program {program.get('name')}"]
    if program.get("description"):
        lines.append(program["description"])
    for step in program.get("steps", []):
        lines += ["", f"step {step['id']}"]
        lines += ["  " + line for line in step["prompt"].splitlines()]
        outputs = ", ".join(f"{name}: {spec}" for name, spec in step["output"].items())
        lines.append(f"  returns {outputs}")
    lines += ["", f"reward: {reward_text(program)}"]
    return lines


def program_diff(parent: Program, child: Program) -> list[DiffLine]:
    """A unified diff (three lines of context) from the parent's rendering to the child's."""
    diff = difflib.unified_diff(
        program_lines(parent), program_lines(child), "parent", "this program", lineterm=""
    )
    # The first two lines name the files; after them the marker is always the first character,
    # whatever the prompt text itself starts with.
    kinds: dict[str, Literal["added", "removed", "context", "hunk"]] = {
        "+": "added",
        "-": "removed",
        " ": "context",
        "@": "hunk",
    }
    return [DiffLine(kinds[line[0]], line) for line in list(diff)[2:]]
