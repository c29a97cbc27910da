"""Synthesis generation against a heavy-tailed judge: does a straggler hold the run, and is
anything asked twice?

    python bench/synthesis_pipeline.py [--cells 300] [--concurrency 16] [--retries 2]
                                       [--scale 1.0] [--seed 0]

Runs graders.engine.synthesis.pipeline.cells_run over `cells` cells (a third per dimension)
with JudgeClients over real HTTP to the fake OpenAI server in its own process: a steering
writer, one agent (single-response rollouts) and a cascade of two filter judges, each endpoint
with `concurrency` calls in flight. Latencies are heavy-tailed as the PADME paper measured them
(median 0.75 s, 1% of calls 100 s), times `scale` so that a run fits a few minutes here.

The server's script: the writer's first answer is malformed for 3% of cells (one re-ask), the
agent follows its steering, judge 1 picks the wrong side of 20% of draws and judge 2 of 10%,
and 5% of first asks state no verdict (one re-ask). Every decision is a hash of the cell and
the draw's rollout seed, so the bench works out what the script implies by itself.

It prints:
- wall time against the bound max(longest chain, busiest endpoint's call time / concurrency),
  where a cell's chain is its calls in dependency order (steer, then per draw the slower of the
  two rollouts and the judges in turn) with the server's latency for each: target ratio <= 1.25;
- judge calls per kept pair against the minimum the script implies: target 1.00 (nothing is
  asked twice, no stage waits on a barrier to re-ask).
"""

import argparse
import asyncio
import hashlib
import json
import logging
import multiprocessing
import re
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
from graders.engine.synthesis.pipeline import FILTER_REASKS, cells_run, rollout_seed
from graders.engine.synthesis.plan import CellPlan, cells_plan
from graders.engine.synthesis.prompts import FILTER_REASK
from graders.engine.synthesis.rollout import SingleResponseRoller
from graders.engine.synthesis.types import LEVELS, DimensionSpec, SynthesisTask
from tests.fakes.openai_server import FakeJudgeServer, heavy_tail_latency
from tests.graders.engine.synthesis.helpers import MemoryStore

TARGET_WALL_RATIO = 1.25
DIMENSIONS = ("friendliness", "clarity", "resolution")
JUDGES = ("judge1", "judge2")
JUDGE_ERROR = {"judge1": 0.20, "judge2": 0.10}
NO_VERDICT = 0.05
STEER_MALFORMED = 0.03
CELL = re.compile(r"cell=(\S+)")
QUALITY = re.compile(r"quality=(\d) cell=(\S+) seed=(\d+)")
FENCED = re.compile(r"<<<DATA-(\w+)>>>\n(.*?)\n<<<END-DATA-\1>>>", re.DOTALL)


def cell_of(text: str) -> str:
    """The cell a request is about: rollouts and filter prompts carry "cell=<key>" (the fake
    writer puts it in every steering text); a steering request names its dimension (the first
    fenced value) and its task ("User <task> wants help.")."""
    tagged = CELL.search(text)
    if tagged is not None:
        return tagged.group(1)
    task = re.search(r"User (\S+) wants help\.", text).group(1)  # type: ignore[union-attr]
    return f"{_fenced(text)[0]}.{task}"


def share(*parts: object) -> float:
    """A uniform [0, 1) value from `parts`: the script's dice."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


# The fake server's side ---------------------------------------------------------------------


def respond(body: dict[str, Any]) -> str:
    """The scripted answer to one request, by which stage sent it."""
    model = body["model"]
    text = "\n".join(str(message["content"]) for message in body["messages"])
    if model == "writer":
        return steer_answer(text)
    if model == "agent":
        system = body["messages"][0]["content"]
        [(level, cell)] = re.findall(r"level=(\w+) cell=(\S+)", system)
        return f"quality={LEVELS.index(level)} cell={cell} seed={body['seed']}"
    return filter_answer(model, text)


def steer_answer(text: str) -> str:
    cell = cell_of(text)
    if "could not be used" not in text and share("malformed", cell) < STEER_MALFORMED:
        return '{"reasoning": "cut short", "bad": "'
    steering = {"reasoning": f"levels for cell={cell}"}
    steering |= {level: f"Act at level={level} cell={cell} throughout." for level in LEVELS}
    return json.dumps(steering)


def filter_answer(judge: str, text: str) -> str:
    a, b = (QUALITY.search(data).groups() for data in [*_fenced(text)][-2:])  # type: ignore[union-attr]
    _, cell, seed = a
    if FILTER_REASK not in text and share("silent", judge, cell, seed) < NO_VERDICT:
        return "Both have merit; I cannot choose."
    better = "A" if int(a[0]) > int(b[0]) else "B"
    if share("wrong", judge, cell, seed) < JUDGE_ERROR[judge]:
        better = "B" if better == "A" else "A"
    return json.dumps({"reasoning": "compared on the dimension", "answer": better})


def _fenced(text: str) -> list[str]:
    return [data for _, data in FENCED.findall(text)]


def serve(scale: float, control: Connection) -> None:
    """Child process: serve until told to stop."""
    latency = heavy_tail_latency(scale=scale)
    with FakeJudgeServer(responder=respond, latency=latency, keep_requests=False) as server:
        control.send(server.base_url)
        while control.recv() == "stats":
            control.send({"calls": server.call_count, "max_in_flight": server.max_in_flight})


# What the script implies --------------------------------------------------------------------


def minimum_calls(cells: list[CellPlan], retries: int, seed: int) -> dict[str, int]:
    """The calls the script cannot do without, by stage, and the pairs it keeps."""
    needed = {"writer": 0, "agent": 0, "judges": 0, "kept": 0}
    for cell in cells:
        needed["writer"] += 1 + (share("malformed", cell.key) < STEER_MALFORMED)
        for retry in range(retries + 1):
            draw_seed = rollout_seed(seed, cell, retry)
            needed["agent"] += 2
            vetoed = False
            for judge in JUDGES:
                silent = share("silent", judge, cell.key, draw_seed) < NO_VERDICT
                needed["judges"] += 1 + silent * min(1, FILTER_REASKS)
                if share("wrong", judge, cell.key, draw_seed) < JUDGE_ERROR[judge]:
                    vetoed = True
                    break
            if not vetoed:
                needed["kept"] += 1
                break
    return needed


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
        cell = cell_of("\n".join(message["content"] for message in request.messages))
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


async def run(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    tasks = {
        f"t{i}": SynthesisTask(f"t{i}", "airline", f"Request {i}.", f"User t{i} wants help.")
        for i in range(args.cells // len(DIMENSIONS))
    }
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
        dimensions={
            name: DimensionSpec(name, f"How well the agent does on {name}.") for name in DIMENSIONS
        },
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
    parser.add_argument("--concurrency", type=int, default=16)
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
    needed = minimum_calls(result["cells"], args.retries, args.seed)
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
    print(f"kept:        {kept} of {len(result['cells'])} cells (script implies {needed['kept']})")
    print(
        f"judge calls: {judge_calls / kept:.3f} per kept pair against the script's minimum "
        f"{needed['judges'] / needed['kept']:.3f} = ratio "
        f"{(judge_calls / kept) / (needed['judges'] / needed['kept']):.3f} (target 1.00)"
    )
    implied = needed["writer"] + needed["agent"] + needed["judges"]
    print(
        f"all calls:   {sum(made.values())} made, {implied} "
        f"implied (writer {needed['writer']}, agent {needed['agent']}, judges {needed['judges']})"
    )


if __name__ == "__main__":
    main()
