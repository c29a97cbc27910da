"""The bundled demo judge's memory over many calls, and how many of its answers are valid JSON.

    python bench/local_judge_memory.py [--calls 500] [--every 50] [--compare]

Starts the local judge (graders/local_judge.py: llama.cpp serving SmolLM2-135M) and sends
`calls` grading calls, one at a time, each with a prompt never sent before (so nothing repeats
from llama.cpp's prompt cache) and the scalar baseline's output schema in the request, through
the engine's own judge client (the wire form every judge gets). Prints the server's resident
memory (VmRSS from /proc) every `every` calls, the growth from the first reading to the last,
and how many answers failed the schema. `--compare` runs the same calls a second time with
llama.cpp's default host prompt cache (cache_ram_mib 8192) so both lines come from one run;
the product's cap is graders/local_judge.py LOCAL_JUDGE_CACHE_RAM_MIB. Ends with the host-speed
line the other benches print.
"""

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cpu_meter  # noqa: E402
from graders.engine.baseline import baseline_program  # noqa: E402
from graders.engine.judge import ChatRequest, JudgeClient, JudgeSettings  # noqa: E402
from graders.local_judge import (  # noqa: E402
    LOCAL_JUDGE_CACHE_RAM_MIB,
    LOCAL_JUDGE_MODEL,
    local_judge_start,
    local_judge_wait_ready,
)

LLAMA_DEFAULT_CACHE_RAM_MIB = 8192
CLAUSES = (
    "The seller's liability is capped at {n}% of the price.",
    "Warranties survive for {n} months after closing.",
    "Either party may terminate on {n} days' notice.",
    "Interest accrues at {n} basis points over the reference rate.",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def request(index: int) -> ChatRequest:
    step = baseline_program("scalar").steps[0]
    # A different document and answer each call: about 300 prompt tokens none seen before.
    document = " ".join(clause.format(n=index * 7 + k) for k, clause in enumerate(CLAUSES * 4))
    prompt = (
        f"Grade this answer from 0 to 1.\nDocument {index}: {document}\n"
        f"Answer {index}: the cap is {index % 90}% and notice is {index % 30} days."
    )
    return ChatRequest(
        messages=({"role": "user", "content": prompt},),
        schema=step.schema(),
        name=f"memory-{index}",
    )


async def calls_send(base_url: str, calls: int, every: int, pid: int) -> tuple[list[float], int]:
    settings = JudgeSettings(
        base_url=base_url, model=LOCAL_JUDGE_MODEL, api_key_env=None, max_tokens=64,
        max_concurrency=1, timeout_s=120.0, max_retries=1,
    )  # fmt: skip
    readings, invalid = [rss_mib(pid)], 0
    async with JudgeClient(settings) as client:
        for index in range(calls):
            result = await client.complete(request(index))
            invalid += not result.ok
            if (index + 1) % every == 0:
                readings.append(rss_mib(pid))
                print(f"  after {index + 1:4d} calls: {readings[-1]:7.0f} MiB", flush=True)
    return readings, invalid


def run(cache_ram_mib: int, calls: int, every: int) -> tuple[list[float], int, float]:
    port = free_port()
    process = local_judge_start(port, cache_ram_mib=cache_ram_mib)
    try:
        local_judge_wait_ready(f"http://127.0.0.1:{port}", timeout=120, process=process)
        started = time.monotonic()
        readings, invalid = asyncio.run(
            calls_send(f"http://127.0.0.1:{port}/v1", calls, every, process.pid)
        )
        return readings, invalid, time.monotonic() - started
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    host_ms = cpu_meter.host_speed_ms()
    configs = [("product setting", LOCAL_JUDGE_CACHE_RAM_MIB)]
    if args.compare:
        configs.append(("llama.cpp default", LLAMA_DEFAULT_CACHE_RAM_MIB))
    lines = []
    for name, mib in configs:
        print(f"{name} (cache_ram_mib {mib}):", flush=True)
        readings, invalid, seconds = run(mib, args.calls, args.every)
        lines.append(
            f"{name:18s} cache_ram_mib {mib:5d}: RSS {readings[0]:.0f} -> {readings[-1]:.0f} MiB "
            f"(peak {max(readings):.0f}, growth {readings[-1] - readings[0]:+.0f}) over "
            f"{args.calls} calls in {seconds:.0f} s; {invalid} answers failed the schema"
        )
    print()
    for line in lines:
        print(line)
    print(f"host:              fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")


if __name__ == "__main__":
    main()
