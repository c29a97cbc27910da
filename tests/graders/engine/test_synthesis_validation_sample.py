"""The stratified validation sample (graders.engine.synthesis.validation_sample)."""

import random

import pytest

from graders.engine.synthesis.validation_sample import (
    SampleCandidate,
    stratified_sample,
    stratum_allocation,
)


def test_equal_allocation_with_water_filling() -> None:
    # Level 3: min(5,3) + min(1,3) + min(3,3) = 7 exactly.
    assert stratum_allocation([5, 1, 3], [0, 0, 0], 7, random.Random(0)) == [3, 1, 3]
    # Level 2 gives 2 + 1 + 2 = 5; one unit left for one of the two strata that can grow.
    six = stratum_allocation([5, 1, 3], [0, 0, 0], 6, random.Random(0))
    assert sorted([six[0], six[2]]) == [2, 3] and six[1] == 1
    # The seed decides which one: both outcomes occur over seeds.
    assert {
        tuple(stratum_allocation([5, 1, 3], [0, 0, 0], 6, random.Random(s))) for s in range(20)
    } == {
        (3, 1, 2),
        (2, 1, 3),
    }
    # More asked than there is: everything.
    assert stratum_allocation([5, 1, 3], [0, 0, 0], 100, random.Random(0)) == [5, 1, 3]
    assert stratum_allocation([5, 1, 3], [0, 0, 0], 9, random.Random(0)) == [5, 1, 3]


def test_floors_are_kept() -> None:
    # A stratum already holding 4 keeps them; the other two share the rest: level 1.
    assert stratum_allocation([5, 1, 3], [4, 0, 0], 6, random.Random(0)) == [4, 1, 1]
    # A sample larger than asked never shrinks.
    assert stratum_allocation([5, 1, 3], [5, 1, 0], 3, random.Random(0)) == [5, 1, 0]
    with pytest.raises(ValueError, match="between 0 and its stratum's capacity"):
        stratum_allocation([2], [3], 1, random.Random(0))


def _candidates(sampled: frozenset[int] = frozenset()) -> list[SampleCandidate]:
    # Strata of 6, 3 and 1 draws (ids 1..10).
    strata = [("friendly", "airline", "bad-ok")] * 6 + [("friendly", "retail", "ok-good")] * 3
    strata += [("clear", "airline", "bad-good")]
    return [SampleCandidate(i + 1, s, (i + 1) in sampled) for i, s in enumerate(strata)]


def test_sample_is_stratified_seeded_and_grows_as_a_superset() -> None:
    five = stratified_sample(_candidates(), size=5, seed=7)
    assert len(five) == 5
    by_stratum = [sum(1 for d in five if d in group) for group in (range(1, 7), range(7, 10), [10])]
    assert sorted(by_stratum) == [1, 2, 2]  # level 2 with the lone stratum capped at 1
    assert stratified_sample(_candidates(), size=5, seed=7) == five
    assert any(stratified_sample(_candidates(), size=5, seed=s) != five for s in range(10))
    # Asking again once those are sampled adds nothing; a larger size keeps them all.
    assert stratified_sample(_candidates(frozenset(five)), size=5, seed=7) == five
    eight = stratified_sample(_candidates(frozenset(five)), size=8, seed=7)
    assert set(five) < set(eight) and len(eight) == 8
    assert stratified_sample(_candidates(), size=150, seed=0) == list(range(1, 11))
    with pytest.raises(ValueError, match="at least 1"):
        stratified_sample(_candidates(), size=0, seed=0)
