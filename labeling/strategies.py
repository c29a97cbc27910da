"""Queue strategies: which pairs to queue and in what order to serve them.

A strategy only ranks pairs (higher priority is served first, with the chance its random draw
gave the pair when it samples); the queue stores the ranks, so serving the next pair never
recomputes anything. Strategies are registered by name, and each project picks one: labeling
registers "coverage" here; other apps register theirs from their AppConfig.ready() (labeling
never imports them).
"""

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from labeling.models import Project, Split


@dataclass(frozen=True)
class CandidatePair:
    task_id: int
    split: str
    domain: str
    response_a: int
    response_b: int


@dataclass(frozen=True)
class Ranked:
    """A pair's place in the queue: the highest priority is served first. `probability` is the
    chance the strategy's random draw gave this pair of being the next pick from its pool when the
    priorities were written, and `pool` that pool's size; both None when the strategy does not
    draw at random (labels it served are then treated as a uniform draw by the estimators)."""

    priority: float
    probability: float | None = None
    pool: int | None = None


class QueueStrategy(Protocol):
    name: str

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        """One rank per pair, in the same order."""
        ...


@runtime_checkable
class PairsWithinGroups(Protocol):
    """A strategy that wants a task's responses paired only within groups (say rollouts
    graded together): queue_build then pairs each group of a task on its own."""

    def response_groups(self) -> Mapping[int, int]:
        """Response id -> group id; responses not named form one group per task."""
        ...


@dataclass(frozen=True)
class StrategyChoice:
    strategy: QueueStrategy
    # Non-empty: why the project's chosen strategy cannot run yet, in words a person can act on
    # ("needs a search with at least two graded candidates; serving Coverage first until then").
    fallback: str = ""


@dataclass(frozen=True)
class StrategySpec:
    name: str  # stored in Project.queue_strategy
    label: str  # what the Queue page calls it
    hint: str  # one sentence for the Queue page
    build: Callable[[Project, int], StrategyChoice]  # (project, seed) -> the strategy to run now
    # A cheap check for pages: the fallback text `build` would give now, or "" when the strategy
    # can run. None: the strategy is cheap to build, so building it tells.
    unavailable: Callable[[Project], str] | None = None


class CoverageFirst:
    """Meta and selection tasks first (search needs their labels soonest), then the rest, each
    group in a seeded random order so that no task or domain is favoured."""

    name = "coverage"
    FIRST = frozenset({Split.META, Split.SELECTION})

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def rank(self, pairs: Sequence[CandidatePair]) -> list[Ranked]:
        rng = random.Random(self.seed)
        return [Ranked((1.0 if pair.split in self.FIRST else 0.0) + rng.random()) for pair in pairs]


_SPECS: dict[str, StrategySpec] = {}


def strategy_register(spec: StrategySpec) -> None:
    """Make a strategy choosable by its name. Registering a name again replaces its spec in
    place (ready() may run more than once, say in tests), so the order stays that of first
    registration."""
    _SPECS[spec.name] = spec


def strategy_specs() -> list[StrategySpec]:
    """Every registered strategy, in registration order (coverage first)."""
    return list(_SPECS.values())


def strategy_for(project: Project, *, seed: int = 0) -> StrategyChoice:
    """The strategy the project chose, as it can run now. A name nothing registered (an app
    removed, a typo in the database) serves Coverage first and says why."""
    spec = _SPECS.get(project.queue_strategy)
    if spec is None:
        return StrategyChoice(CoverageFirst(seed), fallback=_unknown_text(project))
    return spec.build(project, seed)


def strategy_fallback(project: Project) -> str:
    """Why the project's chosen strategy cannot run now ("" when it can), as strategy_for would
    say, without building a strategy whose spec offers a cheaper check (a page asks this on
    every view; building Which grader wins reads every candidate's rewards)."""
    spec = _SPECS.get(project.queue_strategy)
    if spec is None:
        return _unknown_text(project)
    if spec.unavailable is not None:
        return spec.unavailable(project)
    return spec.build(project, 0).fallback


def _unknown_text(project: Project) -> str:
    return (
        f"the chosen strategy {project.queue_strategy!r} is not available "
        f"(known: {', '.join(_SPECS)}); serving {COVERAGE.label} until another is chosen"
    )


COVERAGE = StrategySpec(
    name=CoverageFirst.name,
    label="Coverage first",
    hint="Meta and selection tasks first, then the rest, in a seeded random order.",
    build=lambda project, seed: StrategyChoice(CoverageFirst(seed)),
)
strategy_register(COVERAGE)
