"""What the HTTP reward API adds on top of the judge, under a steady training-job load.

    python bench/reward_api.py [--rate 50] [--seconds 20] [--responses 8] [--latency-ms 50]
                               [--endpoint reward|get_reward] [--tasks 1] [--capture 0]
                               [--dead-judge]

Starts the app as production serves it (gunicorn with the repository's gunicorn.conf.py:
gthread, a process per core; DEBUG off; CONN_MAX_AGE=60), or with --server runserver Django's
development server, on a fresh bench database (bench/database.py: PostgreSQL unless
DATABASE_URL says otherwise) and the fake judge with a fixed latency in its own process, then
sends POST .../reward (or OpenRLHF's .../get_reward, the same group as queries labelled with
the task's id) at a steady `rate` per second, open loop: request i leaves at start +
i / rate whether or not earlier ones have come back, and its latency counts from that moment,
so a server that falls behind is charged for the queue it builds. Each request carries
`responses` responses never seen before (no judge cache hit) to a stored task (the `tasks`
in turn), graded by a scalar grader whose calls run concurrently: one judge round per
request. Overhead = latency - the judge's latency. Prints p50 and p99 overhead, throughput,
the ratio of p99 overhead to the 10 ms target (at most 1 passes), and how long a fixed Python
loop takes on this host, to compare runs across hosts; on Linux also the CPU the server,
PostgreSQL, the fake judge and this client spent per request, and the host's steal share,
which on a shared machine move the percentiles as much as our code does.

`--capture RATE` compares capture off and on in one run, with a Celery worker on Redis storing
the drawn groups as production does: the load alternates, in blocks of
CAPTURE_BLOCK_S seconds, between a token whose capture rate is 0 and one whose rate is RATE
(graders/capture.py: that share of the groups graded is stored as captured rollouts once each
answer is sent), so both arms see the same host, and drift or a noisy neighbour moves both.
It prints p50 and p99 overhead of each arm and the p99 difference against the 1 ms target
(capture at 0.05 within 1 ms of capture off), with a 95% interval from resampling the blocks,
then how many groups were drawn and kept. Give it two minutes or more (--seconds 120): each
arm's p99 rests on its own slowest 1%. With `--aa` neither arm captures (an A/A run): the
difference it prints is what this host's noise alone makes of two identical arms, the yardstick
for the difference a real run prints.

`--dead-judge` points the project's judge at a port that refuses connections: the first
requests open the endpoint's circuit breaker (graders/engine/breaker.py, its default policy
unless JUDGE_BREAKER_FAILURES / JUDGE_BREAKER_COOLDOWN_S say otherwise), and the run measures
how long the API then takes to answer, every reward failed with the breaker's reason; the
target is a p99 latency under 100 ms. It also prints what the first request took.
"""

import argparse
import asyncio
import gc
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import cpu_meter  # noqa: E402
from bench.cpu_meter import CpuMeter  # noqa: E402
from bench.database import bench_database_fresh, bench_environment  # noqa: E402
from bench.judge_throughput import JudgeServerProcess  # noqa: E402

TARGET_P99_OVERHEAD_MS = 10.0
TARGET_DEAD_JUDGE_P99_MS = 100.0
TARGET_CAPTURE_P99_DELTA_MS = 1.0
# --capture: the arms take turns in blocks this long. Long enough that capture work an "on"
# block leaves in the background (a send after each drawn answer, the worker's store: a few
# ms) reaches only the first few requests of the next "off" block; short enough that the
# backlog a host stall builds (runs of 200 to 800 ms on a 2-core host) spills over both arms
# instead of landing in one. In 5 s blocks such runs decided which arm had the higher p99.
CAPTURE_BLOCK_S = 1.0
# In every failed grade of a dead judge's answer once the breaker is open.
UNREACHABLE = b"unreachable"
WARMUP_REQUESTS = 40
CLIENT_CONNECTIONS = 64
PROMPT = "Summarise the liability cap of the deal."
ANSWER = "The liability cap is 10% of the purchase price under clause 4 of the SPA. " * 6


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def dead_judge_url() -> str:
    """A judge URL whose port refuses connections: bound, then closed."""
    return f"http://127.0.0.1:{free_port()}/v1"


def setup(judge_url: str, tasks: int, capture_rate: float, aa: bool = False) -> dict[str, Any]:
    """A project with `tasks` stored tasks, the fake judge as its default endpoint, a scalar
    grader, a token per arm and `capture_rate` (with `aa`, the "on" arm's token says 0 too);
    returns what the load needs to know."""
    from graders.engine.baseline import baseline_program
    from graders.models import JudgeEndpoint
    from graders.services import metagrader_register
    from graders.tokens import token_create
    from labeling.models import Document, Project, Task

    project = Project.objects.create(slug="bench", name="Bench", capture_rate=capture_rate)
    for number in range(1, tasks + 1):
        task = Task.objects.create(project=project, external_id=f"deal-{number}", prompt=PROMPT)
        Document.objects.create(
            task=task,
            external_id="spa",
            title="SPA",
            text=f"Clause 4 of deal {number}: liability is capped. " * 40,
        )
    JudgeEndpoint.objects.create(
        project=project, name="fake", base_url=judge_url, model="fake-judge",
        max_concurrency=64, is_default=True,
    )  # fmt: skip
    grader = metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )
    tokens = {}
    # The "off" arm's token says 0 itself; the "on" arm's inherits the project's rate.
    for arm, rate in (("off", 0.0), ("on", 0.0 if aa else None)):
        _, tokens[arm] = token_create(
            project=project, name=f"bench {arm}", scopes=["reward"], rate_per_minute=100_000,
            capture_rate=rate,
        )  # fmt: skip
    ids = [f"deal-{number}" for number in range(1, tasks + 1)]
    return {"slug": project.slug, "grader": grader.pk, "tasks": ids, "tokens": tokens}


def server_environment(conn_max_age: int, judge_url: str) -> dict[str, str]:
    """What the server and the capture worker run with."""
    return dict(
        os.environ,
        # The fake judge is on loopback: allowed exactly, as `make run` allows its own.
        JUDGE_PRIVATE_HOSTS=urlsplit(judge_url).netloc,
        DEBUG="0",
        SECURE_SSL_REDIRECT="0",
        LOG_LEVEL="WARNING",
        CONN_MAX_AGE=str(conn_max_age),
        # gunicorn.conf.py starts several processes only with a shared cache for rate limits.
        CACHE_URL=os.environ.get("CACHE_URL", "redis://127.0.0.1:6379/14"),
        # Captured groups go to a worker through the production broker.
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/12"),
        CELERY_TASK_DEFAULT_QUEUE="reward-api-bench",
    )


def server_start(
    port: int, log: Path, env: dict[str, str], server_kind: str
) -> subprocess.Popen[bytes]:
    if server_kind == "gunicorn":
        # The production command of the README (gunicorn.conf.py: gthread, a process per core).
        command = [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}"]
    else:
        command = [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
    server = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if server.poll() is not None:
                raise SystemExit("the server exited on start; run it by hand to see why") from None
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start within 60 s")


def capture_worker_start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "-Q",
        env["CELERY_TASK_DEFAULT_QUEUE"], "--pool=solo", "--loglevel=WARNING", "--purge",
        "--without-heartbeat", "--without-mingle", "--without-gossip",
    ]  # fmt: skip
    worker_log = log.with_suffix(".worker.log")
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=worker_log.open("wb"),
    )  # fmt: skip


def capture_drained(quiet_s: float = 3.0, limit_s: float = 120.0) -> None:
    """Wait until the worker has stored what the run sent: no reservoir moved for `quiet_s`."""
    from django.db import connection
    from django.db.models import Sum

    from graders.models import CaptureReservoir

    deadline, last, since = time.monotonic() + limit_s, None, time.monotonic()
    while time.monotonic() < deadline:
        seen = CaptureReservoir.objects.aggregate(seen=Sum("groups_seen"))["seen"]
        if seen != last:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.5)
    connection.close()


def body(target: dict[str, Any], index: int, responses: int, endpoint: str) -> dict[str, Any]:
    contents = [f"Rollout {index}.{n}. {ANSWER}" for n in range(responses)]
    task = target["tasks"][index % len(target["tasks"])]  # request by request, round robin
    if endpoint == "get_reward":
        prompt = f"<|user|>{PROMPT}<|assistant|>"
        return {
            "query": [prompt + content for content in contents],
            "prompts": [prompt] * responses,
            "labels": [task] * responses,
        }
    return {
        "task_id": task,
        "responses": [{"id": f"r{n}", "content": content} for n, content in enumerate(contents)],
    }


async def load(
    url: str,
    target: dict[str, Any],
    *,
    rate: float,
    count: int,
    responses: int,
    first: int,
    endpoint: str,
    block: int = 0,
) -> tuple[list[float], list[int], float, int]:
    """Send `count` requests open loop at `rate` per second; latencies in seconds from each
    request's scheduled start, the status codes, the seconds from first send to last
    answer, and how many answers said the judge is unreachable. With `block`, requests take
    turns in blocks of that many between the "off" and "on" tokens (arm_of), else all go
    with "off"."""
    headers = {arm: {"Authorization": f"Bearer {raw}"} for arm, raw in target["tokens"].items()}
    latencies: list[float] = [0.0] * count
    statuses: list[int] = [0] * count
    unreachable = 0
    # A trainer's HTTP pool is bounded too; past it, requests wait in the client, and the
    # wait counts in their latency (measured from the schedule).
    connector = aiohttp.TCPConnector(limit=CLIENT_CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter() + 0.05

        async def one(index: int, scheduled: float) -> None:
            payload = body(target, first + index, responses, endpoint)
            nonlocal unreachable
            try:
                arm = arm_of(index, block)
                async with session.post(url, json=payload, headers=headers[arm]) as response:
                    answer = await response.read()  # before +=, which would read the
                    unreachable += UNREACHABLE in answer  # count from before the await
                    statuses[index] = response.status
            except (aiohttp.ClientError, TimeoutError):
                statuses[index] = 0  # refused or reset: a failed request, counted below
            latencies[index] = time.perf_counter() - scheduled

        # Each request's coroutine is made when it is due, not all at the start: a client
        # holding the whole run's coroutines (30,000 in ten minutes) paused for hundreds of
        # ms in each full collection of its garbage collector, and every request it was about
        # to send or read meanwhile was charged the pause (PauseMeter reports what is left).
        in_flight: set[asyncio.Task[None]] = set()
        for index in range(count):
            scheduled = start + index / rate
            await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
            task = asyncio.create_task(one(index, scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.gather(*in_flight)
        elapsed = time.perf_counter() - start
    return latencies, statuses, elapsed, unreachable


class PauseMeter:
    """The longest and the total time this process's garbage collector held the interpreter
    while on: a pause of the client delays every request it was about to send or read, and
    the bench would charge that to the server."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.total_s = 0.0
        self.collections = 0
        self._started = 0.0

    def __enter__(self) -> "PauseMeter":
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.longest_s = max(self.longest_s, pause)
        self.total_s += pause
        self.collections += 1


def arm_of(index: int, block: int) -> str:
    """The arm request `index` belongs to: "off" throughout without blocks, else blocks of
    `block` requests in turn, "off" first."""
    return "on" if block and (index // block) % 2 else "off"


def p99_difference_interval(
    on: dict[int, list[float]], off: dict[int, list[float]], draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A 95% interval of p99(on) - p99(off) from a bootstrap over blocks: each draw resamples
    each arm's blocks with replacement, so the host's slow spells, which come in runs and
    land in one block or another, count as the noise they are. An A/A run (both arms with
    capture off) is what tells how wide it is on a host."""
    rng = random.Random(seed)
    on_blocks, off_blocks = list(on.values()), list(off.values())
    if not on_blocks or not off_blocks:
        return (math.nan, math.nan)
    differences = []
    for _ in range(draws):
        drawn_on = [x for b in rng.choices(on_blocks, k=len(on_blocks)) for x in b]
        drawn_off = [x for b in rng.choices(off_blocks, k=len(off_blocks)) for x in b]
        differences.append(percentile(drawn_on, 0.99) - percentile(drawn_off, 0.99))
    return percentile(differences, 0.025), percentile(differences, 0.975)


def capture_summary(rate: float, answered: int) -> str:
    """What capture stored of the `answered` groups sent with the "on" token (warm-up
    included), read once the server is gone."""
    from graders.models import CapturedGroup, CaptureReservoir

    if rate == 0:
        return "off"
    drawn = sum(CaptureReservoir.objects.values_list("groups_seen", flat=True))
    kept = CapturedGroup.objects.count()
    return (
        f"rate {rate:g}: {drawn} of the {answered} groups sent with it drawn "
        f"({drawn / max(answered, 1):.3f}), "
        f"{kept} kept in the reservoirs"
    )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--responses", type=int, default=8, help="responses per request")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the judge's latency")
    parser.add_argument(
        "--conn-max-age", type=int, default=60,
        help="keep database connections this many seconds (CONN_MAX_AGE; 0: one per request)",
    )  # fmt: skip
    parser.add_argument(
        "--server", choices=["gunicorn", "runserver"], default="gunicorn",
        help="gunicorn as the README serves the app, or Django's development server",
    )  # fmt: skip
    parser.add_argument(
        "--tasks", type=int, default=1,
        help="stored tasks the requests go to in turn (each with its own documents)",
    )  # fmt: skip
    parser.add_argument(
        "--endpoint", choices=["reward", "get_reward"], default="reward",
        help="the reward API's own endpoint, or OpenRLHF's remote reward model protocol",
    )  # fmt: skip
    parser.add_argument(
        "--capture", type=float, default=0.0, metavar="RATE",
        help="the project's capture rate: the share of graded groups stored (0: off)",
    )  # fmt: skip
    parser.add_argument(
        "--aa", action="store_true",
        help="with --capture: both arms' tokens capture nothing (an A/A run), which shows how "
        "far apart two arms' p99 fall on this host when nothing differs",
    )  # fmt: skip
    parser.add_argument(
        "--dead-judge", action="store_true",
        help="the judge's port refuses connections: answer times once the breaker is open",
    )  # fmt: skip
    args = parser.parse_args()
    if not 0.0 <= args.capture <= 1.0:
        parser.error("--capture is a share of groups, from 0 to 1")
    if args.aa and not args.capture:
        parser.error("--aa compares the two arms of --capture: give --capture RATE too")
    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine

    bench_environment()
    import django

    django.setup()
    vendor = bench_database_fresh()
    # A dead judge answers nothing, so a request's whole latency is overhead.
    latency_s = 0.0 if args.dead_judge else args.latency_ms / 1000
    with JudgeServerProcess(latency_s) as judge:
        judge_url = dead_judge_url() if args.dead_judge else judge.base_url
        target = setup(judge_url, args.tasks, args.capture, aa=args.aa)
        from django.db import connection

        connection.close()  # the server process has the database to itself
        port = free_port()
        log = Path(tempfile.gettempdir()) / f"reward-api-bench-{port}.log"
        env = server_environment(args.conn_max_age, judge_url)
        server = server_start(port, log, env, args.server)
        # The worker that stores captured groups (graders/capture.py capture_send).
        worker = capture_worker_start(env, log) if args.capture else None
        grader_url = f"http://127.0.0.1:{port}/api/p/{target['slug']}/graders/{target['grader']}"
        url = f"{grader_url}/{args.endpoint}"
        try:
            if args.dead_judge:  # the first request, alone: it pays for opening the breaker
                first_latencies, _, _, _ = asyncio.run(
                    load(url, target, rate=1, count=1, responses=args.responses, first=-1,
                         endpoint=args.endpoint)
                )  # fmt: skip
            warmup = load(
                url,
                target,
                rate=10,
                count=WARMUP_REQUESTS,
                responses=args.responses,
                first=10**6,
                endpoint=args.endpoint,
                block=WARMUP_REQUESTS // 2 if args.capture else 0,
            )
            _, warm, _, _ = asyncio.run(warmup)
            if set(warm) != {200}:
                raise SystemExit(f"warm-up requests failed: statuses {sorted(set(warm))}")
            calls_before = judge.stats()["calls"]
            count = round(args.rate * args.seconds)
            block = round(args.rate * CAPTURE_BLOCK_S) if args.capture else 0
            meter = CpuMeter() if cpu_meter.available() else None
            if meter is not None:
                roots = {"server": server.pid}
                if worker is not None:
                    roots["capture worker"] = worker.pid
                postmaster = cpu_meter.postgres_root() if vendor == "postgresql" else None
                if postmaster is not None:
                    roots["PostgreSQL"] = postmaster
                meter.start(roots | {"fake judge": judge.pid, "bench client": os.getpid()})
            with PauseMeter() as pauses:
                latencies, statuses, elapsed, unreachable = asyncio.run(
                    load(
                        url,
                        target,
                        rate=args.rate,
                        count=count,
                        responses=args.responses,
                        first=0,
                        endpoint=args.endpoint,
                        block=block,
                    )
                )
            usage = meter.stop() if meter is not None else None
            judge_stats = judge.stats()
        finally:
            server.terminate()
            server.wait(timeout=20)
            if worker is not None:
                capture_drained()
                worker.terminate()
                worker.wait(timeout=20)
    ok = [latency for latency, status in zip(latencies, statuses, strict=True) if status == 200]
    failed = len(statuses) - len(ok)
    if not ok:
        raise SystemExit(f"every request failed: statuses {sorted(set(statuses))}; log: {log}")
    overheads_ms = [(latency - latency_s) * 1000 for latency in ok]
    p50, p99 = percentile(overheads_ms, 0.50), percentile(overheads_ms, 0.99)
    arms: dict[str, list[float]] = {}
    blocks: dict[str, dict[int, list[float]]] = {}  # arm -> block number -> overheads
    for index, (latency, status) in enumerate(zip(latencies, statuses, strict=True)):
        if status == 200:
            overhead = (latency - latency_s) * 1000
            arms.setdefault(arm_of(index, block), []).append(overhead)
            if block:
                arm_blocks = blocks.setdefault(arm_of(index, block), {})
                arm_blocks.setdefault(index // block, []).append(overhead)
    judge_calls = judge_stats["calls"] - calls_before
    persistent = f"kept {args.conn_max_age} s" if args.conn_max_age else "one per request"
    served = (
        "gunicorn (gunicorn.conf.py: gthread)"
        if args.server == "gunicorn"
        else "manage.py runserver (threaded)"
    )
    print(f"database:   {vendor}, connections {persistent}; server: {served}, DEBUG off")
    print(f"host:       fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")
    print(
        f"load:       {count} requests to {args.endpoint} x {args.responses} new responses "
        f"on {args.tasks} task{'s' if args.tasks > 1 else ''}, open loop at "
        f"{args.rate:g}/s; judge latency {args.latency_ms:g} ms"
    )
    print(
        f"answered:   {len(ok)} ok, {failed} failed; {judge_calls} judge calls "
        f"(expected {0 if args.dead_judge else len(ok) * args.responses}), "
        f"at most {judge_stats['max_in_flight']} in flight"
    )
    p50_ms, p99_ms, max_ms = (
        value * 1000 for value in (percentile(ok, 0.5), percentile(ok, 0.99), max(ok))
    )
    print(f"latency:    p50 {p50_ms:.1f} ms, p99 {p99_ms:.1f} ms, max {max_ms:.1f} ms")
    print(f"overhead:   p50 {p50:.1f} ms, p99 {p99:.1f} ms (latency minus one judge round)")
    rate = len(ok) / elapsed
    print(f"throughput: {rate:.1f} requests/s = {rate * args.responses:.0f} responses/s "
          f"(offered {args.rate:g}/s)")  # fmt: skip
    print(f"ratio:      p99 overhead / {TARGET_P99_OVERHEAD_MS:g} ms = "
          f"{p99 / TARGET_P99_OVERHEAD_MS:.2f} (target <= 1)")  # fmt: skip
    if block:
        print(
            "capture:    "
            + "; ".join(
                f"{arm} p50 {percentile(values, 0.5):.1f} ms, p99 {percentile(values, 0.99):.1f} "
                f"ms ({len(values)} requests)"
                for arm, values in sorted(arms.items(), key=lambda item: item[0] != "off")
            )
            + f"; blocks of {CAPTURE_BLOCK_S:g} s in turn"
        )
        delta = percentile(arms.get("on", [0.0]), 0.99) - percentile(arms.get("off", [0.0]), 0.99)
        low, high = p99_difference_interval(blocks.get("on", {}), blocks.get("off", {}))
        interval = f"95% interval over resampled blocks {low:+.1f} to {high:+.1f} ms"
        if args.aa:
            print(f"A/A:        p99 on - off = {delta:+.1f} ms with capture off in both arms; "
                  f"{interval}")  # fmt: skip
        else:
            ratio = delta / TARGET_CAPTURE_P99_DELTA_MS
            print(f"ratio:      p99 on - off = {delta:+.1f} ms / {TARGET_CAPTURE_P99_DELTA_MS:g} "
                  f"ms = {ratio:.2f} (target <= 1); {interval}")  # fmt: skip
    sent_on = len(arms.get("on", [])) + (WARMUP_REQUESTS // 2 if block else 0)
    print(f"capture:    {capture_summary(0.0 if args.aa else args.capture, sent_on)}")
    if args.dead_judge:
        print(
            f"dead judge: {unreachable} of {len(ok)} answers failed with the breaker's reason; "
            f"the first request (which opened it) took {first_latencies[0] * 1000:.0f} ms"
        )
        print(f"ratio:      p99 latency / {TARGET_DEAD_JUDGE_P99_MS:g} ms = "
              f"{p99_ms / TARGET_DEAD_JUDGE_P99_MS:.2f} (target < 1)")  # fmt: skip
    print(
        f"client:     its garbage collector paused it {pauses.collections} times, "
        f"{pauses.total_s * 1000:.0f} ms in all, the longest {pauses.longest_s * 1000:.1f} ms"
    )
    if usage is not None:
        spent, steal = usage
        shares = ", ".join(
            f"{name} {seconds / count * 1000:.1f} ms" for name, seconds in spent.items()
        )
        print(f"cpu:        per request: {shares}; host steal {steal:.1%}")
    if failed:
        raise SystemExit(
            f"{failed} requests failed: statuses {sorted(set(statuses))}; server log: {log}"
        )


if __name__ == "__main__":
    main()
