"""The judge-call cache on the database, shared by every worker on every machine.

A row is keyed by the endpoint and the engine's request key together (`row_key`): two projects'
endpoints asking the same question share nothing, so no project learns from the cache whether
another graded a text, or reuses its answers; reruns through one endpoint still hit. (Rows from
before the endpoint was part of the key match nothing now; they cost only their space.)

The engine's client asks its cache synchronously from inside its event loop, where Django's
ORM refuses to run. So `run()` runs the engine's coroutine on a helper thread, and the calling
thread (which owns the database connection and any open transaction) answers the cache's
reads and writes until the coroutine is done. A lookup blocks the event loop for one indexed
read, a small price next to a judge call."""

import asyncio
import hashlib
import queue
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

from graders.models import JudgeCall, JudgeEndpoint

_DONE = object()


class DatabaseJudgeCache:
    """The cache of one endpoint's answers."""

    def __init__(self, endpoint: JudgeEndpoint) -> None:
        self.model = endpoint.model
        self._scope = f"judge endpoint {endpoint.pk}\n".encode()
        self._requests: queue.Queue[Any] = queue.Queue()

    def row_key(self, key: str) -> str:
        """The JudgeCall key of the engine's request key `key` at this endpoint."""
        return hashlib.sha256(self._scope + key.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        return self.call(self._get, self.row_key(key))

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.call(self._put, self.row_key(key), value)

    def run[T](self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` to completion on a helper thread, serving the cache meanwhile."""
        outcome: dict[str, Any] = {}

        def loop() -> None:
            try:
                outcome["value"] = asyncio.run(coroutine)
            except BaseException as exc:  # re-raised on the calling thread below
                outcome["error"] = exc
            finally:
                self._requests.put(_DONE)

        thread = threading.Thread(target=loop, name="judge-loop")
        thread.start()
        while (request := self._requests.get()) is not _DONE:
            function, args, future = request
            try:
                future.set_result(function(*args))
            except BaseException as exc:
                future.set_exception(exc)
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        value: T = outcome["value"]
        return value

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` on the calling thread of `run()` (the one that may use the
        database), from the coroutine's thread; blocks until it returns."""
        future: Future[Any] = Future()
        self._requests.put((function, args, future))
        return future.result()

    # _get and _put take row keys and run on the calling thread.
    @staticmethod
    def _get(row_key: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = (
            JudgeCall.objects.filter(key=row_key).values_list("result", flat=True).first()
        )
        return result

    def _put(self, row_key: str, value: dict[str, Any]) -> None:
        # Another worker may have answered the same request first; both answers are valid.
        JudgeCall.objects.bulk_create(
            [JudgeCall(key=row_key, model=self.model, result=value)], ignore_conflicts=True
        )
