"""Queue strategies: which pairs to queue and in what order to serve them.

A strategy only assigns priorities (higher is served first); the queue stores them, so serving
the next pair never recomputes anything. Active learning plugs in here as another strategy.
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from labeling.models import Split


@dataclass(frozen=True)
class CandidatePair:
    task_id: int
    split: str
    domain: str
    response_a: int
    response_b: int


class QueueStrategy(Protocol):
    name: str

    def priorities(self, pairs: Sequence[CandidatePair]) -> list[float]:
        """One priority per pair, in the same order."""
        ...


class CoverageFirst:
    """Meta and selection tasks first (search needs their labels soonest), then the rest, each
    group in a seeded random order so that no task or domain is favoured."""

    name = "coverage"
    FIRST = frozenset({Split.META, Split.SELECTION})

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def priorities(self, pairs: Sequence[CandidatePair]) -> list[float]:
        rng = random.Random(self.seed)
        return [(1.0 if pair.split in self.FIRST else 0.0) + rng.random() for pair in pairs]


STRATEGIES: dict[str, type[CoverageFirst]] = {CoverageFirst.name: CoverageFirst}
