"""What the sampling queue strategies share: turning a pool's values into ranks that are a
seeded random draw, each drawn pair carrying its chance and the pool's size (so accuracies on
the labels it brings can be reweighted), and every pair outside the pool after all of them."""

import random
from collections.abc import Callable, Sequence

import numpy as np

from graders.engine.active.sampling import sampling_priorities, selection_probabilities
from labeling.strategies import CandidatePair, Ranked


def pair_key(pair: CandidatePair) -> tuple[int, int]:
    """The pair's responses in id order, as labels and queue rows name a pair."""
    return min(pair.response_a, pair.response_b), max(pair.response_a, pair.response_b)


def pool_draw(
    pairs: Sequence[CandidatePair],
    *,
    in_pool: Callable[[CandidatePair], bool],
    values: Callable[[Sequence[CandidatePair]], np.ndarray],
    epsilon: float,
    seed: int,
) -> list[Ranked]:
    """One rank per pair: the pool's pairs drawn with probabilities from their values (an
    `epsilon` share uniformly), then the rest (outside the pool, or given no chance when epsilon
    is 0) below every drawn priority, each <= 0, in a seeded random order, with no chance."""
    pool = [i for i, pair in enumerate(pairs) if in_pool(pair)]
    q = selection_probabilities(values([pairs[i] for i in pool]), epsilon=epsilon)
    priorities = sampling_priorities(q, np.random.default_rng(seed))
    ranks: list[Ranked | None] = [None] * len(pairs)
    for i, chance, priority in zip(pool, q, priorities, strict=True):
        if chance > 0:
            ranks[i] = Ranked(float(priority), float(chance), len(pool))
    floor = min((rank.priority for rank in ranks if rank is not None), default=0.0) - 1.0
    order = random.Random(seed)
    return [rank or Ranked(floor - order.random()) for rank in ranks]
