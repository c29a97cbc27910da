"""Queue claims under concurrency: 16 annotators claiming and labeling for 60 seconds.

    DATABASE_URL=postgres://... python bench/queue_claim.py [--annotators 16] [--seconds 60]

Seeds PostgreSQL (default database workbench_bench, created anew) with 100,000 tasks,
1,000,000 responses and one queued pair per task (overlap 1), then runs each annotator in its
own process: claim the next pair, submit a label, repeat. The paced phase (the target) gives
each annotator a think time of 1 s per pair, faster than any person labels; the stress phase
then runs with no pause at all, where 16 processes and PostgreSQL share 2 cores and latency is
CPU queueing. Prints p50 / p95 claim latency per phase against the 50 ms target and the number
of duplicate claims (a pair served to two annotators, or a slot held by two), which must be 0.
The seed rows are written with set-based SQL (bench/seed_large.py) because 1.1 million ORM
inserts would dominate the run; the claims go through the product's own code.
"""

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.database import bench_database_fresh, bench_environment
from bench.seed_large import seed_queue_project

bench_environment()

TARGET_P95_MS = 50.0
SLUG = "bench-queue"


def annotate(
    name: str, seconds: float, think: float, results: "multiprocessing.Queue[object]"
) -> None:
    import django

    django.setup()
    from labeling.models import Annotator, Project
    from labeling.queue import LabelInput, label_submit, pair_claim_next

    project = Project.objects.get(slug=SLUG)
    annotator = Annotator.objects.create(project=project, name=name)
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        assignment = pair_claim_next(project=project, annotator=annotator)
        latencies.append((time.perf_counter() - start) * 1000)
        if assignment is None:
            break
        if think:
            time.sleep(think)
        label_submit(assignment=assignment, label=LabelInput("left", 1, think))
    results.put(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--responses-per-task", type=int, default=10)
    parser.add_argument("--annotators", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--think-ms",
        type=float,
        default=1000.0,
        help="an annotator's pause between claim and label",
    )
    parser.add_argument(
        "--no-stress", dest="stress", action="store_false", help="skip the no-pause stress phase"
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    from labeling.models import QueueAssignment

    bench_database_fresh()
    started = time.perf_counter()
    project_id = seed_queue_project(
        slug=SLUG, name="Queue bench", tasks=args.tasks, per_task=args.responses_per_task,
        overlap=1,
    )  # fmt: skip
    print(
        f"seeded {args.tasks:,} tasks, {args.tasks * args.responses_per_task:,} responses, "
        f"{args.tasks:,} queued pairs in {time.perf_counter() - started:.1f} s"
    )
    connection.close()

    phases = [("paced", args.think_ms)] + ([("stress", 0.0)] if args.stress else [])
    for phase, think_ms in phases:
        latencies, labels = run_phase(phase, args.annotators, args.seconds, think_ms, project_id)
        quantiles = statistics.quantiles(latencies, n=100)
        p50, p95 = quantiles[49], quantiles[94]
        target = (
            f"target p95 < {TARGET_P95_MS:.0f} ms; ratio {p95 / TARGET_P95_MS:.2f}"
            if phase == "paced"
            else "no target: 16 processes saturate 2 cores"
        )
        print(
            f"{phase}: {args.annotators} annotators for {args.seconds:.0f} s, think time "
            f"{think_ms:.0f} ms: {len(latencies):,} claims, {labels:,} labels; "
            f"claim latency p50 {p50:.1f} ms, p95 {p95:.1f} ms ({target})"
        )
    duplicates = [
        QueueAssignment.objects.filter(pair__project_id=project_id)
        .values(field)
        .annotate(n=django.db.models.Count("pk"))
        .filter(n__gt=1)
        .count()
        for field in ("pair_id", "slot_id")
    ]
    print(
        f"duplicate claims: {sum(duplicates)} ({duplicates[0]} pairs served twice, "
        f"{duplicates[1]} slots held twice; target 0)"
    )


def run_phase(
    phase: str, annotators: int, seconds: float, think_ms: float, project_id: int
) -> tuple[list[float], int]:
    """Run the annotator processes of one phase; return claim latencies and labels made."""
    from labeling.models import QueueSlot

    before = QueueSlot.objects.filter(project_id=project_id, done_at__isnull=False).count()
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[object] = context.Queue()
    workers = [
        context.Process(target=annotate, args=(f"{phase}-{i}", seconds, think_ms / 1000, results))
        for i in range(annotators)
    ]
    for worker in workers:
        worker.start()
    latencies: list[float] = []
    for _ in workers:
        latencies.extend(results.get())  # type: ignore[arg-type]
    for worker in workers:
        worker.join()
    done = QueueSlot.objects.filter(project_id=project_id, done_at__isnull=False).count()
    return latencies, done - before


if __name__ == "__main__":
    main()
