"""Drift of a promoted grader on fresh expert labels (DESIGN.md section 12, step 3).

Input: one `FreshPair` per human-majority non-tie pair labeled after the grader's selection
snapshot, carrying the rewards the grader gave its two responses at training time, and every
reward the grader gave a captured response (labeled or not) with its training step.

- Accuracy is the tolerant ranking accuracy the search selected by (DESIGN.md section 7: credit
  1 if s_w - s_l > tol, 0.5 if |s_w - s_l| <= tol, else 0), so the fresh figure and the
  selection figure measure the same thing. Each figure has a task-bootstrap 95% interval, none
  over a single task (every resample would be that task: a point that reads as certainty).
- Time windows are `window` long, aligned to the first fresh label: window k holds the labels at
  first + k * window <= t < first + (k + 1) * window. Empty windows are not listed.
- Step buckets are `bucket_width` steps wide, aligned to step 0: bucket b holds steps
  b * width .. (b + 1) * width - 1. Pairs whose group named no step are in no bucket.
- The alert: at least `min_pairs` fresh pairs, an interval, and its HIGH end strictly below
  selection value - margin (so the whole interval lies more than the margin below selection;
  a high end exactly at selection - margin raises nothing).
- The reward-hacking signal: over the step buckets, Spearman's rho of mean captured reward
  against bucket start (buckets with a reward) and of fresh accuracy against bucket start
  (buckets with a fresh pair), each needing at least 3 buckets; the signal is reward rho > 0
  while agreement rho < 0.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from graders.engine.metrics import (
    BOOTSTRAP_DRAWS,
    FLOAT_SLACK,
    ConfidenceInterval,
    RankingPairs,
    tolerant_ranking_accuracy,
    tolerant_ranking_accuracy_ci,
)
from graders.engine.rank_correlation import spearman

MIN_BUCKETS = 3


@dataclass(frozen=True)
class FreshPair:
    """A fresh labeled pair, winner first, with the grader's training-time rewards."""

    task: int
    winner_score: float
    loser_score: float
    labeled_at: datetime
    step: int | None


@dataclass(frozen=True)
class CapturedReward:
    """One reward the grader gave a captured response, at this training step (None: unnamed)."""

    step: int | None
    reward: float


@dataclass(frozen=True)
class Accuracy:
    """Tolerant ranking accuracy over `pairs` pairs of `tasks` tasks; ci None over one task."""

    pairs: int
    tasks: int
    value: float
    ci: ConfidenceInterval | None


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    accuracy: Accuracy


@dataclass(frozen=True)
class StepBucket:
    """Steps first_step..last_step: fresh accuracy (None without fresh pairs) and the mean of
    every captured reward in the bucket (None without rewards)."""

    first_step: int
    last_step: int
    accuracy: Accuracy | None
    mean_reward: float | None
    rewards: int


@dataclass(frozen=True)
class Drift:
    overall: Accuracy | None
    windows: list[Window]
    buckets: list[StepBucket]
    selection_value: float | None
    alert: bool
    reward_rho: float | None
    agreement_rho: float | None
    hacking: bool


def accuracy_of(
    pairs: Sequence[FreshPair], *, tol: float, draws: int, interval: bool = True
) -> Accuracy:
    """Tolerant ranking accuracy of these pairs with its task-bootstrap interval (none when
    not asked for, or over one task)."""
    ranking = RankingPairs(
        task=np.array([p.task for p in pairs], dtype=np.int64),
        winner_score=np.array([p.winner_score for p in pairs], dtype=np.float64),
        loser_score=np.array([p.loser_score for p in pairs], dtype=np.float64),
    )
    tasks = len({p.task for p in pairs})
    wanted = interval and tasks > 1
    ci = tolerant_ranking_accuracy_ci(ranking, tol=tol, draws=draws) if wanted else None
    return Accuracy(len(pairs), tasks, tolerant_ranking_accuracy(ranking, tol=tol), ci)


def drift_alert(
    overall: Accuracy | None, *, selection_value: float | None, margin: float, min_pairs: int
) -> bool:
    """True when at least min_pairs fresh pairs have an interval whose high end is strictly
    below selection_value - margin."""
    if overall is None or overall.ci is None or selection_value is None:
        return False
    if overall.pairs < min_pairs:
        return False
    return overall.ci.high < selection_value - margin - FLOAT_SLACK


def drift_compute(
    pairs: Sequence[FreshPair],
    rewards: Sequence[CapturedReward],
    *,
    selection_value: float | None,
    tol: float,
    window: timedelta,
    bucket_width: int,
    margin: float,
    min_pairs: int,
    draws: int = BOOTSTRAP_DRAWS,
    breakdown_intervals: bool = True,
) -> Drift:
    """The drift report of the module docstring. Without breakdown_intervals only the overall
    figure is bootstrapped (what the alert needs; the rhos use point values): a third of the
    work, for pages that show only the alert."""
    if window <= timedelta(0):
        raise ValueError(f"the time window must be positive, got {window}")
    if bucket_width < 1:
        raise ValueError(f"the step bucket width must be at least 1, got {bucket_width}")
    overall = accuracy_of(pairs, tol=tol, draws=draws) if pairs else None
    buckets = _buckets(
        pairs, rewards, tol=tol, width=bucket_width, draws=draws, interval=breakdown_intervals
    )
    reward_rho = _rho([(b.first_step, b.mean_reward) for b in buckets if b.mean_reward is not None])
    agreement_rho = _rho([(b.first_step, b.accuracy.value) for b in buckets if b.accuracy])
    return Drift(
        overall=overall,
        windows=_windows(pairs, tol=tol, window=window, draws=draws, interval=breakdown_intervals),
        buckets=buckets,
        selection_value=selection_value,
        alert=drift_alert(
            overall, selection_value=selection_value, margin=margin, min_pairs=min_pairs
        ),
        reward_rho=reward_rho,
        agreement_rho=agreement_rho,
        hacking=reward_rho is not None
        and agreement_rho is not None
        and reward_rho > 0
        and agreement_rho < 0,
    )


def _windows(
    pairs: Sequence[FreshPair], *, tol: float, window: timedelta, draws: int, interval: bool
) -> list[Window]:
    if not pairs:
        return []
    first = min(p.labeled_at for p in pairs)
    grouped: dict[int, list[FreshPair]] = {}
    for pair in pairs:
        grouped.setdefault(math.floor((pair.labeled_at - first) / window), []).append(pair)
    return [
        Window(
            start=first + index * window,
            end=first + (index + 1) * window,
            accuracy=accuracy_of(grouped[index], tol=tol, draws=draws, interval=interval),
        )
        for index in sorted(grouped)
    ]


def _buckets(
    pairs: Sequence[FreshPair],
    rewards: Sequence[CapturedReward],
    *,
    tol: float,
    width: int,
    draws: int,
    interval: bool,
) -> list[StepBucket]:
    fresh: dict[int, list[FreshPair]] = {}
    for pair in pairs:
        if pair.step is not None:
            fresh.setdefault(pair.step // width, []).append(pair)
    given: dict[int, list[float]] = {}
    for captured in rewards:
        if captured.step is not None:
            given.setdefault(captured.step // width, []).append(captured.reward)
    return [
        StepBucket(
            first_step=index * width,
            last_step=(index + 1) * width - 1,
            accuracy=accuracy_of(fresh[index], tol=tol, draws=draws, interval=interval)
            if index in fresh
            else None,
            mean_reward=float(np.mean(given[index])) if index in given else None,
            rewards=len(given.get(index, [])),
        )
        for index in sorted(fresh.keys() | given.keys())
    ]


def _rho(points: Sequence[tuple[int, float]]) -> float | None:
    """Spearman's rho of the values against bucket start; None under MIN_BUCKETS buckets or
    when the values do not vary."""
    if len(points) < MIN_BUCKETS:
        return None
    return spearman([float(step) for step, _ in points], [value for _, value in points]).rho
