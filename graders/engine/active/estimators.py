"""Means of a per-pair metric (a credit, an accuracy) over labels chosen actively, reweighted so
that they estimate the mean over the whole pool (DESIGN.md section 8, issue 15 item 3).

- ipw_mean: self-normalized inverse propensity (Hajek): weights 1 / (pool * q), where q is the
  probability the pair had of being the next pick from a pool of that size when it was served.
  A uniform draw has q = 1 / pool and weight 1, so labels not chosen by a sampling strategy
  (probability NaN) weigh 1 and uniform labels reduce to the plain mean. It is consistent, not
  exact: the ratio is off by O(1 / labels), and treating q as a share of the inclusion
  probability holds while the labels are a small part of the pool (the queue rewrites q often).
  Its task-bootstrap interval is metrics.task_bootstrap_ci over per-task sums of w * value and
  of w: the same ratio, resampled by task.
- lure_mean: LURE (Farquhar et al. 2021, used for active testing by Kossen et al. 2021), exactly
  unbiased for M labels acquired one at a time without replacement from a pool of N, when q_m
  is the probability the m-th pick had among the N - m + 1 pairs then left.
"""

import numpy as np

from graders.engine.active.votes import FloatArray, IntArray


def ipw_mean(values: FloatArray, probabilities: FloatArray, pool_sizes: FloatArray) -> float:
    """sum(w * v) / sum(w) with w_i = 1 / (pool_i * q_i); w_i = 1 where q_i is NaN."""
    v = _finite_1d(values, "values")
    q = np.asarray(probabilities, dtype=np.float64)
    pool = np.asarray(pool_sizes, dtype=np.float64)
    if q.shape != v.shape or pool.shape != v.shape:
        raise ValueError(
            f"values, probabilities and pool_sizes must have one length, got shapes "
            f"{v.shape}, {q.shape} and {pool.shape}"
        )
    drawn = ~np.isnan(q)
    if not ((q[drawn] > 0) & (q[drawn] <= 1)).all():
        raise ValueError("probabilities must be in (0, 1] (or NaN: not chosen by a draw)")
    if not (pool[drawn] >= 1).all():
        raise ValueError("pool_sizes must be >= 1 where a probability is given")
    weight = np.ones_like(v)
    weight[drawn] = 1.0 / (pool[drawn] * q[drawn])
    return float((weight * v).sum() / weight.sum())


def lure_mean(values: FloatArray, probabilities: FloatArray, pool_size: int) -> float:
    """LURE estimate of the pool mean from M values in acquisition order m = 1..M:
    mean(v_m * L_m), v_m = 1 + (N - M) / (N - m) * (1 / ((N - m + 1) * q_m) - 1).

    With M = N the whole pool is labeled and every v_m is 1 (the plain mean is exact); the
    formula's (N - M) / (N - m) is then 0 / 0 at m = N, so it is not evaluated.
    """
    v = _finite_1d(values, "values")
    q = np.asarray(probabilities, dtype=np.float64)
    if q.shape != v.shape:
        raise ValueError(f"values has shape {v.shape} and probabilities {q.shape}")
    if not ((q > 0) & (q <= 1)).all():
        raise ValueError("probabilities must be in (0, 1]")
    labeled, pool = v.size, int(pool_size)
    if not 1 <= labeled <= pool:
        raise ValueError(f"pool_size ({pool}) must be at least the number of values ({labeled})")
    if labeled == pool:
        return float(v.mean())
    m = np.arange(1, labeled + 1, dtype=np.float64)
    weight = 1 + (pool - labeled) / (pool - m) * (1 / ((pool - m + 1) * q) - 1)
    return float((weight * v).mean())


def successive_pick_probabilities(q: FloatArray, order: IntArray) -> FloatArray:
    """The probability each pick in `order` (indices into q, in serving order) had when it was
    made, for a draw that takes each next pair in proportion to q among those left (what
    sampling_priorities' order is): q[i_m] / sum of q over the pairs not yet picked. These are
    the q_m that lure_mean needs."""
    weights = np.asarray(q, dtype=np.float64)
    picks = np.asarray(order, dtype=np.int64)
    if picks.ndim != 1 or np.unique(picks).size != picks.size:
        raise ValueError("order must list distinct indices into q")
    if picks.size and (picks.min() < 0 or picks.max() >= weights.size):
        raise ValueError(f"order must index into q (0..{weights.size - 1})")
    taken_before = np.concatenate([[0.0], np.cumsum(weights[picks])[:-1]])
    result: FloatArray = weights[picks] / (weights.sum() - taken_before)
    return result


def _finite_1d(values: FloatArray, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array
