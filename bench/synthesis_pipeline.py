"""Synthesis generation against a heavy-tailed judge: does a straggler hold the run, and is
anything asked twice?

    python bench/synthesis_pipeline.py [--cells 300] [--concurrency 32] [--retries 2]
                                       [--scale 1.0] [--seed 0]

Runs graders.engine.synthesis.pipeline.cells_run over `cells` cells (a third per dimension)
with JudgeClients over real HTTP to the fake OpenAI server in its own process: a steering
writer, one agent (single-response rollouts) and a cascade of two filter judges, each endpoint
with `concurrency` calls in flight. Latencies are heavy-tailed as the PADME paper measured them
(median 0.75 s, 1% of calls 100 s), times `scale` so that a run fits a few minutes here.

The server's script: the writer's first answer is malformed for 3% of cells (one re-ask), the
agent follows its steering, judge 1 picks the wrong side of 20% of draws and judge 2 of 10%,
and 5% of first asks state no verdict (one re-ask). Every decision is a hash of the cell and
the draw's rollout seed (tests/fakes/synthesis_script.py), so the bench works out what the
script implies by itself.

It prints:
- wall time against the bound max(longest chain, busiest endpoint's call time / concurrency),
  where a cell's chain is its calls in dependency order (steer, then per draw the slower of the
  two rollouts and the judges in turn) with the server's latency for each: target ratio <= 1.25;
- judge calls per kept pair against the minimum the script implies: target 1.00 (nothing is
  asked twice, no stage waits on a barrier to re-ask).

The bound is tight when one of its terms dominates. Where the two are about equal (concurrency
16 here: the agent endpoint is busy for about as long as the longest chain), no scheduler that
cannot foresee which call will take 100 s gets near it: a cell whose slow call comes after a
wait in a full queue ends that wait later (ratio about 1.5 at --scale 0.1; 1.20 at 32, 1.08 at 64).
"""

import argparse
import asyncio
import logging
import multiprocessing
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cpu_meter
from graders.engine.judge import ChatRequest, ChatResult, JudgeClient, JudgeSettings
from graders.engine.synthesis.pipeline import cells_run
from graders.engine.synthesis.plan import cells_plan
from graders.engine.synthesis.rollout import SingleResponseRoller
from graders.engine.synthesis.types import DimensionSpec, SynthesisTask
from tests.fakes.openai_server import FakeJudgeServer, heavy_tail_latency
from tests.fakes.synthesis_script import SynthesisScript, tag_of
from tests.graders.engine.synthesis.helpers import MemoryStore

TARGET_WALL_RATIO = 1.25
DIMENSIONS = ("friendliness", "clarity", "resolution")
SCRIPT = SynthesisScript()
JUDGES = tuple(SCRIPT.judge_errors)


def serve(scale: float, control: Connection) -> None:
    """Child process: serve until told to stop."""
    latency = heavy_tail_latency(scale=scale)
    with FakeJudgeServer(responder=SCRIPT.respond, latency=latency, keep_requests=False) as server:
        control.send(server.base_url)
        while control.recv() == "stats":
            control.send({"calls": server.call_count, "max_in_flight": server.max_in_flight})


# The client's side --------------------------------------------------------------------------


@dataclass
class Timed:
    """A JudgeClient that notes each call's server latency under its cell."""

    client: JudgeClient
    latency: Any
    calls: list[tuple[str, str, float]] = field(default_factory=list)  # (cell, kind, seconds)

    async def complete(self, request: ChatRequest) -> ChatResult:
        settings = self.client.settings
        body = {
            "model": settings.model,
            "messages": list(request.messages),
            "seed": settings.seed if request.seed is None else request.seed,
        }
        cell = tag_of("\n".join(message["content"] for message in request.messages))
        kind = f"{settings.model}:{request.seed}" if settings.model == "agent" else settings.model
        self.calls.append((cell, kind, self.latency(body)))
        return await self.client.complete(request)


def longest_chain(endpoints: Mapping[str, Timed]) -> float:
    """The slowest cell's calls end to end with unlimited concurrency: its steering calls, then
    per draw the slower rollout and each judge call in turn."""
    chain: dict[str, float] = defaultdict(float)
    rollouts: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name, timed in endpoints.items():
        for cell, kind, seconds in timed.calls:
            if name == "agent":
                rollouts[(cell, kind)].append(seconds)
            else:
                chain[cell] += seconds
    for (cell, _), pair in rollouts.items():
        chain[cell] += max(pair)
    return max(chain.values())


TASKS = {
    f"t{i}": SynthesisTask(f"t{i}", "airline", f"Request {i}.", f"User t{i} wants help.")
    for i in range(1000)
}
DIMENSION_SPECS = {
    name: DimensionSpec(name, f"How well the agent does on {name}.") for name in DIMENSIONS
}


async def run(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    tasks = {key: TASKS[key] for key in list(TASKS)[: args.cells // len(DIMENSIONS)]}
    cells = cells_plan(tasks=list(tasks), dimensions=DIMENSIONS, agents=["agent"], seed=args.seed)
    latency = heavy_tail_latency(scale=args.scale)
    clients = {
        name: JudgeClient(
            JudgeSettings(
                base_url=base_url,
                model=name,
                api_key_env=None,
                max_concurrency=args.concurrency,
                timeout_s=200 * max(args.scale, 0.01),
                max_retries=0,
            )
        )
        for name in ("writer", "agent", *JUDGES)
    }
    timed = {name: Timed(client, latency) for name, client in clients.items()}
    store = MemoryStore()
    started = time.perf_counter()
    await cells_run(
        cells,
        tasks=tasks,
        dimensions=DIMENSION_SPECS,
        writer=timed["writer"],
        judges=[(name, timed[name]) for name in JUDGES],
        roller=SingleResponseRoller({"agent": timed["agent"]}),
        store=store,
        retries=args.retries,
        seed=args.seed,
    )
    wall = time.perf_counter() - started
    for client in clients.values():
        await client.aclose()
    return {"wall": wall, "store": store, "timed": timed, "cells": cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine
    # The script's malformed and undecided answers are logged as failed calls; they are expected.
    logging.getLogger("graders.engine.judge").setLevel(logging.ERROR)

    context = multiprocessing.get_context("spawn")
    control, child_end = context.Pipe()
    server = context.Process(target=serve, args=(args.scale, child_end), daemon=True)
    server.start()
    try:
        result = asyncio.run(run(args, control.recv()))
        control.send("stats")
        stats = control.recv()
    finally:
        control.send("stop")
        server.join(timeout=10)

    store: MemoryStore = result["store"]
    timed: dict[str, Timed] = result["timed"]
    needed = SCRIPT.implied(
        result["cells"],
        tasks=TASKS,
        dimensions=DIMENSION_SPECS,
        judges=JUDGES,
        retries=args.retries,
        seed=args.seed,
    )
    chain = longest_chain(timed)
    busiest = max(sum(seconds for *_, seconds in t.calls) for t in timed.values())
    capacity = busiest / args.concurrency
    bound = max(chain, capacity)
    made = {name: len(t.calls) for name, t in timed.items()}
    judge_calls = sum(made[name] for name in JUDGES)
    kept = len(store.kept_cells())
    print(f"host:        fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")
    print(
        f"load:        {len(result['cells'])} cells, retries {args.retries}, "
        f"concurrency {args.concurrency} per endpoint, latency scale {args.scale:g} "
        f"(median {0.75 * args.scale:g} s, 1% at {100 * args.scale:g} s)"
    )
    print(
        f"calls:       writer {made['writer']}, agent {made['agent']}, "
        f"judges {judge_calls}; server saw {stats['calls']}, at most "
        f"{stats['max_in_flight']} in flight; {len(store.failures)} cells failed"
    )
    print(
        f"wall:        {result['wall']:.2f} s against bound {bound:.2f} s = max(longest chain "
        f"{chain:.2f} s, busiest endpoint {busiest:.1f} s / {args.concurrency} = {capacity:.2f} s)"
    )
    print(f"ratio:       {result['wall'] / bound:.3f} (target <= {TARGET_WALL_RATIO})")
    print(f"kept:        {kept} of {len(result['cells'])} cells (script implies {needed.kept})")
    if store.kept_at() != {key: r for key, r in needed.kept_at.items() if r is not None}:
        raise SystemExit("the kept draws differ from the script's")
    print(
        f"judge calls: {judge_calls / kept:.3f} per kept pair against the script's minimum "
        f"{needed.judges / needed.kept:.3f} = ratio "
        f"{(judge_calls / kept) / (needed.judges / needed.kept):.3f} (target 1.00)"
    )
    implied = needed.writer + needed.agent + needed.judges
    print(
        f"all calls:   {sum(made.values())} made, {implied} "
        f"implied (writer {needed.writer}, agent {needed.agent}, judges {needed.judges})"
    )


if __name__ == "__main__":
    main()
