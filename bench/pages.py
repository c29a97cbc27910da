"""Server time of every list and overview page on a large project.

    DATABASE_URL=postgres://... python bench/pages.py [--tasks 100000] [--responses-per-task 10]
                                                      [--repeat 20] [--warmup 2]

Seeds PostgreSQL (default database workbench_bench, created anew) with `tasks` tasks and
`tasks * responses-per-task` responses and what the pages list at that scale (bench/seed_large.py:
labels of eleven annotators on half of the queued pairs, scores, rubrics and criterion grades,
flags, 3,000 jobs and notifications, searches, a promoted grader with 100,000 grades, captured
rollouts, an audit, a synthesis). Then requests each page `repeat` times after `warmup` warm-ups
through Django's whole stack in this process (django.test.Client logged in as the role the
page is for, DEBUG off, connections kept as gunicorn keeps them: CONN_MAX_AGE=60), and prints
per page p50 and p95 server time, the time of its first request (before any cache a page keeps
is warm: the search page's "Which grader wins" caches its committee's rewards) and the SQL
statements one request ran, slowest first; the
ratio of the worst p95 to the 300 ms target (at most 1 passes), the slowest three, and how
long a fixed Python loop takes on this host, to compare runs across hosts.
"""

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import cpu_meter
from bench.database import bench_database_fresh, bench_environment

bench_environment()
os.environ.setdefault("CONN_MAX_AGE", "60")

TARGET_P95_MS = 300.0
SLUG = "bench-pages"


@dataclass(frozen=True)
class Page:
    name: str  # the URL pattern's name
    role: str  # the login it is requested as: admin, expert or reviewer
    path: str


@dataclass(frozen=True)
class Timing:
    page: Page
    status: int
    queries: int
    first_ms: float  # the first request, caches cold
    p50_ms: float
    p95_ms: float


def pages(seeded: Any) -> list[Page]:
    """Every list and overview page, and the grader, search and audit pages that summarise
    many rows, each as the role it is for (the project's home as each role)."""
    from django.urls import reverse

    ids, slug = seeded.ids, seeded.slug
    listed: list[tuple[str, str, list[Any] | None]] = [
        ("project-list", "admin", None),
        ("project-overview", "admin", []),
        ("project-overview", "expert", []),
        ("project-overview", "reviewer", []),
        ("task-list", "admin", []),
        ("import", "admin", []),
        ("splits", "admin", []),
        ("queue", "admin", []),
        ("agreement", "reviewer", []),
        ("agreement", "expert", []),
        ("annotators", "admin", []),
        ("my-labels", "expert", []),
        ("flags", "admin", []),
        ("jobs", "admin", []),
        ("jobs-all", "admin", None),
        ("notifications", "admin", None),
        ("project-settings", "admin", []),
        ("judges", "admin", []),
        ("graders", "admin", []),
        ("program", "admin", [ids["grader"]]),
        ("drift", "reviewer", [ids["grader"]]),
        ("lineage", "reviewer", []),
        ("grading-run", "reviewer", [ids["run"]]),
        ("meta-eval", "reviewer", []),
        ("searches", "admin", []),
        ("search", "admin", [ids["search"]]),
        ("synthesis-runs", "admin", []),
        ("synthesis-run", "admin", [ids["synthesis_run"]]),
        ("synthesis-funnel", "reviewer", []),
        ("synthesis-validation", "admin", [ids["synthesis"]]),
        ("synthesis-sweeps", "admin", []),
        ("synthesis-sweep", "reviewer", [ids["sweep"]]),
        ("rubric-list", "admin", []),
        ("audits", "admin", []),
        ("audit", "reviewer", [ids["audit"]]),
        ("api-tokens", "admin", []),
        ("api-docs", "admin", []),
    ]
    return [
        Page(name, role, reverse(name, args=None if extra is None else [slug, *extra]))
        for name, role, extra in listed
    ]


def page_time(client: Any, page: Page, repeat: int, warmup: int) -> Timing:
    """Request `page` once cold, then warmup + repeat times; the statements counted on the
    last."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    started = time.perf_counter()
    client.get(page.path, secure=True)
    first_ms = (time.perf_counter() - started) * 1000
    for _ in range(warmup):
        client.get(page.path, secure=True)
    times = []
    for _ in range(repeat - 1):
        started = time.perf_counter()
        answer = client.get(page.path, secure=True)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        answer = client.get(page.path, secure=True)
        times.append((time.perf_counter() - started) * 1000)
    cuts = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    return Timing(page, answer.status_code, len(captured), first_ms, cuts[49], cuts[94])


def pages_time(seeded: Any, repeat: int, warmup: int) -> list[Timing]:
    """Every page's timing, slowest p95 first."""
    from django.test import Client

    clients = {}
    for role in ("admin", "expert", "reviewer"):
        clients[role] = Client(HTTP_HOST="localhost")  # in the default ALLOWED_HOSTS
        clients[role].force_login(seeded.users[role])
    timings = [page_time(clients[page.role], page, repeat, warmup) for page in pages(seeded)]
    return sorted(timings, key=lambda timing: -timing.p95_ms)


def report(timings: list[Timing]) -> list[str]:
    """The table, the ratio and the slowest three, as lines."""
    lines = [
        f"{'page':<22} {'as':<9} {'HTTP':>4} {'SQL':>4} {'first ms':>8} {'p50 ms':>8} "
        f"{'p95 ms':>8}  path"
    ]
    for timing in timings:
        page = timing.page
        lines.append(
            f"{page.name:<22} {page.role:<9} {timing.status:>4} {timing.queries:>4} "
            f"{timing.first_ms:>8.1f} {timing.p50_ms:>8.1f} {timing.p95_ms:>8.1f}  {page.path}"
        )
    worst = timings[0].p95_ms
    failed = [timing for timing in timings if timing.status != 200]
    lines.append(
        f"worst p95 {worst:.1f} ms against the {TARGET_P95_MS:.0f} ms target: ratio "
        f"{worst / TARGET_P95_MS:.2f} (at most 1 passes); pages not answering 200: {len(failed)}"
    )
    lines.append(
        "slowest three: "
        + "; ".join(f"{t.page.name} as {t.page.role} {t.p95_ms:.0f} ms" for t in timings[:3])
    )
    return lines


def vacuumed() -> None:
    """VACUUM ANALYZE the seeded database, as autovacuum would soon after a bulk load on a
    production server: without it (this host's server runs with autovacuum off) every
    index-only count of a million rows goes back to the table for each row, since no page is
    marked all-visible, and the pages would be timed on a database nobody runs."""
    from django.db import connection

    with connection.cursor() as cursor:  # autocommit: VACUUM cannot run in a transaction
        cursor.execute("VACUUM ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--responses-per-task", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine

    import django

    django.setup()
    from bench.seed_large import seed_pages_rows, seed_queue_project

    vendor = bench_database_fresh()
    started = time.perf_counter()
    project_id = seed_queue_project(
        slug=SLUG, name="Pages bench", tasks=args.tasks, per_task=args.responses_per_task,
        overlap=2,
    )  # fmt: skip
    seeded = seed_pages_rows(project_id=project_id)
    if vendor == "postgresql":
        vacuumed()
    print(
        f"seeded {args.tasks:,} tasks, {args.tasks * args.responses_per_task:,} responses and "
        f"the pages' rows in {time.perf_counter() - started:.1f} s"
    )
    timings = pages_time(seeded, args.repeat, args.warmup)
    print(f"database: {vendor}; {args.repeat} requests per page after {args.warmup} warm-ups")
    print(f"host: fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")
    print("\n".join(report(timings)))


if __name__ == "__main__":
    main()
