"""Judge client throughput against the fake judge, and what a rerun costs.

    python bench/judge_throughput.py [--calls 5000] [--concurrency 64] [--latency-ms 100]

With `concurrency` calls in flight, each taking `latency`, no client can beat
concurrency / latency calls per second (Little's law). The first run prints the rate achieved by
the engine's JudgeClient (temperature 0, a JSON Lines cache in a temporary folder) and its ratio to
that bound (target >= 0.85). The second run repeats the same requests with the cache reloaded from
its file and prints how many new HTTP calls reached the server (target: 0).

The fake server runs in its own process, as a real judge would: in this process it would share
the interpreter lock with the client and its CPU would be charged to the client.
"""

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graders.engine.judge import (
    ChatRequest,
    JsonlFileCache,
    JudgeClient,
    JudgeSettings,
    Usage,
)
from tests.fakes.openai_server import FakeJudgeServer

TARGET_RATIO = 0.85
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
}


class JudgeServerProcess:
    """The fake judge in a child process; `stats()` asks it for its request counts."""

    def __init__(self, latency_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._control, child_end = context.Pipe()
        self._process = context.Process(target=serve, args=(latency_s, child_end), daemon=True)
        self.base_url = ""

    def __enter__(self) -> Self:
        self._process.start()
        self.base_url = self._control.recv()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._control.send("stop")
        self._process.join(timeout=10)

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None, "not started"
        return pid

    def stats(self) -> dict[str, int]:
        self._control.send("stats")
        stats: dict[str, int] = self._control.recv()
        return stats


def serve(latency_s: float, control: Connection) -> None:
    """Child process: serve until told to stop, answering each "stats" message."""
    with FakeJudgeServer(latency_s=latency_s, keep_requests=False) as server:
        control.send(server.base_url)
        while control.recv() == "stats":
            control.send({"calls": server.call_count, "max_in_flight": server.max_in_flight})


def bench_requests(calls: int) -> list[ChatRequest]:
    """Distinct requests shaped like a grading step: a rubric and one response to grade."""
    rubric = 'Grade the response against the rubric. Reply with JSON: {"score": 0..1}.'
    return [
        ChatRequest(
            messages=(
                {"role": "system", "content": rubric},
                {"role": "user", "content": f"Response {index}: the clause caps liability at 10%."},
            ),
            schema=SCHEMA,
            name="bench",
        )
        for index in range(calls)
    ]


async def run_once(
    settings: JudgeSettings, cache: JsonlFileCache, requests: list[ChatRequest]
) -> tuple[float, Usage]:
    """Complete every request; return the seconds taken and the client's usage."""
    async with JudgeClient(settings, cache=cache) as client:
        started = time.perf_counter()
        results = await client.complete_many(requests)
        elapsed = time.perf_counter() - started
    errors = [result.error for result in results if result.error is not None]
    if errors:
        raise SystemExit(f"{len(errors)} calls failed; first: {errors[0]}")
    return elapsed, client.usage


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args()
    requests = bench_requests(args.calls)
    with (
        JudgeServerProcess(args.latency_ms / 1000) as server,
        tempfile.TemporaryDirectory() as folder,
    ):
        settings = JudgeSettings(
            base_url=server.base_url,
            model="fake-judge",
            api_key_env=None,
            max_concurrency=args.concurrency,
        )
        cache = JsonlFileCache(Path(folder) / "judge-cache.jsonl")
        elapsed, first = asyncio.run(run_once(settings, cache, requests))
        stats = server.stats()
        rate = first.calls / elapsed
        bound = args.concurrency / (args.latency_ms / 1000)
        print(f"first run: {first.calls} calls in {elapsed:.2f} s = {rate:.0f} calls/s")
        print(f"bound:     {args.concurrency} / {args.latency_ms:g} ms = {bound:.0f} calls/s")
        print(f"ratio:     {rate / bound:.3f} (target >= {TARGET_RATIO})")
        print(f"server:    {stats['calls']} requests, at most {stats['max_in_flight']} in flight")

        elapsed, second = asyncio.run(run_once(settings, JsonlFileCache(cache.path), requests))
        new_calls = server.stats()["calls"] - stats["calls"]
        print(
            f"rerun:     {new_calls} new HTTP calls (target 0), "
            f"{second.cache_hits} cache hits in {elapsed:.2f} s"
        )


if __name__ == "__main__":
    main()
