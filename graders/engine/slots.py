"""Call slots that go to the most urgent waiter first.

A JudgeClient lets at most `max_concurrency` calls in flight. When more wait, the order they get
in matters to a pipeline whose work items are chains of calls (synthesis cells: steer, roll,
filter, retry): first come, first served lets a chain that was slowed by one very slow call
queue again behind everything that arrived meanwhile, so the run ends well after its longest
chain. A caller states its urgency in the `call_priority` context variable (lower goes first;
the default 0 for everyone is first come, first served); the variable follows the asyncio task,
so each chain sets it once for all the calls it makes, through whatever code makes them.
"""

import asyncio
import heapq
import itertools
from contextvars import ContextVar
from types import TracebackType

call_priority: ContextVar[float] = ContextVar("call_priority", default=0.0)


class PrioritySlots:
    """An async context manager admitting at most `limit` holders at once; waiters are admitted
    by (call_priority, arrival order)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._free = limit
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot now."""
        return sum(not future.done() for *_, future in self._waiters)

    async def __aenter__(self) -> None:
        # A slot is free only while nobody waits: a released slot goes to a waiter first.
        if self._free > 0:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (call_priority.get(), next(self._arrivals), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # the slot was handed over as the waiter was cancelled: pass it on
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        """Hand the slot to the most urgent live waiter, or free it."""
        while self._waiters:
            *_, future = heapq.heappop(self._waiters)
            if not future.done():  # a cancelled waiter's future is done
                future.set_result(None)
                return
        self._free += 1
