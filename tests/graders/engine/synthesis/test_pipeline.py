"""cells_run: steer, roll, filter, retry, per cell, store first (DESIGN.md section 11)."""

import asyncio
import itertools
import re
from collections import Counter
from typing import Any

import pytest

from graders.engine.judge import BudgetExhausted, ChatRequest
from graders.engine.slots import call_priority
from graders.engine.synthesis.pipeline import FILTER_REASKS, cells_run, rollout_seed, slot_order
from graders.engine.synthesis.plan import CellPlan, cells_plan
from graders.engine.synthesis.prompts import FILTER_REASK, steer_parse
from graders.engine.synthesis.types import DimensionSpec, SynthesisTask
from tests.graders.engine.synthesis.helpers import (
    STEER_ANSWER,
    STEERING,
    FakeJudge,
    FakeRoller,
    MemoryStore,
    quality,
    right_answer,
    slots,
    verdict,
    wrong_answer,
)

DIMENSIONS = {"warmth": DimensionSpec("warmth", "Care shown to the user.")}


def _tasks(n: int) -> dict[str, SynthesisTask]:
    return {
        f"t{i}": SynthesisTask(f"t{i}", "airline", f"Help me with booking {i}.", f"You want {i}.")
        for i in range(n)
    }


def _cells(n: int, seed: int = 0) -> list[CellPlan]:
    return cells_plan(tasks=list(_tasks(n)), dimensions=["warmth"], agents=["m1"], seed=seed)


def _run(
    cells: list[CellPlan],
    store: MemoryStore,
    *,
    judges: list[tuple[str, FakeJudge]],
    writer: FakeJudge | None = None,
    roller: FakeRoller | None = None,
    retries: int = 2,
    seed: int = 0,
) -> dict[str, Any]:
    writer = writer or FakeJudge(lambda request: STEER_ANSWER)
    roller = roller or FakeRoller()
    asyncio.run(
        cells_run(
            cells,
            tasks=_tasks(len(cells)),
            dimensions=DIMENSIONS,
            writer=writer,
            judges=judges,
            roller=roller,
            store=store,
            retries=retries,
            seed=seed,
        )
    )
    return {"writer": writer, "roller": roller}


def test_a_kept_first_draw_asks_each_stage_once_and_stores_it() -> None:
    store = MemoryStore()
    j1, j2 = FakeJudge(right_answer), FakeJudge(right_answer)
    fakes = _run(_cells(1), store, judges=[("j1", j1), ("j2", j2)])
    [cell] = _cells(1)
    assert len(fakes["writer"].requests) == 1 and len(fakes["roller"].calls) == 2
    assert (len(j1.requests), len(j2.requests)) == (1, 1)
    assert [e[0] for e in store.events] == ["steering", "rollout", "rollout", "vote", "vote", "end"]
    assert store.ends == {(cell.key, 0): True}
    steering = store.steerings[cell.key]
    assert steering.as_dict() == STEERING.as_dict()
    assert (steering.calls, steering.cost, steering.tokens_in) == (1, 0.01, 10)
    vote = store.votes[(cell.key, 0, 1)]
    assert (vote.judge, vote.agrees, vote.calls, len(vote.answers)) == ("j2", True, 1, 1)
    # The rollouts follow the cell's two levels, lower first in the store's keys.
    levels = {"bad": 0, "ok": 1, "good": 2}
    assert quality(store.rollouts[(cell.key, 0, cell.low)].content or "") == levels[cell.low]
    assert quality(store.rollouts[(cell.key, 0, cell.high)].content or "") == levels[cell.high]


def test_a_veto_stops_the_cascade_and_retry_one_redraws_with_the_same_steering() -> None:
    store = MemoryStore()
    calls = itertools.count()
    j1 = FakeJudge(lambda r: wrong_answer(r) if next(calls) == 0 else right_answer(r))
    j2 = FakeJudge(right_answer)
    fakes = _run(_cells(1), store, judges=[("j1", j1), ("j2", j2)])
    [cell] = _cells(1)
    assert store.ends == {(cell.key, 0): False, (cell.key, 1): True}
    assert store.votes[(cell.key, 0, 0)].agrees is False
    assert (cell.key, 0, 1) not in store.votes  # j2 never saw the vetoed draw
    assert len(j2.requests) == 1
    assert len(fakes["writer"].requests) == 1  # the steering is written once per cell
    roll_calls = fakes["roller"].calls
    assert len(roll_calls) == 4
    # Same steering text per level on both draws, fresh seeds (new rollouts) on the retry.
    assert sorted(c[1] for c in roll_calls[:2]) == sorted(c[1] for c in roll_calls[2:])
    assert {c[3] for c in roll_calls[:2]}.isdisjoint({c[3] for c in roll_calls[2:]})
    assert store.rollouts[(cell.key, 0, cell.low)] != store.rollouts[(cell.key, 1, cell.low)]


def test_every_draw_vetoed_ends_the_cell_after_r_retries() -> None:
    store = MemoryStore()
    _run(_cells(1), store, judges=[("j1", FakeJudge(wrong_answer))], retries=2)
    [cell] = _cells(1)
    assert store.ends == {(cell.key, r): False for r in range(3)}
    assert not store.failures


def test_no_verdict_is_re_asked_twice_then_counts_as_a_veto() -> None:
    store = MemoryStore()
    undecided = FakeJudge(lambda request: "They are both fine, hard to say.")
    j2 = FakeJudge(right_answer)
    _run(_cells(1), store, judges=[("j1", undecided), ("j2", j2)], retries=0)
    [cell] = _cells(1)
    vote = store.votes[(cell.key, 0, 0)]
    assert FILTER_REASKS == 2
    assert (vote.agrees, vote.calls, len(vote.answers)) == (None, 3, 3)
    assert store.ends == {(cell.key, 0): False} and not j2.requests
    asked = [request.messages[-1]["content"] for request in undecided.requests]
    assert [FILTER_REASK in text for text in asked] == [False, True, True]
    assert len(set(asked)) == 2  # the re-ask is a new request, not a cache hit of the first


def test_a_verdict_on_the_last_re_ask_counts() -> None:
    store = MemoryStore()
    answers = iter(["no idea", "still torn"])
    late = FakeJudge(lambda request: next(answers, None) or right_answer(request))
    _run(_cells(1), store, judges=[("j1", late)], retries=0)
    [cell] = _cells(1)
    vote = store.votes[(cell.key, 0, 0)]
    assert (vote.agrees, vote.answers[:2]) == (True, ("no idea", "still torn"))


def test_slot_orders_are_recorded_balanced_and_read_correctly() -> None:
    store = MemoryStore()
    cells = _cells(300)
    _run(cells, store, judges=[("j1", FakeJudge(right_answer)), ("j2", FakeJudge(right_answer))])
    votes = list(store.votes.values())
    assert len(votes) == 600 and all(vote.agrees for vote in votes)  # either order, read right
    orders = Counter(vote.slot_order for vote in votes)
    # 600 fair coins: 300 +/- 3.3 sd lies in [260, 340] with probability > 0.999.
    assert 260 <= orders["ab"] <= 340
    for (key, retry, position), vote in store.votes.items():
        cell = next(c for c in cells if c.key == key)
        assert vote.slot_order == slot_order(0, cell, retry, position)
    # Per pair and judge: the two judges of a draw do not always share an order.
    assert any(
        store.votes[(c.key, 0, 0)].slot_order != store.votes[(c.key, 0, 1)].slot_order
        for c in cells
    )


def test_slot_order_decides_what_the_judge_sees_as_a() -> None:
    store = MemoryStore()
    judge = FakeJudge(right_answer)
    cells = _cells(20)
    _run(cells, store, judges=[("j1", judge)])
    by_task = {cell.task_id: cell for cell in cells}
    for request in judge.requests:
        a, b = slots(request)
        cell = by_task[a.split("task=")[1].split()[0]]
        lower_first = quality(a) < quality(b)
        assert lower_first == (slot_order(0, cell, 0, 0) == "ab")


def test_resume_after_a_crash_makes_exactly_the_missing_calls() -> None:
    cells = _cells(12)
    judges = lambda: [("j1", FakeJudge(right_answer)), ("j2", FakeJudge(right_answer))]  # noqa: E731
    full = MemoryStore()
    _run(cells, full, judges=judges())
    # A crash after half the work: the first half of the events stored, the rest lost.
    half = MemoryStore()
    stored = full.events[: len(full.events) // 2]
    for event in stored:
        kind, key, *rest = event
        cell = next(c for c in cells if c.key == key)
        if kind == "steering":
            half.steering_put(cell, full.steerings[key])
        elif kind == "rollout":
            half.rollout_put(cell, rest[0], rest[1], full.rollouts[(key, *rest)])  # type: ignore[arg-type]
        elif kind == "vote":
            half.vote_put(cell, rest[0], full.votes[(key, *rest)])  # type: ignore[arg-type]
        elif kind == "end":
            half.draw_end(cell, rest[0], rest[1])
    resumed_judges = judges()
    fakes = _run(cells, half, judges=resumed_judges)
    kinds = Counter(event[0] for event in stored)
    assert len(fakes["writer"].requests) == len(full.steerings) - kinds["steering"]
    assert len(fakes["roller"].calls) == len(full.rollouts) - kinds["rollout"]
    judge_calls = sum(len(judge.requests) for _, judge in resumed_judges)
    assert judge_calls == len(full.votes) - kinds["vote"]
    # ... and ends where the uninterrupted run did.
    assert (half.steerings, half.rollouts, half.votes, half.ends) == (
        full.steerings,
        full.rollouts,
        full.votes,
        full.ends,
    )


def test_a_straggler_does_not_hold_other_cells() -> None:
    # One cell's rollout waits until every other cell has finished: with any barrier between
    # cells or stages the run would never end.
    cells = _cells(8)
    straggler = cells[3]
    store = MemoryStore()
    others = {cell.key for cell in cells} - {straggler.key}

    async def main() -> None:
        gate = asyncio.Event()
        roller = FakeRoller(gate=gate, held_task=straggler.task_id)

        async def release() -> None:
            while not others <= {key for key, _ in store.ends}:
                await asyncio.sleep(0)
            gate.set()

        releaser = asyncio.create_task(release())
        await asyncio.wait_for(
            cells_run(
                cells,
                tasks=_tasks(8),
                dimensions=DIMENSIONS,
                writer=FakeJudge(lambda request: STEER_ANSWER),
                judges=[("j1", FakeJudge(right_answer))],
                roller=roller,
                store=store,
                retries=0,
                seed=0,
            ),
            timeout=5,
        )
        await releaser

    asyncio.run(main())
    ends = [event[1] for event in store.events if event[0] == "end"]
    assert ends[-1] == straggler.key and set(ends[:-1]) == others


def test_a_cell_that_has_come_further_waits_with_a_more_urgent_priority() -> None:
    # Each call's priority is minus the cell's call time so far (queueing excluded): steering
    # 1 s, the slower rollout 2 s, each vote 1 s. Two cells run concurrently, each on its own.
    writer = FakeJudge(lambda request: STEER_ANSWER, latency_s=1.0)
    roller = FakeRoller(latency_s=2.0)
    j1, j2 = FakeJudge(right_answer, latency_s=1.0), FakeJudge(right_answer, latency_s=1.0)
    _run(_cells(2), MemoryStore(), judges=[("j1", j1), ("j2", j2)], writer=writer, roller=roller)
    assert (writer.priorities, roller.priorities) == ([0.0, 0.0], [-1.0] * 4)
    assert (j1.priorities, j2.priorities) == ([-3.0, -3.0], [-4.0, -4.0])
    assert call_priority.get() == 0.0  # set in the cells' own tasks, not the caller's


def test_steering_is_re_asked_once_with_the_validation_error() -> None:
    store = MemoryStore()
    answers = iter(['{"reasoning": "x", "bad": "b", "ok": "o"}'])
    writer = FakeJudge(lambda request: next(answers, STEER_ANSWER))
    _run(_cells(1), store, judges=[("j1", FakeJudge(right_answer))], writer=writer)
    first, second = writer.requests
    assert "missing required field good" in second.messages[-1]["content"]
    assert "missing required field" not in first.messages[-1]["content"]
    [cell] = _cells(1)
    assert store.steerings[cell.key].calls == 2 and store.ends[(cell.key, 0)] is True


def test_steering_invalid_twice_fails_the_cell_with_the_reason_and_rolls_nothing() -> None:
    store = MemoryStore()
    writer = FakeJudge(lambda request: "I would rather not.")
    fakes = _run(_cells(2), store, judges=[("j1", FakeJudge(right_answer))], writer=writer)
    assert len(writer.requests) == 4  # two cells, one re-ask each
    assert set(store.failures.values()) == {
        "steering writer: the answer holds no complete JSON object (still after one re-ask)"
    }
    assert not fakes["roller"].calls and not store.steerings and not store.ends
    assert set(store.failed_in.values()) == {None}  # before any draw


def test_a_failed_rollout_fails_the_cell_and_keeps_the_other_side() -> None:
    store = MemoryStore()
    [cell] = cells_plan(tasks=["t0"], dimensions=["warmth"], agents=["m1"], seed=0)
    levels = {"bad": 0, "ok": 1, "good": 2}
    roller = FakeRoller(fail_level=levels[cell.high])
    judge = FakeJudge(right_answer)
    _run([cell], store, judges=[("j1", judge)], roller=roller)
    assert store.failures == {
        cell.key: f"rollout {cell.high} (retry 0): the agent endpoint answered 500"
    }
    assert list(store.rollouts) == [(cell.key, 0, cell.low)] and not judge.requests
    assert store.failed_in == {cell.key: 0}


def test_a_deferred_rollout_stops_its_cell_quietly_and_a_later_pass_goes_on() -> None:
    """The harness's "not sent yet": no failure and no draw end for the cell, the other cells
    go on, and a second pass (the rollouts now at hand) resumes the open draw, asking nothing
    the first pass stored."""
    store = MemoryStore()
    cells = _cells(2)
    held = next(cell for cell in cells if cell.task_id == "t1")
    first_seed = rollout_seed(0, held, 0)
    # The first draw of t1 is vetoed, its second draw's rollouts are deferred.
    judge = FakeJudge(
        lambda request: wrong_answer(request) if "task=t1 seed=" + str(first_seed) in
        request.messages[-1]["content"] else right_answer(request)
    )  # fmt: skip
    roller = FakeRoller(defer=lambda task, seed: task == "t1" and seed != first_seed)
    _run(cells, store, judges=[("j1", judge)], roller=roller)
    assert not store.failures
    assert store.ends == {(held.key, 0): False, (cells[0].key, 0): True}
    assert (held.key, 1, held.low) not in store.rollouts
    assert [e for e in store.events if e[0] == "fail"] == []
    # The next pass: rollouts come now; the steering and the vetoed draw are not asked again.
    writer = FakeJudge(lambda request: STEER_ANSWER)
    again = _run(cells, store, judges=[("j1", judge)], writer=writer)
    assert not writer.requests
    assert [(task, seed) for task, _, _, seed in again["roller"].calls] == [
        ("t1", rollout_seed(0, held, 1))
    ] * 2
    assert store.ends[(held.key, 1)] is True and not store.failures


def test_a_budget_stop_ends_cleanly_after_the_other_cells_store_their_work() -> None:
    store = MemoryStore()
    cells = _cells(6)

    def budget(request: ChatRequest) -> BaseException | None:
        return (
            BudgetExhausted("call budget of 5 spent")
            if "You want 2." in request.messages[-1]["content"]
            else None
        )

    writer = FakeJudge(lambda request: STEER_ANSWER, fail=budget)
    with pytest.raises(BudgetExhausted, match="call budget of 5 spent"):
        _run(cells, store, judges=[("j1", FakeJudge(right_answer))], writer=writer)
    stopped = next(cell for cell in cells if cell.task_id == "t2")
    assert store.kept_cells() == {cell.key for cell in cells} - {stopped.key}
    assert stopped.key not in store.steerings and not store.failures


def test_judges_never_see_the_steering_text() -> None:
    store = MemoryStore()
    j1 = FakeJudge(right_answer)
    _run(_cells(6), store, judges=[("j1", j1)])
    steering_texts = [STEERING.bad, STEERING.ok, STEERING.good, STEERING.reasoning, "STEER-"]
    for request in j1.requests:
        for message in request.messages:
            assert not any(text in message["content"] for text in steering_texts)


def test_bad_arguments_are_refused_before_any_call() -> None:
    store = MemoryStore()
    with pytest.raises(ValueError, match="at least one filter judge"):
        _run(_cells(1), store, judges=[])
    [cell] = cells_plan(tasks=["t9"], dimensions=["warmth"], agents=["m1"], seed=0)
    with pytest.raises(ValueError, match="unknown task 't9'"):
        _run([cell], store, judges=[("j1", FakeJudge(right_answer))])
    with pytest.raises(ValueError, match=re.escape("cell warmth.t0 appears twice")):
        _run(_cells(1) * 2, store, judges=[("j1", FakeJudge(right_answer))])
    with pytest.raises(ValueError, match="retries must be 0 or more"):
        _run(_cells(1), store, judges=[("j1", FakeJudge(right_answer))], retries=-1)
    assert not store.events


def test_stored_steering_is_parsed_back_from_what_the_writer_wrote() -> None:
    assert steer_parse(STEER_ANSWER).as_dict() == STEERING.as_dict()
    assert verdict("A") == '{"reasoning": "compared", "answer": "A"}'
