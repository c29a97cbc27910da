"""What a metagrader search costs in judge calls, and what its rerun costs.

    python bench/search_cost.py [--tasks 12] [--responses 6] [--n 8] [--iterations 3] [--k 3]

On a fresh bench database (PostgreSQL by default, see bench/database.py) it imports a project
with `tasks` tasks in D_selection and half as many in D_eval, `responses` responses each with
true-grader scores, and runs one evolutionary search (round 0: the baseline and n proposals;
then `iterations` rounds of k) with the structured proposer against the fake judge over real
HTTP. It prints the judge calls per candidate evaluated, split into HTTP calls and cache hits
(programs that share a step with an earlier one share its answers), then runs the same search
again and prints the cache hit share of the rerun (target 1.0: a rerun makes no HTTP call).
"""

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.database import bench_database_fresh, bench_environment

QUALITIES = (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def records(tasks: int, responses: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for t in range(tasks + tasks // 2):
        task = f"task-{t}"
        split = "selection" if t < tasks else "eval"
        document = {"id": "doc", "title": "Contract", "text": f"Clause {t}."}
        rows.append({"type": "task", "id": task, "split": split, "domain": f"d{t % 3}",
                     "prompt": f"Summarise the obligations in contract {t}.",
                     "documents": [document]})  # fmt: skip
        for r in range(responses):
            quality = QUALITIES[r % len(QUALITIES)]
            rows.append({"type": "response", "id": f"{task}/{r}", "task": task,
                         "content": f"Answer {r} of quality q{quality}"})  # fmt: skip
            rows.append({"type": "score", "response": f"{task}/{r}", "value": quality})
    return rows


def responder(body: dict[str, Any]) -> str:
    """Scores each response by the quality its text carries, nudged by which step asks, so
    programs differ in accuracy; fills every other field the schema asks for."""
    text = "\n".join(str(m["content"]) for m in body["messages"])
    schema = body["response_format"]["json_schema"]["schema"]
    marker = text.rfind(" of quality q")
    quality = float(text[marker + 13 :].split()[0].rstrip(".,")) if marker >= 0 else 0.5
    score = round(min(1.0, max(0.0, quality + (len(text) % 7 - 3) * 0.05)) * 20) / 20
    values: dict[str, Any] = {}
    for name, spec in schema.get("properties", {}).items():
        kind = spec.get("type")
        values[name] = (
            score
            if kind in ("number", "integer")
            else ["a requirement"]
            if kind == "array"
            else True
            if kind == "boolean"
            else "noted"
        )
    return json.dumps(values)


def search_once(project: Any, endpoint: Any, args: argparse.Namespace) -> dict[str, float]:
    from graders.models import Candidate, GradingRun
    from graders.search import search_run_execute, search_start

    search = search_start(
        project=project,
        kind="scalar",
        mode="evolutionary",
        endpoint=endpoint,
        n=args.n,
        iterations=args.iterations,
        k=args.k,
        seed=args.seed,
    )
    started = time.perf_counter()
    outcome = search_run_execute(search_id=search.pk)
    elapsed = time.perf_counter() - started
    assert outcome["status"] == "succeeded", outcome
    counts = {"calls": 0, "hits": 0, "eval_calls": 0, "eval_hits": 0}
    for run in GradingRun.objects.filter(search=search):
        prefix = "eval_" if run.split == "eval" else ""
        counts[f"{prefix}calls"] += run.usage.get("calls", 0)
        counts[f"{prefix}hits"] += run.usage.get("cache_hits", 0)
    return counts | {
        "candidates": Candidate.objects.filter(search=search, status="graded").count(),
        "eval_runs": GradingRun.objects.filter(search=search, split="eval").count(),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--responses", type=int, default=6)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    bench_environment()
    import django

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per judge call otherwise

    django.setup()
    vendor = bench_database_fresh()
    from graders.models import JudgeEndpoint
    from labeling.imports import jsonl_import
    from labeling.models import Project
    from tests.fakes.openai_server import FakeJudgeServer

    project = Project.objects.create(slug="bench-search", name="Search cost bench")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in records(args.tasks, args.responses)))
        jsonl_import(project=project, path=path)
    with FakeJudgeServer(responder=responder) as server:
        endpoint = JudgeEndpoint.objects.create(
            project=project, name="fake", base_url=server.base_url, model="fake", max_concurrency=16
        )
        first = search_once(project, endpoint, args)
        http_first = server.call_count
        again = search_once(project, endpoint, args)
        http_again = server.call_count - http_first

    requests = first["calls"] + first["hits"]
    rerun_requests = sum(again[key] for key in ("calls", "hits", "eval_calls", "eval_hits"))
    share = (again["hits"] + again["eval_hits"]) / max(1, rerun_requests)
    print(f"database: {vendor}; {args.tasks} selection tasks, {args.tasks // 2} eval tasks, "
          f"{args.responses} responses each")  # fmt: skip
    print(f"search: {first['candidates']:.0f} candidates evaluated in {first['seconds']:.1f} s")
    print(f"judge requests per candidate evaluated on D_selection: "
          f"{requests / first['candidates']:.1f} "
          f"({first['calls'] / first['candidates']:.1f} HTTP calls + "
          f"{first['hits'] / first['candidates']:.1f} cache hits shared with earlier candidates; "
          f"{first['calls']:.0f} HTTP calls in all, server saw {http_first})")  # fmt: skip
    print(f"D_eval: {first['eval_runs']:.0f} best-so-far runs, {first['eval_calls']:.0f} HTTP "
          f"calls + {first['eval_hits']:.0f} cache hits")  # fmt: skip
    print(f"rerun: {again['calls'] + again['eval_calls']:.0f} HTTP calls (server saw "
          f"{http_again}), {again['hits'] + again['eval_hits']:.0f} cache hits, "
          f"{again['seconds']:.1f} s")  # fmt: skip
    print(f"rerun cache hit share: {share:.3f} (target 1.0; ratio {share / 1.0:.3f})")


if __name__ == "__main__":
    main()
