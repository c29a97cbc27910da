"""Which pairs to label to pick the best grader: four label strategies on a simulation with known
truth (issue 15, first "Done when" bullet).

    python bench/active_selection.py [--seeds 200] [--tasks 40] [--responses 5]
                                     [--refresh 1] [--epsilon 0.1] [--workers 2]
                                     [--plot var/active_selection.svg]

The simulation, per seed (its parameters are module constants below):
- `tasks` tasks of `responses` responses each, with latent quality q ~ N(0, 1); the pool is every
  pair of responses of one task (10 per task at 5 responses, 400 pairs at the defaults), each
  oriented at random, and the truth is the sign of the quality difference (no true ties).
- K = 8 candidate graders built on two judges, four prompts on each: a grader scores a response
  sigmoid(SCORE_SCALE * (q + loading * shared + judge + own)). `shared` (sd SHARED_SD) is what
  every grader gets wrong alike (a taste for length, say); graders differ in how far they fall
  for it (`loading`, spread evenly over LOADING_RANGE and assigned in a random order: a prompt
  that says to ignore length resists it better), which is what makes one better than another.
  `judge` (sd JUDGE_SD) is shared by the four graders on one judge, `own` (sd OWN_SD) is each
  grader's. Graders vote with the scalar tolerance 0.1 (DESIGN.md section 7), so close scores
  are ties. Their tolerant accuracies on the pool run from about 0.71 to 0.76, the best a point
  ahead of the runner-up on average (about 2 of the 8 within a point of the best), and they share
  most mistakes: every grader votes the same way on about 70% of pairs.
- The truth the bench scores against is each grader's tolerant accuracy on the whole pool (what
  labeling every pair would show); the truly best is the grader with the highest.

Each strategy labels pairs one at a time until the pool is exhausted. After each label the
chosen grader is argmax P(best) under the engine's Beta posteriors (ties to the lower index), and
a seed counts as decided at n labels when the chosen grader's accuracy is within 1 point (0.01)
of the truly best's. Strategies:
- uniform random: pairs in a random order;
- vote entropy: the committee's disagreement on the pair (all K graders);
- margin of the current best: 1 - |s_a - s_b| under the currently chosen grader;
- which grader wins: expected information gain about which grader is best.
The three active strategies draw pairs the way the queue does: values -> selection
probabilities with an `epsilon` share drawn uniformly -> Efraimidis-Spirakis priorities,
rewritten after every `refresh` labels (1: after each label), the highest unlabeled served next.

It prints, per strategy, the labels needed until at least 90% of seeds are decided at that
count and at every larger one, and the ratio to uniform random (target: which grader wins at
most 0.5x), writes the curves (share of seeds decided against labels) as an SVG, and prints the
host speed and the wall time of the seeds. A last line times one information_gain call at the
queue's scale: 100,000 pairs (10,000 tasks x 5 responses) and 30 graders (3 judges x 10
prompts) of the same model, after 300 labels.

Recorded (defaults, 200 seeds): labels to 90% uniform random 117, vote entropy 47 (0.40x),
margin of the current best 90 (0.77x), which grader wins 28 (0.24x); with --refresh 20 vote
entropy 40 and which grader wins 36 (0.31x); with --tasks 80 (800 pairs, 100 seeds) random 135
and which grader wins 33 (0.24x). Information gain at 100,000 pairs x 30 graders: about 1 s.
About 80 s of wall time on 2 idle cores (host loop near 60 ms), 137 s on a busy host (158 ms).
"""

import argparse
import math
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cpu_meter
from graders.engine.active.acquisition import information_gain, margin_value, vote_entropy
from graders.engine.active.posterior import Posterior, p_best, posterior_from_labels
from graders.engine.active.sampling import sampling_priorities, selection_probabilities
from graders.engine.active.votes import discriminating, pair_votes, vote_credit

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

TARGET_RATIO = 0.5
DECIDED_SHARE = 0.9
WITHIN = 0.01
TOL = 0.1
JUDGES, PROMPTS_PER_JUDGE = 2, 4
SHARED_SD = 1.1
LOADING_RANGE = (0.7, 1.0)
JUDGE_SD = 0.25
OWN_SD = 0.1
SCORE_SCALE = 2.5
SCALE_TASKS, SCALE_JUDGES, SCALE_PROMPTS, SCALE_LABELS = 10_000, 3, 10, 300
STRATEGIES = ("uniform random", "vote entropy", "margin of the current best", "which grader wins")
COLORS = ("#6b7280", "#2563eb", "#d97706", "#059669")


@dataclass(frozen=True)
class World:
    """One seed's pool: the graders' scores and votes on each pair, the true orientation, and
    each grader's true tolerant accuracy on the pool."""

    score_a: FloatArray  # (pairs, K)
    score_b: FloatArray
    votes: IntArray  # (pairs, K)
    truth: IntArray  # (pairs,): +1 where a is truly better
    accuracy: FloatArray  # (K,)
    pattern: IntArray  # (pairs,): index of the pair's row in `patterns`
    patterns: IntArray  # distinct vote rows


def world_build(
    seed: int,
    tasks: int,
    responses: int,
    judges: int = JUDGES,
    prompts_per_judge: int = PROMPTS_PER_JUDGE,
) -> World:
    rng = np.random.default_rng([seed, 0])
    graders = judges * prompts_per_judge
    quality = rng.normal(size=(tasks, responses))
    shared = rng.normal(scale=SHARED_SD, size=(tasks, responses, 1))
    judge = np.repeat(
        rng.normal(scale=JUDGE_SD, size=(tasks, responses, judges)), prompts_per_judge, axis=2
    )
    loading = rng.permutation(np.linspace(*LOADING_RANGE, graders))
    own = rng.normal(scale=OWN_SD, size=(tasks, responses, graders))
    latent = quality[..., None] + loading * shared + judge + own
    scores = 1 / (1 + np.exp(-SCORE_SCALE * latent))

    first, second = np.triu_indices(responses, k=1)
    flip = rng.random((tasks, first.size)) < 0.5
    a = np.where(flip, second, first)
    b = np.where(flip, first, second)
    task = np.repeat(np.arange(tasks), first.size)
    a, b = a.reshape(-1), b.reshape(-1)
    score_a, score_b = scores[task, a], scores[task, b]
    votes = pair_votes(score_a, score_b, tol=TOL)
    truth = np.where(quality[task, a] > quality[task, b], 1, -1).astype(np.int64)
    accuracy = vote_credit(votes, truth[:, None]).mean(axis=0)
    patterns, pattern = np.unique(votes, axis=0, return_inverse=True)
    return World(score_a, score_b, votes, truth, accuracy, pattern.reshape(-1), patterns)


def strategy_run(world: World, strategy: str, seed: int, refresh: int, epsilon: float) -> BoolArray:
    """Whether the chosen grader is within WITHIN of the best after 0, 1, ..., pairs labels."""
    rng = np.random.default_rng([seed, 1 + STRATEGIES.index(strategy)])
    pairs, graders = world.votes.shape
    counted = discriminating(world.votes)
    good_enough = world.accuracy.max() - WITHIN - 1e-12
    posterior = Posterior(alpha=np.ones(graders), beta=np.ones(graders))
    chosen = 0  # P(best) is uniform before any label; graders are in a random order
    decided = np.zeros(pairs + 1, dtype=np.bool_)
    decided[0] = world.accuracy[chosen] >= good_enough
    labeled: list[int] = []
    unlabeled = np.ones(pairs, dtype=np.bool_)
    random_order = rng.permutation(pairs)
    static_entropy = vote_entropy(world.votes)
    queue: list[int] = []
    gain: FloatArray | None = None  # per vote pattern, until the posterior moves
    for step in range(pairs):
        if strategy == "uniform random":
            pair = int(random_order[step])
        else:
            if step % refresh == 0 or not queue:
                if strategy == "which grader wins" and gain is None:
                    gain = information_gain(posterior, world.patterns)
                values = _values(world, strategy, chosen, static_entropy, gain)
                queue = _queue_order(values, unlabeled, epsilon, rng, refresh)
            pair = queue.pop(0)
        unlabeled[pair] = False
        labeled.append(pair)
        if counted[pair]:  # a unanimous pair leaves the posterior as it was
            posterior = posterior_from_labels(world.votes[labeled], world.truth[labeled])
            chosen = int(np.argmax(p_best(posterior)))
            gain = None
        decided[step + 1] = world.accuracy[chosen] >= good_enough
    return decided


def _values(
    world: World,
    strategy: str,
    chosen: int,
    static_entropy: FloatArray,
    gain: FloatArray | None,
) -> FloatArray:
    """Each pair's value under an active strategy, now."""
    if strategy == "vote entropy":
        return static_entropy
    if strategy == "margin of the current best":
        return margin_value(world.score_a[:, chosen], world.score_b[:, chosen])
    # Information gain is a function of the vote pattern, computed once per distinct pattern.
    assert gain is not None
    return gain[world.pattern]


def _queue_order(
    values: FloatArray,
    unlabeled: BoolArray,
    epsilon: float,
    rng: np.random.Generator,
    length: int,
) -> list[int]:
    """The first `length` unlabeled pairs in the order the queue would serve them if it wrote
    their priorities now."""
    open_pairs = np.flatnonzero(unlabeled)
    q = selection_probabilities(values[open_pairs], epsilon=epsilon)
    priorities = sampling_priorities(q, rng)
    length = min(length, open_pairs.size)
    top = np.argpartition(-priorities, length - 1)[:length]
    return open_pairs[top[np.argsort(-priorities[top], kind="stable")]].tolist()


def seed_run(job: tuple[int, int, int, int, float]) -> tuple[BoolArray, FloatArray, float]:
    seed, tasks, responses, refresh, epsilon = job
    world = world_build(seed, tasks, responses)
    curves = np.stack(
        [strategy_run(world, strategy, seed, refresh, epsilon) for strategy in STRATEGIES]
    )
    unanimous = 1 - float(discriminating(world.votes).mean())
    return curves, world.accuracy, unanimous


def scale_check() -> tuple[int, int, int, float]:
    """Seconds information_gain takes over SCALE_TASKS x 5 responses (100,000 pairs) and
    SCALE_JUDGES x SCALE_PROMPTS (30) graders of the same model, after SCALE_LABELS labels;
    with the pairs, graders and distinct vote patterns."""
    world = world_build(0, SCALE_TASKS, 5, SCALE_JUDGES, SCALE_PROMPTS)
    first = np.arange(SCALE_LABELS)
    posterior = posterior_from_labels(world.votes[first], world.truth[first])
    started = time.perf_counter()
    information_gain(posterior, world.votes)
    seconds = time.perf_counter() - started
    return world.votes.shape[0], world.votes.shape[1], len(world.patterns), seconds


def labels_needed(share: FloatArray) -> int | None:
    """The smallest n from which at least DECIDED_SHARE of seeds are decided at every count."""
    below = np.flatnonzero(share < DECIDED_SHARE - 1e-12)
    if below.size == 0:
        return 0
    return None if below[-1] + 1 >= share.size else int(below[-1] + 1)


def svg_plot(shares: FloatArray, labels: int, path: Path, title: str) -> None:
    """Share of seeds decided against labels (0 to `labels`), one polyline per strategy, the
    90% line dashed; hand-written SVG."""
    width, height, left, right, top, bottom = 720, 420, 60, 200, 30, 50
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(n: float) -> str:
        return f"{left + plot_w * n / labels:.1f}"

    def y(share: float) -> str:
        return f"{top + plot_h * (1 - share):.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="18" font-size="14">{escape(title)}</text>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(labels)}" y2="{y(0)}" stroke="#111827"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(0)}" y2="{y(1)}" stroke="#111827"/>',
        f'<line x1="{x(0)}" y1="{y(DECIDED_SHARE)}" x2="{x(labels)}" y2="{y(DECIDED_SHARE)}" '
        'stroke="#9ca3af" stroke-dasharray="4 4"/>',
        f'<text x="{x(labels)}" y="{float(y(DECIDED_SHARE)) - 4:.1f}" text-anchor="end" '
        'fill="#6b7280">90% of seeds</text>',
    ]
    for tick in np.linspace(0, 1, 6):
        parts.append(
            f'<text x="{left - 8}" y="{float(y(tick)) + 4:.1f}" text-anchor="end">{tick:.1f}</text>'
        )
    step = max(10, int(round(labels / 8, -1)))
    for tick in range(0, labels + 1, step):
        parts.append(
            f'<text x="{x(tick)}" y="{top + plot_h + 18}" text-anchor="middle">{tick}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle">labels</text>'
    )
    parts.append(
        f'<text x="16" y="{top + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + plot_h / 2})">share of seeds within 1 point</text>'
    )
    for index, (strategy, color) in enumerate(zip(STRATEGIES, COLORS, strict=True)):
        points = " ".join(
            f"{x(n)},{y(share)}" for n, share in enumerate(shares[index, : labels + 1])
        )
        parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        legend_y = top + 20 + 20 * index
        parts.append(
            f'<line x1="{width - right + 15}" y1="{legend_y}" x2="{width - right + 35}" '
            f'y2="{legend_y}" stroke="{color}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{width - right + 40}" y="{legend_y + 4}">{escape(strategy)}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")


def plot_labels(needed: list[int | None], pairs: int) -> int:
    """The x range: half again the most labels any strategy needed, in steps of 50, at most the
    pool (the curves are flat at 1 beyond)."""
    most = max((count for count in needed if count is not None), default=pairs)
    return min(pairs, max(50, 50 * math.ceil(1.5 * most / 50)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--responses", type=int, default=5)
    parser.add_argument("--refresh", type=int, default=1, help="rewrite priorities every N labels")
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=min(2, multiprocessing.cpu_count()))
    parser.add_argument("--plot", type=Path, default=Path("var/active_selection.svg"))
    args = parser.parse_args()
    if args.refresh < 1:
        parser.error("--refresh must be at least 1")

    host_ms = cpu_meter.host_speed_ms()  # before anything else loads the machine
    started = time.perf_counter()
    jobs = [
        (seed, args.tasks, args.responses, args.refresh, args.epsilon) for seed in range(args.seeds)
    ]
    # One BLAS thread per worker, set before the spawned workers load numpy: P(best)'s small
    # matrix products ran 5x slower with two workers' BLAS threads fighting over 2 cores.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        results = pool.map(seed_run, jobs, chunksize=max(1, args.seeds // (4 * args.workers)))
        wall = time.perf_counter() - started
        scale = pool.apply(scale_check)

    curves = np.stack([curve for curve, _, _ in results])  # (seeds, strategies, labels + 1)
    accuracies = np.stack([accuracy for _, accuracy, _ in results])
    unanimous = np.mean([share for _, _, share in results])
    shares = curves.mean(axis=0)
    pairs = shares.shape[1] - 1
    ordered = np.sort(accuracies, axis=1)
    lead = np.mean(ordered[:, -1] - ordered[:, -2])
    near = np.mean((ordered >= ordered[:, -1:] - WITHIN).sum(axis=1))
    print(
        f"{args.seeds} seeds; pool of {pairs} pairs ({args.tasks} tasks x {args.responses} "
        f"responses); {accuracies.shape[1]} graders on {JUDGES} judges"
    )
    print(
        f"grader accuracy on the pool: mean of worst {ordered[:, 0].mean():.3f}, of best "
        f"{ordered[:, -1].mean():.3f}; best minus runner-up {lead:.4f}; "
        f"graders within 1 point of the best {near:.2f}"
    )
    print(f"pairs on which every grader votes the same way: {unanimous:.0%}")
    print(f"refresh every {args.refresh} label(s), epsilon {args.epsilon}")
    print()
    needed = [labels_needed(share) for share in shares]
    random_needed = needed[0]
    print(
        f"{'strategy':<28} {'labels to 90%':>13} {'vs random':>10}   share decided at 25/50/100/200"
    )
    for strategy, count, share in zip(STRATEGIES, needed, shares, strict=True):
        ratio = f"{count / random_needed:.2f}x" if count is not None and random_needed else "n/a"
        checkpoints = "/".join(f"{share[min(n, pairs)]:.2f}" for n in (25, 50, 100, 200))
        print(
            f"{strategy:<28} {count if count is not None else 'never':>13} {ratio:>10}"
            f"   {checkpoints}"
        )
    target_count = needed[STRATEGIES.index("which grader wins")]
    met = (
        target_count is not None
        and random_needed is not None
        and random_needed > 0
        and target_count / random_needed <= TARGET_RATIO
    )
    print(f"target: which grader wins <= {TARGET_RATIO}x random: {'met' if met else 'NOT met'}")
    svg_plot(
        shares,
        plot_labels(needed, pairs),
        args.plot,
        f"Chosen grader within 1 point of the best, {args.seeds} seeds, {pairs} pairs",
    )
    print(f"plot: {args.plot}")
    print(
        f"scale: information gain over {scale[0]:,} pairs x {scale[1]} graders "
        f"({scale[2]:,} distinct vote patterns): {scale[3]:.2f} s"
    )
    print(f"host:      fixed Python loop: {host_ms:.0f} ms (best of 5; lower is faster)")
    print(f"wall time: {wall:.1f} s on {args.workers} worker(s)")


if __name__ == "__main__":
    main()
