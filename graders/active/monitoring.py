"""The "Watch the shipped grader" queue strategy (DESIGN.md section 8, issue 16 item 2): serve
pairs of captured rollouts, the most recent first, so experts check the grader on what training
produces now; a random draw that records each pair's chance, so the accuracy measured on these
labels can be reweighted.

The pool is the queued pairs whose two responses were captured in the same CapturedGroup (one
task, graded together, so their rewards are one call's comparison) and have no current overall
human label. Pairs across groups compare responses the grader never scored side by side, so
the strategy asks queue_build (PairsWithinGroups) to pair captured responses within their group
only: left to pair a task's responses freely it queued, of a task captured 16 times in groups
of 4, 63 pairs of which about 3 were of one group, and which groups those were was luck, not
recency. Pairs still queued across groups (served before a rebuild, or queued by a build
with another strategy and only re-ranked since) and pairs of imported responses stay out of
the pool: after every drawn pair, in a seeded random order, with no chance.

A pool pair's value is

    recency * (0.5 + 0.5 * max(harm, margin))

- recency = recency_value(age, scale=RECENCY_SCALE): age 0 for the latest (run, step), counting
  back one per distinct step: runs ordered by their latest capture, steps within a run by
  number, a run's groups without a step after its stepped ones, by capture time. Monitoring
  asks whether the grader is still right on what the policy produces now, so this leads.
- harm = harm_potential of the two stored rewards against the group's mean reward (1 when an
  error would flip an advantage's sign); margin = margin_value (1 for a tie or a failed grade).
  Either makes a label matter, both together not much more, hence the max.
- The 0.5 floor keeps a pair the grader ranked confidently at half the weight of a close or
  straddling one: a confidently wrong grader is what reward hacking looks like, so those pairs
  must keep coming. Every pool value is then > 0, so with epsilon 0 too no pool pair starves.

The group mean is over the rewards stored with the group: a response deduplicated against an
earlier capture is not stored again, so its reward is missing from the mean.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from graders.active.draw import pair_key, pool_draw
from graders.engine.active.acquisition import harm_potential, margin_value, recency_value
from graders.models import CapturedGroup, CapturedResponse
from labeling.models import Preference, Project, Provider
from labeling.strategies import (
    COVERAGE,
    CandidatePair,
    CoverageFirst,
    Ranked,
    StrategyChoice,
    StrategySpec,
)

NAME = "monitoring"
# Distinct steps back at which a pair is worth half the latest's (a third at twice as many).
RECENCY_SCALE = 10.0
FALLBACK = (
    "no captured rollouts yet: turn capture on for a token (Tokens page) or post production "
    f"logs to the capture API; serving {COVERAGE.label} until then"
)

Pair = tuple[int, int]


@dataclass(frozen=True)
class Captures:
    """The project's captured responses as the strategy needs them: each one's group and
    reward (NaN: none), each group's mean reward (NaN: no reward stored) and age (0: the most
    recent step), and the pairs with a current overall human label, low id first."""

    group_of: dict[int, int]
    reward: dict[int, float]
    group_mean: dict[int, float]
    group_age: dict[int, int]
    labeled: frozenset[Pair]


def captures_for_project(project: Project) -> Captures | None:
    """The project's captures in three queries, or None when it has captured nothing."""
    groups = list(
        CapturedGroup.objects.filter(project=project).values_list("pk", "run", "step", "created_at")
    )
    if not groups:
        return None
    run_latest: dict[str, datetime] = {}
    for _, run, _, created in groups:
        run_latest[run] = max(created, run_latest.get(run, created))
    # Stepped groups of a run share their step's age; stepless ones are aged by capture time.
    keys = {
        pk: (run_latest[run], 1, step) if step is not None else (run_latest[run], 0, created)
        for pk, run, step, created in groups
    }
    ages = {key: age for age, key in enumerate(sorted(set(keys.values()), reverse=True))}
    group_of: dict[int, int] = {}
    reward: dict[int, float] = {}
    by_group: dict[int, list[float]] = {}
    for response, group, value in CapturedResponse.objects.filter(
        group__project=project
    ).values_list("response_id", "group_id", "reward"):
        group_of[response] = group
        reward[response] = np.nan if value is None else value
        if value is not None:
            by_group.setdefault(group, []).append(value)
    labeled = frozenset(
        (min(a, b), max(a, b))
        for a, b in Preference.objects.filter(
            task__project=project,
            is_current=True,
            provider=Provider.HUMAN,
            dimension__isnull=True,
        ).values_list("response_a_id", "response_b_id")
    )
    return Captures(
        group_of=group_of,
        reward=reward,
        group_mean={pk: float(np.mean(by_group[pk])) if pk in by_group else np.nan for pk in keys},
        group_age={pk: ages[key] for pk, key in keys.items()},
        labeled=labeled,
    )


class WatchShippedGrader:
    """Ranks pairs by a seeded draw from selection probabilities built on the value above."""

    name = NAME

    def __init__(self, captures: Captures, *, epsilon: float, seed: int = 0) -> None:
        self.captures, self.epsilon, self.seed = captures, epsilon, seed

    def response_groups(self) -> Mapping[int, int]:
        """Captured responses pair within their group only (PairsWithinGroups)."""
        return self.captures.group_of

    def in_pool(self, pair: CandidatePair) -> bool:
        group = self.captures.group_of.get(pair.response_a)
        return (
            group is not None
            and self.captures.group_of.get(pair.response_b) == group
            and pair_key(pair) not in self.captures.labeled
        )

    def values(self, pairs: Sequence[CandidatePair]) -> np.ndarray:
        """The value of each pool pair (every pair given must be in the pool)."""
        captures = self.captures
        groups = [captures.group_of[pair.response_a] for pair in pairs]
        a = np.array([captures.reward[pair.response_a] for pair in pairs], dtype=np.float64)
        b = np.array([captures.reward[pair.response_b] for pair in pairs], dtype=np.float64)
        mean = np.array([captures.group_mean[g] for g in groups], dtype=np.float64)
        age = np.array([captures.group_age[g] for g in groups], dtype=np.int64)
        weight = np.maximum(harm_potential(a, b, mean), margin_value(a, b))
        values: np.ndarray = recency_value(age, scale=RECENCY_SCALE) * (0.5 + 0.5 * weight)
        return values

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        return pool_draw(
            pairs, in_pool=self.in_pool, values=self.values, epsilon=self.epsilon, seed=self.seed
        )


def monitoring_build(project: Project, seed: int) -> StrategyChoice:
    captures = captures_for_project(project)
    if captures is None:
        return StrategyChoice(CoverageFirst(seed), fallback=FALLBACK)
    return StrategyChoice(WatchShippedGrader(captures, epsilon=project.queue_epsilon, seed=seed))


MONITORING = StrategySpec(
    name=NAME,
    label="Watch the shipped grader",
    hint=(
        "Pairs of captured training rollouts, the latest steps first and close or "
        "advantage-flipping calls of the grader ahead, plus a random share that keeps "
        "accuracies on the labels unbiased once reweighted."
    ),
    build=monitoring_build,
    unavailable=lambda project: (
        "" if CapturedGroup.objects.filter(project=project).exists() else FALLBACK
    ),
)
