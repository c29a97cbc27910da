"""PrioritySlots: at most `limit` holders; waiters admitted by call_priority, then arrival."""

import asyncio

import pytest

from graders.engine.slots import PrioritySlots, call_priority


def _admission_order(priorities: list[float], limit: int = 1) -> list[int]:
    """Start one holder per slot, queue callers with these priorities, record who gets in."""

    async def main() -> list[int]:
        slots = PrioritySlots(limit)
        order: list[int] = []
        release = asyncio.Event()

        async def holder() -> None:
            async with slots:
                await release.wait()

        async def caller(index: int, priority: float) -> None:
            call_priority.set(priority)
            async with slots:
                order.append(index)
                await asyncio.sleep(0)

        holders = [asyncio.create_task(holder()) for _ in range(limit)]
        await asyncio.sleep(0)
        callers = [asyncio.create_task(caller(i, p)) for i, p in enumerate(priorities)]
        await asyncio.sleep(0)
        assert slots.waiting == len(priorities)
        release.set()
        await asyncio.gather(*holders, *callers)
        return order

    return asyncio.run(main())


def test_lower_priority_value_goes_first_ties_in_arrival_order() -> None:
    assert _admission_order([0.0, -5.0, 0.0, -1.0, -5.0]) == [1, 4, 3, 0, 2]


def test_equal_priorities_are_first_come_first_served() -> None:
    assert _admission_order([0.0] * 6, limit=2) == [0, 1, 2, 3, 4, 5]


def test_never_more_than_limit_holders() -> None:
    async def main() -> int:
        slots = PrioritySlots(3)
        inside = peak = 0

        async def call(index: int) -> None:
            nonlocal inside, peak
            call_priority.set(-(index % 4))
            async with slots:
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.001 * (index % 3))
                inside -= 1

        await asyncio.gather(*(call(i) for i in range(40)))
        return peak

    assert asyncio.run(main()) == 3


def test_a_cancelled_waiter_gives_up_its_place_and_no_slot_is_lost() -> None:
    async def main() -> list[str]:
        slots = PrioritySlots(1)
        order: list[str] = []
        release = asyncio.Event()

        async def holder() -> None:
            async with slots:
                await release.wait()

        async def caller(name: str) -> None:
            async with slots:
                order.append(name)

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        doomed = asyncio.create_task(caller("doomed"))
        kept = asyncio.create_task(caller("kept"))
        await asyncio.sleep(0)
        doomed.cancel()
        release.set()
        await asyncio.gather(first, kept)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        # The slot is free again: a new caller gets in at once.
        await asyncio.wait_for(caller("after"), timeout=1)
        return order

    assert asyncio.run(main()) == ["kept", "after"]


def test_a_waiter_cancelled_as_it_is_handed_the_slot_passes_it_on() -> None:
    async def main() -> list[str]:
        slots = PrioritySlots(1)
        order: list[str] = []

        async def caller(name: str) -> None:
            async with slots:
                order.append(name)

        await slots.__aenter__()
        handed = asyncio.create_task(caller("handed"))
        nxt = asyncio.create_task(caller("next"))
        await asyncio.sleep(0)
        await slots.__aexit__(None, None, None)  # hands the slot to "handed"...
        handed.cancel()  # ...which is cancelled before it runs
        await asyncio.wait_for(nxt, timeout=1)
        return order

    assert asyncio.run(main()) == ["next"]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit must be at least 1"):
        PrioritySlots(0)
