"""Grader metrics of DESIGN.md section 7, vectorized with numpy.

Ranking metrics work on P, the pairs (i, j) of one task where response i is truly better than
response j, each carrying the grader scores s_i (winner) and s_j (loser):

- From scores (`ScoredResponses`): every pair of one task with t_i > t_j; true ties are not in P.
- From expert preferences: the labeled non-tie pairs, oriented winner first; build `RankingPairs`
  directly, without `advantage_sign_lost` (there are no true scores to take advantages of).

A missing grader score (NaN, a failed grade) never helps the grader: a pair with a missing score
counts as misordered (it earns 0 in both accuracies) and as harmful in harm-aware accuracy, and a
task with a missing score contributes a within-task Spearman of 0.

Scores come from decimal grids and from means of steps, where 0.8 - 0.7 = 0.10000000000000009 and
a mean can land one ulp off a score it equals. Every comparison here therefore treats two values
closer than FLOAT_SLACK (1e-9) as equal; no meaningful score difference is that small.

Confidence intervals bootstrap over tasks: resample the tasks with replacement (10,000 draws,
numpy `default_rng(0)`) and take the 2.5 and 97.5 percentiles of the statistic over the draws.
"""

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FLOAT_SLACK = 1e-9
BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0
# Indices drawn per bootstrap chunk: 4M int64 indices and two gathered float arrays stay near
# 100 MB whatever the number of tasks (one 10,000 x 10,000 matrix would be 800 MB).
_BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class ScoredResponses:
    """Responses of many tasks, one entry per response.

    `task` is any integer task id, `true` the true score t (required), `pred` the grader score s,
    NaN where the grade failed.
    """

    task: IntArray
    true: FloatArray
    pred: FloatArray

    def __post_init__(self) -> None:
        _require_same_length(task=self.task, true=self.true, pred=self.pred)
        if np.isnan(self.true).any():
            raise ValueError("every response needs a true score; drop unscored responses first")


@dataclass(frozen=True)
class RankingPairs:
    """The pair set P, winner first: task id and grader scores s_i, s_j of each pair.

    `advantage_sign_lost` is True where the grader's group-relative advantages lose a sign the true
    ones have: (A_t(i) > 0 and A_s(i) <= 0) or (A_t(j) < 0 and A_s(j) >= 0), or a score is missing.
    It is None for pairs from preferences, which have no true scores.
    """

    task: IntArray
    winner_score: FloatArray
    loser_score: FloatArray
    advantage_sign_lost: BoolArray | None = None

    def __post_init__(self) -> None:
        _require_same_length(
            task=self.task, winner_score=self.winner_score, loser_score=self.loser_score
        )
        if self.advantage_sign_lost is not None:
            _require_same_length(task=self.task, advantage_sign_lost=self.advantage_sign_lost)


@dataclass(frozen=True)
class ConfidenceInterval:
    """The 2.5 and 97.5 percentiles of a task-bootstrap distribution."""

    low: float
    high: float


def ranking_pairs_from_scores(responses: ScoredResponses) -> RankingPairs:
    """Build P from true scores: all pairs (i, j) of the same task with t_i > t_j.

    Enumerates every ordered pair within each task, so memory grows with the sum over tasks of
    (responses per task) squared: fine for groups of tens or hundreds of responses.
    """
    codes, sizes = _task_codes(responses.task)
    order = np.argsort(codes, kind="stable")
    sizes_in_order = sizes[codes[order]]
    # Pair each response (in task order) with every response of its own task, itself included.
    first = np.repeat(order, sizes_in_order)
    task_start = np.cumsum(sizes) - sizes
    offset = np.arange(first.size) - np.repeat(
        np.cumsum(sizes_in_order) - sizes_in_order, sizes_in_order
    )
    second = order[np.repeat(task_start[codes[order]], sizes_in_order) + offset]
    keep = responses.true[first] - responses.true[second] > FLOAT_SLACK
    winner, loser = first[keep], second[keep]

    true_advantage = _group_advantages(codes, responses.true, sizes.size)
    pred_advantage = _group_advantages(codes, responses.pred, sizes.size)
    winner_discouraged = (true_advantage[winner] > FLOAT_SLACK) & (
        pred_advantage[winner] <= FLOAT_SLACK
    )
    loser_reinforced = (true_advantage[loser] < -FLOAT_SLACK) & (
        pred_advantage[loser] >= -FLOAT_SLACK
    )
    # A failed grade never helps the grader, so a pair with a missing score is harmful too.
    missing = np.isnan(responses.pred[winner]) | np.isnan(responses.pred[loser])
    return RankingPairs(
        task=responses.task[winner],
        winner_score=responses.pred[winner],
        loser_score=responses.pred[loser],
        advantage_sign_lost=missing | winner_discouraged | loser_reinforced,
    )


def ranking_accuracy(pairs: RankingPairs) -> float:
    """Reported ranking accuracy: mean over P of [s_i > s_j]; a predicted tie earns 0."""
    return _pair_mean(_reported_credit(pairs))


def ranking_accuracy_ci(
    pairs: RankingPairs, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> ConfidenceInterval:
    """Task-bootstrap CI of `ranking_accuracy`, pair-weighted like the point estimate."""
    return _pair_bootstrap(pairs, _reported_credit(pairs), draws=draws, seed=seed)


def tolerant_ranking_accuracy(pairs: RankingPairs, *, tol: float) -> float:
    """Tolerant ranking accuracy, used to select in search: mean over P of a credit that is
    1 if s_i - s_j > tol, 0.5 if |s_i - s_j| <= tol, else 0.

    Pass tol = 0.1 for scalar graders and tol = 0 for pairwise win rates.
    """
    return _pair_mean(_tolerant_credit(pairs, tol))


def tolerant_ranking_accuracy_ci(
    pairs: RankingPairs,
    *,
    tol: float,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> ConfidenceInterval:
    """Task-bootstrap CI of `tolerant_ranking_accuracy`, pair-weighted like the point estimate."""
    return _pair_bootstrap(pairs, _tolerant_credit(pairs, tol), draws=draws, seed=seed)


def tolerant_credit_by_task(
    pairs: RankingPairs, *, tol: float
) -> tuple[IntArray, FloatArray, IntArray]:
    """Per task with pairs: its id, its tolerant credit summed over its pairs and its pair
    count, tasks in increasing id order. Summed over tasks, credit / count is
    `tolerant_ranking_accuracy`; a subset of tasks gives that subset's accuracy."""
    tasks, codes, counts = np.unique(pairs.task, return_inverse=True, return_counts=True)
    earned = np.bincount(codes, weights=_tolerant_credit(pairs, tol), minlength=tasks.size)
    return tasks.astype(np.int64), earned, counts.astype(np.int64)


def harm_aware_accuracy(pairs: RankingPairs) -> float:
    """Harm-aware ranking accuracy: 1 - harmful / |P|.

    A misordered pair (s_i <= s_j) is harmful when it discourages the better response
    (A_t(i) > 0 and A_s(i) <= 0) or reinforces the worse one (A_t(j) < 0 and A_s(j) >= 0), with
    group-relative advantages A(k) = score_k - mean of the task's scores (A_s over the task's
    emitted scores). Needs true scores: raises ValueError for pairs from preferences.
    """
    return _pair_mean(_harmless_credit(pairs))


def harm_aware_accuracy_ci(
    pairs: RankingPairs, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> ConfidenceInterval:
    """Task-bootstrap CI of `harm_aware_accuracy`, pair-weighted like the point estimate."""
    return _pair_bootstrap(pairs, _harmless_credit(pairs), draws=draws, seed=seed)


def within_task_spearman(responses: ScoredResponses) -> float:
    """Mean over tasks whose true scores are not all equal of Spearman's rho between true and
    grader scores, with average ranks for ties.

    A task whose grader scores are all equal, or that has a missing grader score, contributes 0.
    Single-response tasks are excluded (their true scores are trivially all equal).
    """
    rho = _within_task_rho(responses)
    return float(rho.mean())


def within_task_spearman_ci(
    responses: ScoredResponses, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> ConfidenceInterval:
    """Task-bootstrap CI of `within_task_spearman`: the mean rho of the drawn eligible tasks."""
    rho = _within_task_rho(responses)
    return task_bootstrap_ci(rho, np.ones_like(rho), draws=draws, seed=seed)


def task_bootstrap_ci(
    earned: FloatArray,
    count: FloatArray,
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> ConfidenceInterval:
    """Bootstrap CI of sum(earned) / sum(count) over tasks, one entry per task.

    Each draw resamples the tasks with replacement and computes the ratio over the drawn tasks,
    so a pair-weighted metric passes per-task (credit sum, pair count) and a task mean passes
    (per-task value, 1). Every count must be positive.
    """
    _require_same_length(earned=earned, count=count)
    return task_bootstrap_cis(earned[:, np.newaxis], count, draws=draws, seed=seed)[0]


def task_bootstrap_cis(
    earned: FloatArray,
    count: FloatArray,
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> list[ConfidenceInterval]:
    """task_bootstrap_ci of each column of `earned` (tasks x metrics) over the same `count`:
    the CIs it gives column by column, from one set of resampled tasks instead of one each."""
    if earned.ndim != 2 or earned.shape[0] != count.size:
        raise ValueError(f"earned must be tasks x metrics for {count.size} tasks")
    if count.size == 0 or draws < 1:
        raise ValueError("the bootstrap needs at least one task and one draw")
    if not (count > 0).all():
        raise ValueError("every task in a bootstrap needs a positive count")
    tasks = count.size
    rng = np.random.default_rng(seed)
    statistic = np.empty((earned.shape[1], draws))
    rows = max(1, _BOOTSTRAP_CHUNK_ELEMENTS // tasks)
    for start in range(0, draws, rows):
        stop = min(start + rows, draws)
        picks = rng.integers(0, tasks, size=(stop - start, tasks))
        drawn = count[picks].sum(axis=1)
        for column in range(earned.shape[1]):
            statistic[column, start:stop] = earned[:, column][picks].sum(axis=1) / drawn
    return [
        ConfidenceInterval(low=float(low), high=float(high))
        for low, high in np.percentile(statistic, [2.5, 97.5], axis=1).T
    ]


class Stability(StrEnum):
    """How a pair's verdict behaves across the runs in which both responses were scored."""

    ALWAYS_TIED = "always_tied"  # a tie in every run
    WOBBLED = "wobbled"  # a tie in some runs, a pick in others
    FLIPPED = "flipped"  # no tie, but both sides picked in different runs
    STABLE = "stable"  # the same side in every run
    FAILED = "failed"  # no run scored both responses


@dataclass(frozen=True)
class EvaluatorRuns:
    """Pointwise scores of labeled pairs over repeated runs of one evaluator (PADME).

    `pairs` holds (preferred, other) response ids. `scores` has one mapping per run from every
    response id of the pairs to its score, or None where the call failed.
    """

    pairs: Sequence[tuple[Hashable, Hashable]]
    scores: Sequence[Mapping[Hashable, float | None]]


@dataclass(frozen=True)
class EvaluatorReport:
    """PADME evaluator metrics; rates are over all pair-runs (pairs x runs)."""

    pairs: int
    runs: int
    accuracy: float
    accuracy_when_committed: float | None
    tie_rate: float
    leniency: float | None
    score_sd: float | None
    distinct_scores: int
    failed_runs: int
    always_tied: int
    wobbled: int
    flipped: int
    stable: int
    failed_pairs: int
    pair_stability: tuple[Stability, ...]


def evaluator_report(runs: EvaluatorRuns) -> EvaluatorReport:
    """PADME evaluator metrics over runs.

    - accuracy: runs where the preferred response scores strictly higher / all pair-runs; ties and
      failed calls count as wrong.
    - accuracy_when_committed: the same over the pair-runs where the evaluator picked a side
      (both scores exist and differ): ties and failed calls are left out, not counted wrong;
      None when it never picked one. Tells an evaluator that misjudges from one that only
      scores too coarsely to separate the pair.
    - tie_rate: runs where both scores exist and are equal / all pair-runs (failed runs stay in
      the denominator).
    - leniency: mean of all emitted scores, each response counted once per run; None if none.
    - score_sd: per response, the sample SD (ddof=1) of its emitted scores across runs, averaged
      over responses; a response with fewer than 2 emitted scores has no SD and is skipped; None
      if no response has 2.
    - distinct_scores: number of distinct values emitted.
    - failed_runs: pair-runs where either score is missing.
    - stability of each pair (`pair_stability`, in input order, and a count per class): judged
      over the runs that scored both responses, failed runs ignored; a pair with no such run is
      FAILED (counted in `failed_pairs`), a pair with one such run is ALWAYS_TIED or STABLE.
    """
    if not runs.pairs or not runs.scores:
        raise ValueError("evaluator metrics need at least one pair and one run")
    score_table = _score_table(runs)
    preferred, other = score_table.pair_scores(runs.pairs)
    pair_runs = preferred.size
    picked_preferred = preferred - other > FLOAT_SLACK
    picked_other = other - preferred > FLOAT_SLACK
    failed = np.isnan(preferred) | np.isnan(other)
    tied = ~failed & ~picked_preferred & ~picked_other
    committed = int(picked_preferred.sum() + picked_other.sum())

    emitted = score_table.values[~np.isnan(score_table.values)]
    emitted_per_response = (~np.isnan(score_table.values)).sum(axis=1)
    with_spread = score_table.values[emitted_per_response >= 2]
    pair_stability = tuple(
        _stability(ties, preferred_picks, other_picks)
        for ties, preferred_picks, other_picks in zip(
            tied.sum(axis=1), picked_preferred.sum(axis=1), picked_other.sum(axis=1), strict=True
        )
    )
    return EvaluatorReport(
        pairs=len(runs.pairs),
        runs=len(runs.scores),
        accuracy=float(picked_preferred.sum() / pair_runs),
        accuracy_when_committed=float(picked_preferred.sum() / committed) if committed else None,
        tie_rate=float(tied.sum() / pair_runs),
        leniency=float(emitted.mean()) if emitted.size else None,
        score_sd=float(np.nanstd(with_spread, axis=1, ddof=1).mean()) if with_spread.size else None,
        distinct_scores=_distinct_count(emitted),
        failed_runs=int(failed.sum()),
        always_tied=pair_stability.count(Stability.ALWAYS_TIED),
        wobbled=pair_stability.count(Stability.WOBBLED),
        flipped=pair_stability.count(Stability.FLIPPED),
        stable=pair_stability.count(Stability.STABLE),
        failed_pairs=pair_stability.count(Stability.FAILED),
        pair_stability=pair_stability,
    )


@dataclass(frozen=True)
class _ScoreTable:
    """Scores as a (responses x runs) array, NaN where the call failed."""

    row_of: dict[Hashable, int]
    values: FloatArray

    def pair_scores(
        self, pairs: Sequence[tuple[Hashable, Hashable]]
    ) -> tuple[FloatArray, FloatArray]:
        """(pairs x runs) scores of the preferred and of the other responses."""
        preferred_rows = [self.row_of[preferred] for preferred, _ in pairs]
        other_rows = [self.row_of[other] for _, other in pairs]
        return self.values[preferred_rows], self.values[other_rows]


def _score_table(runs: EvaluatorRuns) -> _ScoreTable:
    # A response in several pairs is one response: its score per run is counted once in
    # leniency, SD and distinct scores.
    row_of = {response: row for row, response in enumerate(dict.fromkeys(_flatten(runs.pairs)))}
    values = np.full((len(row_of), len(runs.scores)), np.nan)
    for run, scores in enumerate(runs.scores):
        absent = sorted(map(str, row_of.keys() - scores.keys()))
        if absent:
            raise ValueError(f"run {run} gives neither a score nor None for responses {absent}")
        for response, row in row_of.items():
            score = scores[response]
            if score is not None:
                values[row, run] = score
    return _ScoreTable(row_of=row_of, values=values)


def _flatten(pairs: Sequence[tuple[Hashable, Hashable]]) -> list[Hashable]:
    return [response for pair in pairs for response in pair]


def _distinct_count(values: FloatArray) -> int:
    if values.size == 0:
        return 0
    return int((np.diff(np.unique(values)) > FLOAT_SLACK).sum()) + 1


def _stability(ties: int, preferred_picks: int, other_picks: int) -> Stability:
    if ties + preferred_picks + other_picks == 0:
        return Stability.FAILED
    if preferred_picks + other_picks == 0:
        return Stability.ALWAYS_TIED
    if ties:
        return Stability.WOBBLED
    if preferred_picks and other_picks:
        return Stability.FLIPPED
    return Stability.STABLE


def _reported_credit(pairs: RankingPairs) -> FloatArray:
    # NaN differences compare False: a missing score earns 0.
    return (pairs.winner_score - pairs.loser_score > FLOAT_SLACK).astype(np.float64)


def _tolerant_credit(pairs: RankingPairs, tol: float) -> FloatArray:
    difference = pairs.winner_score - pairs.loser_score
    within = np.abs(difference) <= tol + FLOAT_SLACK
    return np.where(difference > tol + FLOAT_SLACK, 1.0, np.where(within, 0.5, 0.0))


def _harmless_credit(pairs: RankingPairs) -> FloatArray:
    if pairs.advantage_sign_lost is None:
        raise ValueError(
            "harm-aware accuracy needs true scores for group-relative advantages; "
            "pairs built from preferences have none"
        )
    harmful: BoolArray = (_reported_credit(pairs) == 0.0) & pairs.advantage_sign_lost
    return (~harmful).astype(np.float64)


def _pair_mean(credit: FloatArray) -> float:
    if credit.size == 0:
        raise ValueError("P is empty: no pair of the same task has different true scores")
    return float(credit.mean())


def _pair_bootstrap(
    pairs: RankingPairs, credit: FloatArray, *, draws: int, seed: int
) -> ConfidenceInterval:
    # Resample only the tasks that have pairs: a task without pairs adds nothing to a draw.
    codes, pair_counts = _task_codes(pairs.task)
    earned = np.bincount(codes, weights=credit, minlength=pair_counts.size)
    return task_bootstrap_ci(earned, pair_counts.astype(np.float64), draws=draws, seed=seed)


def _within_task_rho(responses: ScoredResponses) -> FloatArray:
    """Spearman's rho of each task whose true scores are not all equal, in task-code order."""
    codes, sizes = _task_codes(responses.task)
    tasks = sizes.size
    true_ranks, true_distinct = _average_ranks_within(codes, sizes, responses.true)
    eligible = true_distinct > 1
    if not eligible.any():
        raise ValueError("within-task Spearman needs a task whose true scores are not all equal")
    missing = np.bincount(codes, weights=np.isnan(responses.pred), minlength=tasks) > 0
    # Missing scores are ranked as 0 only to keep the arithmetic finite; those tasks get rho 0.
    pred = np.nan_to_num(responses.pred, nan=0.0)
    pred_ranks, pred_distinct = _average_ranks_within(codes, sizes, pred)
    # Average ranks of a task of n always have mean (n + 1) / 2, so Pearson centers on it.
    center = (sizes[codes] + 1) / 2
    true_centered, pred_centered = true_ranks - center, pred_ranks - center
    covariance = np.bincount(codes, weights=true_centered * pred_centered, minlength=tasks)
    true_square = np.bincount(codes, weights=true_centered**2, minlength=tasks)
    pred_square = np.bincount(codes, weights=pred_centered**2, minlength=tasks)
    scored = eligible & (pred_distinct > 1) & ~missing
    rho = np.zeros(tasks)
    rho[scored] = covariance[scored] / np.sqrt(true_square[scored] * pred_square[scored])
    return rho[eligible]


def average_ranks(values: FloatArray) -> FloatArray:
    """1-based ranks of `values`, ties (closer than FLOAT_SLACK) given their average rank."""
    size = values.size
    ranks, _ = _average_ranks_within(
        np.zeros(size, dtype=np.int64), np.array([size], dtype=np.int64), values
    )
    return ranks


def _average_ranks_within(
    codes: IntArray, sizes: IntArray, values: FloatArray
) -> tuple[FloatArray, IntArray]:
    """1-based average ranks of values within each task, and the number of distinct values
    (closer than FLOAT_SLACK counts as equal) per task."""
    order = np.lexsort((values, codes))
    sorted_codes, sorted_values = codes[order], values[order]
    starts_run = np.ones(order.size, dtype=np.bool_)
    starts_run[1:] = (sorted_codes[1:] != sorted_codes[:-1]) | (
        np.diff(sorted_values) > FLOAT_SLACK
    )
    run = np.cumsum(starts_run) - 1
    run_mean_position = np.bincount(run, weights=np.arange(order.size)) / np.bincount(run)
    task_start = (np.cumsum(sizes) - sizes)[sorted_codes]
    ranks = np.empty(order.size)
    ranks[order] = run_mean_position[run] - task_start + 1
    distinct = np.bincount(sorted_codes, weights=starts_run, minlength=sizes.size)
    return ranks, distinct.astype(np.int64)


def _group_advantages(codes: IntArray, scores: FloatArray, tasks: int) -> FloatArray:
    """score_k - mean of the task's non-missing scores; NaN where the score is missing."""
    present = ~np.isnan(scores)
    totals = np.bincount(codes, weights=np.where(present, scores, 0.0), minlength=tasks)
    counts = np.bincount(codes, weights=present, minlength=tasks)
    with np.errstate(invalid="ignore", divide="ignore"):
        means: FloatArray = totals / counts
    advantages: FloatArray = scores - means[codes]
    return advantages


def _task_codes(task: IntArray) -> tuple[IntArray, IntArray]:
    """Task ids as codes 0..T-1, and the number of entries of each code."""
    _, codes, sizes = np.unique(task, return_inverse=True, return_counts=True)
    return codes.astype(np.int64), sizes.astype(np.int64)


def _require_same_length(**arrays: npt.NDArray[np.generic]) -> None:
    shapes = {name: np.shape(array) for name, array in arrays.items()}
    lengths = {shape[0] if len(shape) == 1 else None for shape in shapes.values()}
    if len(lengths) != 1 or None in lengths:
        raise ValueError(f"expected 1-D arrays of one length, got shapes {shapes}")
