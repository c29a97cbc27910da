"""Picking a search's winner without fitting D_selection (DESIGN.md section 8b).

A search that feeds D_selection results back to its proposer is adaptive data analysis: after
dozens of candidates the argmax of the point estimate on a few dozen tasks is biased upward, and
the proposer climbs what those tasks happen to reward. Each rule here takes the same input, a
candidates x tasks matrix of tolerant credit sums and the tasks' pair counts (every candidate is
graded on the same tasks; a failed score has already earned 0 credit), and returns per candidate
the value the proposer is told (`feedback`), the value the pick ranks by (`pick`) and the
winner:

- ARGMAX: today's rule. Feedback and pick are the tolerant ranking accuracy over all tasks.
- LOWER_BOUND: the pick is the 2.5 percentile of the task-bootstrap interval, so a lead built on
  a few lucky tasks counts for less than the same lead spread over many.
- P_BEST: the pick is the share of bootstrap draws in which the candidate has the highest
  accuracy (ties split evenly).
- HOLDOUT: the tasks are split once per search into a feedback part and an untouched part of
  about UNTOUCHED_SHARE (a fifth; `untouched_tasks`). The proposer sees accuracy on the
  feedback part only; the winner is the best on the untouched part among the SHORTLIST (two)
  best by feedback. Shortlisting matters: an argmax over every candidate on the untouched part
  would fit that part in turn. Both numbers come from bench/selection_overfit.py: the
  proposer's search is only as good as the share of D_selection it sees, so holding back a
  fifth costs it little, and a fifth untouched still gives an honest figure for a pick made
  among two. Half untouched cost 0.9 points of true accuracy; a shortlist of three let more
  optimism through (gap +0.042 against +0.032), one was the least optimistic (+0.005) but
  fell below argmax's true accuracy where two did not, both within a standard error.
- THRESHOLDOUT: the same split, but the proposer is answered through the reusable holdout of
  Dwork et al. (2015, "The reusable holdout: preserving validity in adaptive data analysis",
  Science 349): `thresholdout_answers`. The pick is as for HOLDOUT.

The bootstrap follows graders/engine/metrics.py task_bootstrap_ci (10,000 draws, numpy
`default_rng(0)`, tasks resampled with replacement, pair-weighted ratio), with one resample of
tasks shared by every candidate, so a candidate's lower bound equals its own interval's low end
and P(best) compares candidates on the same draws.

Ties, within FLOAT_SLACK, go to the cheaper candidate (fewer judge calls per response), then to
the earlier one (lower index: the baseline first), as graders/candidates.py does.
"""

import hashlib
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from graders.engine.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, FLOAT_SLACK

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# The share of D_selection the holdout rules keep from the proposer, and the candidates they
# shortlist by feedback before that untouched part picks (bench/selection_overfit.py).
UNTOUCHED_SHARE = 0.2
SHORTLIST = 2
# Thresholdout's threshold T and noise scale sigma, on the accuracy scale. The paper's Laplace
# scales are 2 sigma for the threshold's noise, 4 sigma for each comparison's and sigma for the
# noise on a released holdout value; T = 0.04, sigma = 0.01 are its worked example's values.
THRESHOLD = 0.04
NOISE_SCALE = 0.01
# Bootstrap rows resampled at once: keeps the draws' task counts near 4M entries (32 MB).
_CHUNK_ELEMENTS = 4_000_000


class SelectionRule(StrEnum):
    ARGMAX = "argmax"
    LOWER_BOUND = "lower_bound"
    P_BEST = "p_best"
    HOLDOUT = "holdout"
    THRESHOLDOUT = "thresholdout"

    @property
    def splits(self) -> bool:
        """Whether the rule keeps part of D_selection from the proposer."""
        return self in (SelectionRule.HOLDOUT, SelectionRule.THRESHOLDOUT)


# The rule a search uses unless told otherwise, chosen from bench/selection_overfit.py (its
# docstring has the numbers): the only rule whose reported accuracy for its pick is far less
# optimistic than argmax's (+0.02 to +0.03 against +0.10), at argmax's true accuracy within
# one standard error (+0.0005, se 0.0022, at 200 seeds; -0.0008, se 0.0015, at 400).
DEFAULT_RULE = SelectionRule.HOLDOUT


@dataclass(frozen=True)
class SelectionInput:
    """One search's candidates on D_selection, in proposal order (the baseline first).

    `credit[c, t]` is candidate c's tolerant credit summed over task t's pairs, `pairs[t]` the
    task's pair count, `tasks[t]` its id (the holdout split hashes it), `cost[c]` the candidate's
    judge calls per response (0 when unknown), `seed` the search's seed.
    """

    credit: FloatArray
    pairs: FloatArray
    tasks: IntArray
    cost: FloatArray
    seed: int = 0

    def __post_init__(self) -> None:
        if self.credit.ndim != 2 or self.credit.shape[0] < 1 or self.credit.shape[1] < 1:
            raise ValueError(
                f"credit must be a candidates x tasks matrix with at least one of each, "
                f"got shape {self.credit.shape}"
            )
        candidates, tasks = self.credit.shape
        if self.pairs.shape != (tasks,) or self.tasks.shape != (tasks,):
            raise ValueError(
                f"pairs and tasks need one entry per task ({tasks}), got shapes "
                f"{self.pairs.shape} and {self.tasks.shape}"
            )
        if self.cost.shape != (candidates,):
            raise ValueError(
                f"cost needs one entry per candidate ({candidates}), got shape {self.cost.shape}"
            )
        if not (self.pairs > 0).all():
            raise ValueError("every task needs at least one pair")
        if len(set(self.tasks.tolist())) != tasks:
            raise ValueError("task ids must be distinct")
        if self.seed < 0:
            raise ValueError(f"seed must be at least 0, got {self.seed}")


@dataclass(frozen=True)
class Selection:
    """A rule's verdict. `pick` is NaN for candidates the rule does not consider (outside the
    holdout rules' shortlist); `untouched` is accuracy on the untouched part and
    `untouched_tasks` marks that part's tasks, both None for rules without a split."""

    rule: SelectionRule
    score: FloatArray
    feedback: FloatArray
    pick: FloatArray
    winner: int
    untouched: FloatArray | None = None
    untouched_tasks: BoolArray | None = None

    @property
    def estimate(self) -> float:
        """The accuracy the rule stands behind for its winner: on the untouched part for the
        holdout rules, else the point estimate on all of D_selection (a lower bound or a
        probability of being best is not an accuracy estimate)."""
        values = self.score if self.untouched is None else self.untouched
        return float(values[self.winner])


def selection_select(
    rule: SelectionRule,
    data: SelectionInput,
    *,
    shortlist: int = SHORTLIST,
    threshold: float = THRESHOLD,
    noise_scale: float = NOISE_SCALE,
    draws: int = BOOTSTRAP_DRAWS,
) -> Selection:
    """Apply `rule` to `data`. Raises ValueError for a split rule over fewer than two tasks."""
    if shortlist < 1:
        raise ValueError(f"shortlist must be at least 1, got {shortlist}")
    score = _accuracy(data.credit, data.pairs)
    if not rule.splits:
        if rule == SelectionRule.ARGMAX:
            pick = score
        elif rule == SelectionRule.LOWER_BOUND:
            pick = bootstrap_lower_bounds(data.credit, data.pairs, draws=draws)
        else:
            pick = bootstrap_p_best(data.credit, data.pairs, draws=draws)
        return Selection(rule, score, score, pick, best_index(pick, data.cost))
    untouched_mask = untouched_tasks(data.tasks, data.seed)
    feedback_part = _accuracy(data.credit[:, ~untouched_mask], data.pairs[~untouched_mask])
    untouched = _accuracy(data.credit[:, untouched_mask], data.pairs[untouched_mask])
    feedback = (
        feedback_part
        if rule == SelectionRule.HOLDOUT
        else thresholdout_answers(
            feedback_part, untouched, seed=data.seed, threshold=threshold, noise_scale=noise_scale
        )
    )
    pick = np.full(score.shape, np.nan)
    listed = ranked_indices(feedback, data.cost)[:shortlist]
    pick[listed] = untouched[listed]
    winner = best_index(pick, data.cost)
    return Selection(rule, score, feedback, pick, winner, untouched, untouched_mask)


def untouched_tasks(tasks: IntArray, seed: int) -> BoolArray:
    """True for the tasks of the untouched part, about UNTOUCHED_SHARE of them: each task is
    decided by a hash of (seed, task id), so adding a task never moves another. When the hash
    puts every task on one side, the task with the most extreme hash crosses over, so both
    parts have one."""
    if tasks.size < 2:
        raise ValueError(
            f"a holdout split needs at least two D_selection tasks with pairs, got {tasks.size}"
        )
    position = np.array([_unit_hash(seed, int(task)) for task in tasks.tolist()])
    untouched: BoolArray = position >= 1 - UNTOUCHED_SHARE
    if untouched.all():
        untouched[np.argmin(position)] = False
    elif not untouched.any():
        untouched[np.argmax(position)] = True
    return untouched


def thresholdout_answers(
    feedback: FloatArray,
    untouched: FloatArray,
    *,
    seed: int,
    threshold: float = THRESHOLD,
    noise_scale: float = NOISE_SCALE,
) -> FloatArray:
    """Thresholdout's answer to each query in order (query i: candidate i's accuracy).

    Dwork et al. 2015: draw T_hat = T + Lap(2 sigma). For each query, draw eta ~ Lap(4 sigma);
    if |untouched - feedback| > T_hat + eta, answer untouched + Lap(sigma) and redraw
    T_hat = T + Lap(2 sigma); else answer the feedback value, which says nothing about the
    untouched part. The paper's budget (answer nothing after B overflows) is left out: a
    search asks at most a few hundred queries. Answers are clipped to [0, 1], the scale of an
    accuracy. Each query draws from its own seeded stream, so the answers to the first n
    queries do not depend on any later one: a resumed search tells its proposer what it told
    it before.
    """
    if threshold < 0 or noise_scale < 0:
        raise ValueError(
            f"threshold and noise_scale must be at least 0, got {threshold} and {noise_scale}"
        )
    if feedback.shape != untouched.shape:
        raise ValueError(
            f"feedback and untouched need one value per query, got shapes {feedback.shape} "
            f"and {untouched.shape}"
        )
    current = threshold + np.random.default_rng([seed, 0]).laplace(0.0, 2 * noise_scale)
    answers = np.empty(feedback.shape)
    for query, (told, held) in enumerate(zip(feedback.tolist(), untouched.tolist(), strict=True)):
        rng = np.random.default_rng([seed, 1, query])
        if abs(held - told) > current + rng.laplace(0.0, 4 * noise_scale):
            answers[query] = min(max(held + rng.laplace(0.0, noise_scale), 0.0), 1.0)
            current = threshold + rng.laplace(0.0, 2 * noise_scale)
        else:
            answers[query] = told
    return answers


def bootstrap_accuracies(
    credit: FloatArray, pairs: FloatArray, *, draws: int = BOOTSTRAP_DRAWS
) -> FloatArray:
    """Each candidate's pair-weighted accuracy in each of `draws` joint task resamples, a
    draws x candidates matrix; the draws are task_bootstrap_ci's (seed BOOTSTRAP_SEED)."""
    if draws < 1:
        raise ValueError("the bootstrap needs at least one draw")
    tasks = pairs.size
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    accuracies = np.empty((draws, credit.shape[0]))
    rows = max(1, _CHUNK_ELEMENTS // tasks)
    for start in range(0, draws, rows):
        stop = min(start + rows, draws)
        picks = rng.integers(0, tasks, size=(stop - start, tasks))
        # How often each task is drawn in each row, so one matrix product serves every candidate.
        offsets = (np.arange(stop - start) * tasks)[:, None]
        flat = np.bincount((picks + offsets).ravel(), minlength=(stop - start) * tasks)
        counts = flat.reshape(stop - start, tasks).astype(np.float64)
        accuracies[start:stop] = (counts @ credit.T) / (counts @ pairs)[:, None]
    return accuracies


def bootstrap_lower_bounds(
    credit: FloatArray, pairs: FloatArray, *, draws: int = BOOTSTRAP_DRAWS
) -> FloatArray:
    """The 2.5 percentile of each candidate's task-bootstrap accuracy."""
    bounds: FloatArray = np.percentile(
        bootstrap_accuracies(credit, pairs, draws=draws), 2.5, axis=0
    )
    return bounds


def bootstrap_p_best(
    credit: FloatArray, pairs: FloatArray, *, draws: int = BOOTSTRAP_DRAWS
) -> FloatArray:
    """P(best): the share of joint bootstrap draws in which each candidate has the highest
    accuracy, a draw's tie (within FLOAT_SLACK) split evenly among the tied."""
    accuracies = bootstrap_accuracies(credit, pairs, draws=draws)
    top = accuracies >= accuracies.max(axis=1, keepdims=True) - FLOAT_SLACK
    shares: FloatArray = (top / top.sum(axis=1, keepdims=True)).mean(axis=0)
    return shares


def ranked_indices(values: FloatArray, cost: FloatArray) -> IntArray:
    """Candidate indices best first by `best_index`'s order (higher, then cheaper, then
    earlier); NaN values are left out."""
    remaining = [index for index in range(values.size) if not np.isnan(values[index])]
    order: list[int] = []
    while remaining:
        order.append(remaining.pop(best_index(values[remaining], cost[remaining])))
    return np.array(order, dtype=np.int64)


def best_index(values: FloatArray, cost: FloatArray) -> int:
    """The index of the highest value (NaN never wins); values within FLOAT_SLACK tie, and a
    tie goes to the cheaper (cost within FLOAT_SLACK ties again), then to the earlier.
    Raises ValueError when every value is NaN."""
    present = ~np.isnan(values)
    if not present.any():
        raise ValueError("no candidate has a value to select by")
    tied = present & (values >= np.max(values[present]) - FLOAT_SLACK)
    cheapest = np.min(cost[tied])
    return int(np.flatnonzero(tied & (cost <= cheapest + FLOAT_SLACK))[0])


def _accuracy(credit: FloatArray, pairs: FloatArray) -> FloatArray:
    accuracy: FloatArray = credit.sum(axis=1) / pairs.sum()
    return accuracy


def _unit_hash(seed: int, task: int) -> float:
    """A task's position in [0, 1) for the split, the same on every machine and run."""
    digest = hashlib.blake2b(f"{seed}:{task}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
