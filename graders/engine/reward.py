"""Reward expressions: how a scalar program turns its steps' outputs into one number.

The language is a JSON tree, never text that gets evaluated, so a program written by a proposer
model cannot run code. Forms:

    0.5                                      a numeric constant
    "verify.score"                           the field `score` of step `verify`
    {"mean": [e1, e2, ...]}                  arithmetic mean
    {"weighted_mean": [[e1, w1], ...]}       weights are positive constants
    {"min": [e1, ...]}, {"max": [e1, ...]}
    {"clip": [e, low, high]}                 low and high are constants, low <= high

Errors, at parse time and at evaluation time, name the path of the offending node
(``reward.mean[1]``) so that a person or the proposer can fix it.
"""

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

MAX_DEPTH = 16
REFERENCE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
OPERATORS = ("mean", "weighted_mean", "min", "max", "clip")

Aggregate = Literal["mean", "min", "max"]
AGGREGATES: Mapping[Aggregate, Callable[[Sequence[float]], float]] = {
    "mean": lambda values: math.fsum(values) / len(values),
    "min": min,
    "max": max,
}


class RewardInvalid(ValueError):
    """The expression is malformed; `messages` holds one actionable line per problem."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


class RewardError(ValueError):
    """Evaluation failed, e.g. a referenced output is missing or not a number."""


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Ref:
    step: str
    field: str

    def __str__(self) -> str:
        return f"{self.step}.{self.field}"


@dataclass(frozen=True)
class Combine:
    op: Aggregate
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class WeightedMean:
    terms: tuple[tuple["Expr", float], ...]


@dataclass(frozen=True)
class Clip:
    arg: "Expr"
    low: float
    high: float


Expr = Const | Ref | Combine | WeightedMean | Clip


def reward_parse(data: object, path: str = "reward") -> Expr:
    """Parse a JSON reward expression into a typed tree, reporting every problem at once."""
    errors: list[str] = []
    expr = _parse(data, path, 0, errors)
    if errors:
        raise RewardInvalid(errors)
    return expr


def reward_refs(expr: Expr, path: str = "reward") -> Iterator[tuple[str, Ref]]:
    """Every reference in the tree with its path, so a program can check that each one names a
    numeric output of one of its steps."""
    match expr:
        case Ref():
            yield path, expr
        case Combine(op=op, args=args):
            for index, arg in enumerate(args):
                yield from reward_refs(arg, f"{path}.{op}[{index}]")
        case WeightedMean(terms=terms):
            for index, (arg, _) in enumerate(terms):
                yield from reward_refs(arg, f"{path}.weighted_mean[{index}][0]")
        case Clip(arg=arg):
            yield from reward_refs(arg, f"{path}.clip[0]")


def reward_evaluate(
    expr: Expr, outputs: Mapping[str, Mapping[str, Any]], path: str = "reward"
) -> float:
    """The value of the expression given each step's parsed output (step id -> field -> value)."""
    match expr:
        case Const(value=value):
            return value
        case Ref():
            return _ref_value(expr, outputs, path)
        case Combine(op=op, args=args):
            values = [
                reward_evaluate(arg, outputs, f"{path}.{op}[{index}]")
                for index, arg in enumerate(args)
            ]
            return AGGREGATES[op](values)
        case WeightedMean(terms=terms):
            weighted = [
                reward_evaluate(arg, outputs, f"{path}.weighted_mean[{index}][0]") * weight
                for index, (arg, weight) in enumerate(terms)
            ]
            return math.fsum(weighted) / math.fsum(weight for _, weight in terms)
        case Clip(arg=arg, low=low, high=high):
            return min(max(reward_evaluate(arg, outputs, f"{path}.clip[0]"), low), high)


def reward_to_json(expr: Expr) -> Any:
    """The JSON form of a parsed expression; `reward_parse` of it gives the same tree."""
    match expr:
        case Const(value=value):
            return value
        case Ref():
            return str(expr)
        case Combine(op=op, args=args):
            return {op: [reward_to_json(arg) for arg in args]}
        case WeightedMean(terms=terms):
            return {"weighted_mean": [[reward_to_json(arg), weight] for arg, weight in terms]}
        case Clip(arg=arg, low=low, high=high):
            return {"clip": [reward_to_json(arg), low, high]}


def _ref_value(ref: Ref, outputs: Mapping[str, Mapping[str, Any]], path: str) -> float:
    value = outputs.get(ref.step, {}).get(ref.field)
    number = number_or_none(value)
    if number is None:
        raise RewardError(f"{path}: {ref} is {excerpt(value)}, not a finite number")
    return number


def number_or_none(value: object) -> float | None:
    """`value` as a float if it is a finite JSON number, else None."""
    # bool is an int subclass, but a verdict is not a score.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _parse(data: object, path: str, depth: int, errors: list[str]) -> Expr:
    if depth > MAX_DEPTH:
        errors.append(f"{path}: nested deeper than {MAX_DEPTH} levels")
        return Const(0.0)
    number = number_or_none(data)
    if number is not None:
        return Const(number)
    if isinstance(data, str):
        return _parse_ref(data, path, errors)
    if isinstance(data, dict) and len(data) == 1:
        [(op, args)] = data.items()
        if op in OPERATORS:
            return _parse_operator(op, args, f"{path}.{op}", depth, errors)
        errors.append(f"{path}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
        return Const(0.0)
    errors.append(
        f'{path}: expected a number, a reference like "step.field" or an object with one '
        f"operator ({', '.join(OPERATORS)}); got {excerpt(data)}"
    )
    return Const(0.0)


def _parse_ref(text: str, path: str, errors: list[str]) -> Expr:
    match = REFERENCE.fullmatch(text)
    if match is None:
        errors.append(f'{path}: {text!r} is not a reference of the form "step.field"')
        return Const(0.0)
    return Ref(match.group(1), match.group(2))


def _parse_operator(op: str, args: object, path: str, depth: int, errors: list[str]) -> Expr:
    if not isinstance(args, list) or not args:
        errors.append(f"{path}: expected a non-empty list of arguments; got {excerpt(args)}")
        return Const(0.0)
    match op:
        case "clip":
            return _parse_clip(args, path, depth, errors)
        case "weighted_mean":
            return _parse_weighted_mean(args, path, depth, errors)
        case "mean" | "min" | "max":
            parsed = (_parse(arg, f"{path}[{i}]", depth + 1, errors) for i, arg in enumerate(args))
            return Combine(op, tuple(parsed))
    raise AssertionError(op)


def _parse_weighted_mean(args: list[Any], path: str, depth: int, errors: list[str]) -> Expr:
    terms: list[tuple[Expr, float]] = []
    for index, term in enumerate(args):
        if not (isinstance(term, list) and len(term) == 2):
            errors.append(
                f"{path}[{index}]: expected a pair [expression, weight]; got {excerpt(term)}"
            )
            continue
        arg, raw_weight = term
        weight = number_or_none(raw_weight)
        if weight is None or weight <= 0:
            errors.append(
                f"{path}[{index}][1]: the weight must be a positive number, "
                f"got {excerpt(raw_weight)}"
            )
            continue
        terms.append((_parse(arg, f"{path}[{index}][0]", depth + 1, errors), weight))
    return WeightedMean(tuple(terms))


def _parse_clip(args: list[Any], path: str, depth: int, errors: list[str]) -> Expr:
    if len(args) != 3:
        errors.append(f"{path}: expected [expression, low, high]; got {len(args)} arguments")
        return Const(0.0)
    arg, raw_low, raw_high = args
    expr = _parse(arg, f"{path}[0]", depth + 1, errors)
    low, high = number_or_none(raw_low), number_or_none(raw_high)
    if low is None or high is None or low > high:
        errors.append(
            f"{path}: low and high must be numbers with low <= high; "
            f"got {excerpt(raw_low)}, {excerpt(raw_high)}"
        )
        return expr
    return Clip(expr, low, high)


def excerpt(value: object) -> str:
    """A short JSON rendering of a value, for error messages."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
