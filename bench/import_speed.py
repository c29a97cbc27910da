"""Import speed and memory: a generated file of 10,000 tasks and 100,000 responses into PostgreSQL.

    DATABASE_URL=postgres://... python bench/import_speed.py [--tasks 10000] [--per-task 10]

Prints rows per second and the process's peak resident memory, each next to its target
(>= 20,000 rows/s, < 300 MB), measured in this one run, after the host-speed line (a fixed Python
loop, to compare hosts). On Linux also the CPU seconds this process and its PostgreSQL backend
spent on the first import and the host's steal share: on a shared machine the wall time also
counts the time others' processes held the cores and the disk. The database named in
DATABASE_URL (default: workbench_bench on the local server) is dropped and created anew.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import cpu_meter
from bench.database import bench_database_fresh, bench_environment

bench_environment()

TARGET_ROWS_PER_SECOND = 20_000
TARGET_PEAK_MB = 300


def generate(path: Path, tasks: int, per_task: int) -> int:
    """Write the file line by line (never held in memory); return the number of records."""
    document = (
        "Clause 4.2: the seller indemnifies the buyer for losses up to 10% of the price. " * 12
    )
    with open(path, "w", encoding="utf-8") as out:
        for t in range(tasks):
            task_id = f"task-{t:05}"
            out.write(
                json.dumps(
                    {
                        "type": "task",
                        "id": task_id,
                        "domain": ("legal", "airline", "finance")[t % 3],
                        "prompt": f"Review the agreement for client {t}; name three risks.",
                        "documents": [
                            {"id": "spa", "title": "Share purchase agreement", "text": document}
                        ],
                    }
                )
                + "\n"
            )
            for r in range(per_task):
                out.write(
                    json.dumps(
                        {
                            "type": "response",
                            "id": f"{task_id}/r{r}",
                            "task": task_id,
                            "source": f"model-{r % 4}",
                            "content": f"Response {r} to task {t}. The cap is 10% of the price. "
                            * 6,
                        }
                    )
                    + "\n"
                )
    return tasks * (1 + per_task)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--per-task", type=int, default=10)
    args = parser.parse_args()
    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine

    import django

    django.setup()
    from django.db import connection

    from labeling.imports import jsonl_import
    from labeling.models import Project

    bench_database_fresh()
    project = Project.objects.create(slug="bench", name="Bench")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.jsonl"
        rows = generate(path, args.tasks, args.per_task)
        size_mb = path.stat().st_size / 2**20
        roots = {"bench": os.getpid()}
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                roots["postgres backend"] = cursor.fetchone()[0]
        meter = cpu_meter.CpuMeter() if cpu_meter.available() else None
        if meter is not None:
            meter.start(roots)
        start = time.perf_counter()
        report = jsonl_import(project=project, path=path)
        seconds = time.perf_counter() - start
        usage = meter.stop() if meter is not None else None
        again_start = time.perf_counter()
        jsonl_import(project=project, path=path)
        again_seconds = time.perf_counter() - again_start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    imported = sum(report.counts.values())
    assert imported == rows, (imported, rows)
    rate = rows / seconds
    print(f"host: fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")
    print(f"database: {connection.vendor}; file: {rows} records, {size_mb:.1f} MB")
    print(
        f"import: {seconds:.2f} s, {rate:,.0f} rows/s "
        f"(target >= {TARGET_ROWS_PER_SECOND:,}; ratio {rate / TARGET_ROWS_PER_SECOND:.2f})"
    )
    if usage is not None:
        spent, steal = usage
        shares = ", ".join(f"{name} {cpu:.2f} s" for name, cpu in spent.items())
        cpu = sum(spent.values())
        print(
            f"cpu of the import: {shares}; {rows / cpu:,.0f} rows per CPU second; "
            f"host steal {steal:.1%}"
        )
    again_rate = rows / again_seconds
    print(
        f"re-import of the same file (no changes): {again_seconds:.2f} s, {again_rate:,.0f} rows/s"
    )
    peak_ratio = peak_mb / TARGET_PEAK_MB
    print(f"peak memory: {peak_mb:.0f} MB (target < {TARGET_PEAK_MB}; ratio {peak_ratio:.2f})")


if __name__ == "__main__":
    main()
