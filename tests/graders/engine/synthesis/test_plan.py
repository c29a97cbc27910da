"""The cell plan: every (task, dimension), contrasts in a seeded balanced rotation, the agent
drawn per cell and fixed within it."""

import re
from collections import Counter

import pytest

from graders.engine.synthesis.plan import CellPlan, PlanInvalid, cells_plan
from graders.engine.synthesis.types import CONTRASTS


def _tasks(n: int) -> list[str]:
    return [f"t{i}" for i in range(1, n + 1)]


def _counts(cells: list[CellPlan], dimension: str) -> Counter[str]:
    return Counter(cell.contrast for cell in cells if cell.dimension == dimension)


def test_small_plan_pinned_by_hand() -> None:
    # The seeded orders, from random.Random(...).shuffle of ["t1", "t2", "t3", "t4"]:
    #   "0:contrast:clarity" -> t2, t1, t4, t3; dealt from CONTRASTS[0]: bad-ok, ok-good, bad-good, bad-ok
    #   "0:contrast:warmth"  -> t1, t4, t3, t2; dealt from CONTRASTS[1]: ok-good, bad-good, bad-ok, ok-good
    # Agents from random.Random("0:agent:{dimension}:{task}").choice(["m1", "m2"]).
    cells = cells_plan(
        tasks=_tasks(4), dimensions=["clarity", "warmth"], agents=["m1", "m2"], seed=0
    )
    got = [(c.key, c.contrast, c.agent) for c in cells]
    assert got == [
        ("clarity.t1", "ok-good", "m1"),
        ("clarity.t2", "bad-ok", "m1"),
        ("clarity.t3", "bad-ok", "m1"),
        ("clarity.t4", "bad-good", "m2"),
        ("warmth.t1", "ok-good", "m2"),
        ("warmth.t2", "ok-good", "m1"),
        ("warmth.t3", "bad-ok", "m2"),
        ("warmth.t4", "bad-good", "m2"),
    ]
    # The leftover cell of each dimension went to a different contrast: 3, 3, 2 over the run.
    assert Counter(c.contrast for c in cells) == {"bad-ok": 3, "ok-good": 3, "bad-good": 2}


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_equal_thirds_per_dimension_when_divisible(seed: int) -> None:
    cells = cells_plan(tasks=_tasks(12), dimensions=["a", "b", "c"], agents=["m"], seed=seed)
    for dimension in "abc":
        assert _counts(cells, dimension) == {"bad-ok": 4, "ok-good": 4, "bad-good": 4}


@pytest.mark.parametrize("n", [1, 2, 4, 5, 7, 11])
def test_counts_differ_by_at_most_one_otherwise(n: int) -> None:
    dimensions = ["a", "b", "c", "d"]
    cells = cells_plan(tasks=_tasks(n), dimensions=dimensions, agents=["m"], seed=3)
    for dimension in dimensions:
        counts = [_counts(cells, dimension)[f"{lo}-{hi}"] for lo, hi in CONTRASTS]
        assert sum(counts) == n
        assert max(counts) - min(counts) <= 1
    overall = Counter(cell.contrast for cell in cells)
    # The rotation's start moves per dimension, so the leftovers spread over the run too.
    assert max(overall.values()) - min(overall.values()) <= 1


def test_every_task_and_dimension_once_with_low_below_high() -> None:
    cells = cells_plan(tasks=_tasks(5), dimensions=["a", "b"], agents=["m"], seed=0)
    assert sorted((c.dimension, c.task_id) for c in cells) == sorted(
        (d, t) for d in "ab" for t in _tasks(5)
    )
    order = {"bad": 0, "ok": 1, "good": 2}
    assert all(order[c.low] < order[c.high] for c in cells)
    assert len({c.key for c in cells}) == len(cells)


def test_deterministic_by_seed_and_seeds_differ() -> None:
    def plan(seed: int) -> list[CellPlan]:
        return cells_plan(
            tasks=_tasks(30), dimensions=["a", "b"], agents=["m1", "m2", "m3"], seed=seed
        )

    assert plan(5) == plan(5)
    assert [c.contrast for c in plan(5)] != [c.contrast for c in plan(6)]
    assert [c.agent for c in plan(5)] != [c.agent for c in plan(6)]


def test_agent_is_drawn_per_cell_from_every_agent() -> None:
    cells = cells_plan(tasks=_tasks(60), dimensions=["a"], agents=["m1", "m2", "m3"], seed=0)
    counts = Counter(cell.agent for cell in cells)
    assert set(counts) == {"m1", "m2", "m3"}
    assert min(counts.values()) >= 10  # a draw, not one agent for the whole run


def test_agent_of_a_cell_does_not_depend_on_the_other_tasks() -> None:
    few = cells_plan(tasks=_tasks(3), dimensions=["a"], agents=["m1", "m2"], seed=9)
    many = cells_plan(tasks=_tasks(40), dimensions=["a"], agents=["m1", "m2"], seed=9)
    by_key = {cell.key: cell.agent for cell in many}
    assert all(by_key[cell.key] == cell.agent for cell in few)


def test_keys_carry_the_domain_when_given() -> None:
    cells = cells_plan(
        tasks=["air-3"],
        dimensions=["friendliness"],
        agents=["m"],
        seed=0,
        domains={"air-3": "airline"},
    )
    assert cells[0].key == "airline.friendliness.air-3"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": []}, "tasks: none given"),
        ({"dimensions": ["a", "a"]}, "dimensions: 'a' appears twice"),
        ({"agents": [""]}, "agents: an empty name"),
        ({"domains": {}}, "domains: no domain for task t1"),
    ],
)
def test_bad_input_is_named(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"tasks": ["t1"], "dimensions": ["a"], "agents": ["m"], "seed": 0}
    with pytest.raises(PlanInvalid, match=message):
        cells_plan(**{**base, **kwargs})  # type: ignore[arg-type]


def test_colliding_keys_are_refused() -> None:
    with pytest.raises(PlanInvalid, match=re.escape("cell keys: 'a.b.c' appears twice")):
        cells_plan(tasks=["c", "b.c"], dimensions=["a.b", "a"], agents=["m"], seed=0)
