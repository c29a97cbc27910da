"""The stratified, seeded sample of first draws that humans validate (PADME section 5.2).

Strata are (dimension, domain, contrast). Allocation is equal per stratum, not proportional:
the paper sampled "uniformly across domain and criterion combinations" (its Appendix D.4), so
that every stratum gets enough pairs for its own breakdown and a small stratum is not left
with one or two; the price is that the pooled accuracy is that of the sample's mix, which the
paper checked by post-stratification. A stratum with fewer draws than its share gives them
all, and the rest of the size goes equally to the others (water-filling); the few units left
over after equal shares go to strata drawn with the seed.

Growing a sample keeps it: draws already sampled stay (their labels exist), each stratum keeps
at least what it has, and within a stratum draws are taken in one seeded order, so a larger
sample with the same seed is a superset and the same request twice adds nothing.
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass

Stratum = tuple[str, str, str]  # (dimension, domain, contrast)


@dataclass(frozen=True)
class SampleCandidate:
    """A draw that may be sampled: its id, its stratum and whether it is already sampled."""

    draw_id: int
    stratum: Stratum
    sampled: bool = False


def stratum_allocation(
    capacities: Sequence[int], floors: Sequence[int], size: int, rng: random.Random
) -> list[int]:
    """How many draws each stratum gives: as equal as the capacities allow, never below a
    stratum's floor (what it already has), summing to `size` or to everything there is."""
    if len(capacities) != len(floors):
        raise ValueError("one floor per stratum")
    if any(f < 0 or f > c for f, c in zip(floors, capacities, strict=True)):
        raise ValueError("every floor must lie between 0 and its stratum's capacity")
    target = min(size, sum(capacities))
    if sum(floors) >= target:
        return list(floors)
    if target == sum(capacities):
        return list(capacities)

    def filled(level: int) -> list[int]:
        return [min(c, max(f, level)) for c, f in zip(capacities, floors, strict=True)]

    # The highest common level whose allocation still fits; one more unit then goes to some
    # of the strata that level + 1 would raise (there are more of them than units left).
    level = 0
    while sum(filled(level + 1)) <= target:
        level += 1
    allocation = filled(level)
    left = target - sum(allocation)
    growable = [
        i for i, (c, a) in enumerate(zip(capacities, allocation, strict=True)) if a == level < c
    ]
    for i in rng.sample(growable, left):
        allocation[i] += 1
    return allocation


def stratified_sample(candidates: Sequence[SampleCandidate], *, size: int, seed: int) -> list[int]:
    """The draw ids of a sample of `size` (or of every candidate when there are fewer),
    already sampled candidates included; sorted."""
    if size < 1:
        raise ValueError("the sample size must be at least 1")
    strata: dict[Stratum, list[SampleCandidate]] = {}
    for candidate in sorted(candidates, key=lambda c: c.draw_id):
        strata.setdefault(candidate.stratum, []).append(candidate)
    keys = sorted(strata)
    allocation = stratum_allocation(
        [len(strata[k]) for k in keys],
        [sum(c.sampled for c in strata[k]) for k in keys],
        size,
        random.Random(seed),
    )
    chosen: list[int] = []
    for key, count in zip(keys, allocation, strict=True):
        members = strata[key]
        order = [c.draw_id for c in members]
        random.Random(f"{seed}:{'|'.join(key)}").shuffle(order)
        kept = [c.draw_id for c in members if c.sampled]
        already = set(kept)
        fresh = [d for d in order if d not in already]
        chosen.extend(kept + fresh[: count - len(kept)])
    return sorted(chosen)
