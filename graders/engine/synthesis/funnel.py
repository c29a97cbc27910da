"""The synthesis funnel (PADME Tables 1, 8 and 9; DESIGN.md section 11), as pure arithmetic.

Inputs are plain dataclasses built from the synthesis rows (generated or imported alike):
a synthesis is its cascade, its retries and its cells; a cell is its strata and its draws; a draw
is its retry, outcome, cost, votes and (when known) calls and tokens per stage.

Definitions, per the paper:
- per retry r: draws at r, kept at r, rejected by each judge at r (the judge whose vote ended
  the cascade with a veto), retention = kept / draws, cumulative retention = kept at retries
  <= r / cells;
- per subset (dimension, domain, contrast, agent): cells, filled (cells with a kept draw),
  draws, retention = filled / draws, cumulative retention = filled / cells, draws per kept =
  draws / filled;
- cost per kept pair = the cost of every draw (vetoed ones included: they are what the kept
  pairs cost) / kept;
- position audit: over the votes that recorded a slot order, the share that showed the better
  (higher-level) response in slot 2, with the two-sided exact binomial p against one half.

A ratio with a zero denominator is None, never 0.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from math import comb
from typing import Any

OUTCOMES = ("kept", "vetoed", "failed", "pending")
SUBSET_AXES = ("dimension", "domain", "contrast", "agent")


@dataclass(frozen=True)
class StageUsage:
    calls: int
    tokens: int | None = None


@dataclass(frozen=True)
class Vote:
    judge: str
    agrees: bool | None
    slot_order: str = ""  # 'ab': the lower level was shown first; '' not recorded


@dataclass(frozen=True)
class Draw:
    retry: int
    outcome: str
    cost: float = 0.0
    votes: tuple[Vote, ...] = ()
    usage: Mapping[str, StageUsage] = field(default_factory=dict)

    @property
    def vetoed_by(self) -> str | None:
        """The judge whose vote (false, or no verdict) ended the cascade, if one did."""
        if self.votes and self.votes[-1].agrees is not True:
            return self.votes[-1].judge
        return None


@dataclass(frozen=True)
class Cell:
    id: str
    dimension: str
    domain: str
    contrast: str
    agent: str
    draws: tuple[Draw, ...] = ()

    @property
    def filled(self) -> bool:
        return any(draw.outcome == "kept" for draw in self.draws)

    def strata(self, axis: str) -> str:
        value: str = getattr(self, axis)
        return value


@dataclass(frozen=True)
class SynthesisRun:
    judges: tuple[str, ...]
    retries: int
    cells: tuple[Cell, ...]


def ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def binomial_two_sided_p(successes: int, trials: int) -> float:
    """Exact two-sided binomial test against p = 1/2: the probability of every outcome no
    likelier than the one observed (with p = 1/2 the distribution is symmetric, so this is
    twice the smaller tail, capped at 1)."""
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in 0..{trials}, not {successes}")
    if trials == 0:
        return 1.0
    tail = min(successes, trials - successes)
    lower = sum(comb(trials, k) for k in range(tail + 1))
    return float(min(Fraction(1), Fraction(2 * lower, 2**trials)))


@dataclass(frozen=True)
class RetryRow:
    retry: int
    draws: int
    kept: int
    rejected: dict[str, int]
    failed: int
    pending: int
    retention: float | None
    cumulative_retention: float | None


@dataclass(frozen=True)
class SubsetRow:
    value: str
    cells: int
    filled: int
    draws: int
    rejected: dict[str, int]
    retention: float | None
    cumulative_retention: float | None
    draws_per_kept: float | None


@dataclass(frozen=True)
class StageRow:
    stage: str
    calls: int
    tokens: int | None
    calls_per_kept: float | None
    tokens_per_kept: float | None


@dataclass(frozen=True)
class PositionRow:
    axis: str  # "all", "judge" or one of SUBSET_AXES
    value: str
    votes: int
    better_in_slot_2: int
    share: float | None
    p_value: float | None


@dataclass(frozen=True)
class Funnel:
    cells: int
    draws: int
    kept: int
    by_retry: tuple[RetryRow, ...]
    total: RetryRow
    by: dict[str, tuple[SubsetRow, ...]]
    cost: float
    cost_per_kept: float | None
    stages: tuple[StageRow, ...]
    position: tuple[PositionRow, ...]

    def as_json(self) -> dict[str, Any]:
        """The `synthesis_funnel --json` document (FORMATS.md), with extra keys: failed and
        pending draws, rejections per subset, cost, stages and the position audit."""
        total = asdict(self.total)
        del total["retry"]
        return {
            "cells": self.cells,
            "draws": self.draws,
            "kept": self.kept,
            "by_retry": [asdict(row) for row in self.by_retry],
            "total": total,
            "by": {axis: [asdict(row) for row in rows] for axis, rows in self.by.items()},
            "cost": self.cost,
            "cost_per_kept": self.cost_per_kept,
            "stages": [asdict(row) for row in self.stages],
            "position": [asdict(row) for row in self.position],
        }


def _rejections(judges: Sequence[str], draws: Iterable[Draw]) -> dict[str, int]:
    counts = dict.fromkeys(judges, 0)
    for draw in draws:
        judge = draw.vetoed_by
        if judge is not None:
            counts[judge] = counts.get(judge, 0) + 1
    return counts


def _retry_row(
    retry: int, judges: Sequence[str], draws: Sequence[Draw], kept_so_far: int, cells: int
) -> RetryRow:
    kept = sum(d.outcome == "kept" for d in draws)
    return RetryRow(
        retry=retry,
        draws=len(draws),
        kept=kept,
        rejected=_rejections(judges, draws),
        failed=sum(d.outcome == "failed" for d in draws),
        pending=sum(d.outcome == "pending" for d in draws),
        retention=ratio(kept, len(draws)),
        cumulative_retention=ratio(kept_so_far, cells),
    )


def _subset_rows(judges: Sequence[str], cells: Sequence[Cell], axis: str) -> tuple[SubsetRow, ...]:
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.strata(axis), []).append(cell)
    rows = []
    for value, group in sorted(groups.items()):
        draws = [d for c in group for d in c.draws]
        filled = sum(c.filled for c in group)
        rows.append(
            SubsetRow(
                value=value,
                cells=len(group),
                filled=filled,
                draws=len(draws),
                rejected=_rejections(judges, draws),
                retention=ratio(filled, len(draws)),
                cumulative_retention=ratio(filled, len(group)),
                draws_per_kept=ratio(len(draws), filled),
            )
        )
    return tuple(rows)


def _per(total: int | None, kept: int) -> float | None:
    return None if total is None else ratio(total, kept)


def _stage_rows(draws: Sequence[Draw], kept: int) -> tuple[StageRow, ...]:
    calls: dict[str, int] = {}
    # A stage's tokens are known only when every draw that reports the stage gave them: a
    # partial sum would understate it.
    tokens: dict[str, int | None] = {}
    for draw in draws:
        for stage, usage in draw.usage.items():
            calls[stage] = calls.get(stage, 0) + usage.calls
            held = tokens.get(stage, 0)
            tokens[stage] = None if held is None or usage.tokens is None else held + usage.tokens
    return tuple(
        StageRow(
            stage=stage,
            calls=calls[stage],
            tokens=tokens[stage],
            calls_per_kept=ratio(calls[stage], kept),
            tokens_per_kept=_per(tokens[stage], kept),
        )
        for stage in sorted(calls)
    )


def _position_row(axis: str, value: str, votes: Sequence[Vote]) -> PositionRow:
    shown = [v for v in votes if v.slot_order in {"ab", "ba"}]
    # 'ab' shows the lower level first, so the better response sits in slot 2.
    better_second = sum(v.slot_order == "ab" for v in shown)
    return PositionRow(
        axis=axis,
        value=value,
        votes=len(shown),
        better_in_slot_2=better_second,
        share=ratio(better_second, len(shown)),
        p_value=binomial_two_sided_p(better_second, len(shown)) if shown else None,
    )


def _position_rows(run: SynthesisRun) -> tuple[PositionRow, ...]:
    voted = [(cell, vote) for cell in run.cells for d in cell.draws for vote in d.votes]
    rows = [_position_row("all", "all", [vote for _, vote in voted])]
    for axis in ("judge", *SUBSET_AXES):
        groups: dict[str, list[Vote]] = {}
        for cell, vote in voted:
            value = vote.judge if axis == "judge" else cell.strata(axis)
            groups.setdefault(value, []).append(vote)
        order = list(run.judges) if axis == "judge" else sorted(groups)
        order += sorted(set(groups) - set(order))
        rows += [_position_row(axis, value, groups[value]) for value in order if value in groups]
    return tuple(rows)


def funnel_compute(run: SynthesisRun) -> Funnel:
    """The funnel of one synthesis: Table 1 per retry and in total, Table 8 per subset, cost
    per kept pair, calls and tokens per stage, and the position audit (see the module doc)."""
    for cell in run.cells:
        for draw in cell.draws:
            if draw.outcome not in OUTCOMES:
                raise ValueError(f"cell {cell.id!r}: unknown draw outcome {draw.outcome!r}")
    cells = len(run.cells)
    draws = [d for c in run.cells for d in c.draws]
    kept = sum(d.outcome == "kept" for d in draws)
    last_retry = max([run.retries, *(d.retry for d in draws)])
    by_retry = []
    kept_so_far = 0
    for retry in range(last_retry + 1):
        at_retry = [d for d in draws if d.retry == retry]
        kept_so_far += sum(d.outcome == "kept" for d in at_retry)
        by_retry.append(_retry_row(retry, run.judges, at_retry, kept_so_far, cells))
    cost = sum(d.cost for d in draws)
    return Funnel(
        cells=cells,
        draws=len(draws),
        kept=kept,
        by_retry=tuple(by_retry),
        total=_retry_row(-1, run.judges, draws, kept, cells),
        by={axis: _subset_rows(run.judges, run.cells, axis) for axis in SUBSET_AXES},
        cost=cost,
        cost_per_kept=ratio(cost, kept),
        stages=_stage_rows(draws, kept),
        position=_position_rows(run),
    )
