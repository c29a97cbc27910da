"""Ranking accuracy with its task-bootstrap CI: the engine against a bare numpy kernel.

    python bench/metrics_speed.py [--tasks 10000] [--draws 10000]

Generates 100,000 pairs over 10,000 tasks (5 responses per task with distinct true scores, so
10 pairs each; seeded), then times `ranking_accuracy_ci` of graders.engine.metrics and the
simplest direct numpy implementation of the same resampling (per-task sums, a seeded draws
matrix 500 rows at a time, gather and sum). Prints both times and their ratio (engine /
reference, target <= 2.0), measured in this one run, and checks that both give the same interval.
"""

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graders.engine.metrics import (
    RankingPairs,
    ScoredResponses,
    ranking_accuracy_ci,
    ranking_pairs_from_scores,
)

TARGET_RATIO = 2.0
RESPONSES_PER_TASK = 5
REFERENCE_CHUNK_ROWS = 500
# Best of a few interleaved repeats, so a stray pause on a shared machine does not decide it.
REPEATS = 3


def responses_generate(tasks: int, seed: int) -> ScoredResponses:
    """Responses with distinct true scores 0..4 per task and a noisy grader on a 0.1 grid."""
    rng = np.random.default_rng(seed)
    true = np.tile(np.arange(RESPONSES_PER_TASK, dtype=np.float64), tasks)
    return ScoredResponses(
        task=np.repeat(np.arange(tasks, dtype=np.int64), RESPONSES_PER_TASK),
        true=true,
        pred=np.round(true + rng.normal(0, 1.5, true.size), 1),
    )


def reference_ci(pairs: RankingPairs, draws: int) -> tuple[float, float]:
    """The direct numpy kernel: per-task (right pairs, pairs), then draws x tasks resampling."""
    _, codes = np.unique(pairs.task, return_inverse=True)
    right = np.bincount(codes, weights=pairs.winner_score > pairs.loser_score)
    counts = np.bincount(codes).astype(np.float64)
    tasks = counts.size
    rng = np.random.default_rng(0)
    statistic = np.empty(draws)
    for start in range(0, draws, REFERENCE_CHUNK_ROWS):
        stop = min(start + REFERENCE_CHUNK_ROWS, draws)
        picks = rng.integers(0, tasks, size=(stop - start, tasks))
        statistic[start:stop] = right[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.percentile(statistic, [2.5, 97.5])
    return float(low), float(high)


def timed[T](function: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--draws", type=int, default=10_000)
    args = parser.parse_args()

    build_seconds, pairs = timed(
        lambda: ranking_pairs_from_scores(responses_generate(args.tasks, seed=0))
    )
    print(f"{pairs.task.size:,} pairs over {args.tasks:,} tasks, built in {build_seconds:.2f} s")

    engine_times, reference_times = [], []
    for _ in range(REPEATS):
        seconds, engine = timed(lambda: ranking_accuracy_ci(pairs, draws=args.draws))
        engine_times.append(seconds)
        seconds, reference = timed(lambda: reference_ci(pairs, args.draws))
        reference_times.append(seconds)
    # Grader scores sit on a 0.1 grid, so the engine's 1e-9 slack changes no comparison and both
    # kernels draw the same tasks: the intervals must agree.
    assert np.allclose((engine.low, engine.high), reference), (engine, reference)
    print(f"95% CI [{engine.low:.4f}, {engine.high:.4f}] from {args.draws:,} draws (both kernels)")
    engine_seconds, reference_seconds = min(engine_times), min(reference_times)
    ratio = engine_seconds / reference_seconds
    print(
        f"engine {engine_seconds:.2f} s, reference {reference_seconds:.2f} s, "
        f"ratio {ratio:.2f} (target <= {TARGET_RATIO})"
    )


if __name__ == "__main__":
    main()
