"""From values to the order in which pairs are served: selection probabilities with an epsilon
share drawn uniformly at random, and priorities whose descending order is a random draw from
them. Every served pair can then carry the probability it was chosen with, which the estimators
need to keep metrics on actively chosen labels unbiased.
"""

import numpy as np

from graders.engine.active.votes import FloatArray


def selection_probabilities(
    values: FloatArray, *, epsilon: float, sharpness: float = 1.0
) -> FloatArray:
    """q = (1 - epsilon) * v**sharpness / sum(v**sharpness) + epsilon / P over P pairs.

    Uniform when every value is 0; epsilon = 1 gives exactly uniform q; with epsilon > 0 no pair
    has q = 0, so every pair can be drawn and inverse-propensity weights stay finite.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {v.shape}")
    if np.isnan(v).any() or (v < 0).any() or np.isinf(v).any():
        raise ValueError("values must be finite and >= 0")
    if not 0 <= epsilon <= 1:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    if not (np.isfinite(sharpness) and sharpness > 0):
        raise ValueError(f"sharpness must be a positive number, got {sharpness}")
    pairs = v.size
    if pairs == 0:
        return np.zeros(0)
    uniform = np.full(pairs, 1.0 / pairs)
    top = v.max()
    if top == 0 or epsilon == 1:
        return uniform
    # Scaled by the largest value first, so that a large sharpness cannot overflow.
    weight = (v / top) ** sharpness
    q: FloatArray = (1 - epsilon) * weight / weight.sum() + epsilon * uniform
    return q


def sampling_priorities(q: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Priorities whose descending order is a draw without replacement with probabilities q
    (Efraimidis and Spirakis 2006): log(u) / q with u uniform on (0, 1], so every priority is
    <= 0 and the queue serves the highest first. The first pick is pair i with probability
    q_i; each later one is drawn in proportion to q among the pairs left. A pair with q = 0
    gets -inf (served after every other)."""
    weights = np.asarray(q, dtype=np.float64)
    if weights.ndim != 1:
        raise ValueError(f"q must be 1-D, got shape {weights.shape}")
    if np.isnan(weights).any() or (weights < 0).any():
        raise ValueError("q must hold probabilities >= 0")
    log_u = np.log1p(-rng.random(weights.size))  # 1 - [0, 1) is (0, 1]: log(0) never occurs
    with np.errstate(divide="ignore", invalid="ignore"):
        priorities: FloatArray = np.where(weights > 0, log_u / weights, -np.inf)
    return priorities
