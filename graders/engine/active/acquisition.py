"""What a label on each unlabeled pair is worth, per question (DESIGN.md section 8). Higher is
more worth a label; every value is >= 0, so values can go straight into selection_probabilities.

- information_gain: about which candidate is best (CODA-style), from the committee's votes;
- vote_entropy: how much the committee disagrees on the pair;
- margin_value: how close a call the pair is for one grader;
- harm_potential: whether the pair straddles its group's mean (an error flips an advantage);
- coverage_value: how few labels the pair's group (domain, dimension, split) has.
"""

import numpy as np

from graders.engine.active.posterior import (
    GRID_CELLS,
    BetaGrid,
    GridLevels,
    Posterior,
    entropies,
    p_best,
)
from graders.engine.active.votes import FloatArray, IntArray, discriminating, require_votes

# Signed patterns integrated at once: their (patterns, cells) arrays stay near 2M float64.
_PATTERN_CHUNK_CELLS = 2_000_000


def information_gain(
    posterior: Posterior, votes: IntArray, *, smoothing: float = 0.1
) -> FloatArray:
    """Expected information gain about which candidate is best from a label on each of P pairs
    (`votes` of shape (P, K)): sum over y in {+1, -1} of P(y) KL(P_best | y || P_best), the
    expected divergence of P(best) after the label from P(best) now.

    P_best | y is P(best) after adding credit(vote_k, y) to alpha_k and 1 - credit to beta_k.
    P(y = +1) is the committee's vote weighted by the current P(best), sum_k P_best(k) *
    credit(vote_k, +1), mixed with 0.5 by `smoothing` so that neither outcome has probability 0.
    A pair on which every candidate votes the same way is worth exactly 0.

    Why the divergence and not H(P_best) - sum_y P(y) H(P_best | y): the two are the same
    mutual information when P(y) is the model's own predictive distribution (the P(best)s after
    each label then average back to P(best) now). The committee's P(y) is not: it takes the
    likely leader's vote as the likely label, so the entropy difference came out negative on
    about a third of the pairs of random posteriors, with the pairs that would confirm the
    leader worth least. The divergence is never negative and measures how far a label is
    expected to move P(best); on bench/active_selection.py it decides with 28 labels where the
    clipped entropy difference needs 45 (vote entropy 47, uniform random 117).

    Pairs share work by vote pattern: the outcome of label y on votes v is the outcome of +1 on
    y * v, so P(best) is integrated once per distinct signed pattern.
    """
    votes = require_votes(votes)
    alpha = np.asarray(posterior.alpha, dtype=np.float64)
    beta = np.asarray(posterior.beta, dtype=np.float64)
    if votes.shape[1] != alpha.size:
        raise ValueError(f"votes has {votes.shape[1]} candidates and the posterior {alpha.size}")
    if not 0 <= smoothing <= 1:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing}")
    gain = np.zeros(votes.shape[0])
    counted = discriminating(votes)
    if not counted.any():
        return gain
    patterns, pair_pattern = np.unique(votes[counted], axis=0, return_inverse=True)
    signed, signed_index = np.unique(
        np.concatenate([patterns, -patterns]), axis=0, return_inverse=True
    )
    after_label = _best_after_agreeing_label(alpha, beta, signed)
    current = p_best(posterior)
    divergence = _divergences_from(after_label, current)
    p_a_better = (1 - smoothing) * (current * (1 + patterns) / 2).sum(axis=1) + smoothing / 2
    pattern_gain = (
        p_a_better * divergence[signed_index[: len(patterns)]]
        + (1 - p_a_better) * divergence[signed_index[len(patterns) :]]
    )
    gain[counted] = pattern_gain[pair_pattern.reshape(-1)]
    return gain


def _divergences_from(rows: FloatArray, reference: FloatArray) -> FloatArray:
    """KL(row || reference) in nats for each row, 0 log 0 = 0; a reference P(best) that
    underflowed to 0 is floored (a label cannot lift such a candidate off 0 by much). Rounding
    can leave a divergence a hair below 0; it is 0."""
    floor = np.maximum(reference, np.finfo(np.float64).tiny)
    positive = rows > 0
    ratio = np.where(positive, rows, 1.0) / floor
    terms = np.where(positive, rows * np.log(ratio), 0.0)
    result: FloatArray = np.maximum(terms.sum(axis=1), 0.0)
    return result


def _best_after_agreeing_label(alpha: FloatArray, beta: FloatArray, signed: IntArray) -> FloatArray:
    """P(best) after a label y = +1 on a pair with each row of votes `signed` (shape (U, K)).

    A candidate's update takes one of three forms (credit 0, 0.5 or 1), so its cell masses are
    computed three times and each pattern picks, per candidate, the one its vote implies.
    """
    credit_levels = np.array([0.0, 0.5, 1.0])  # votes -1, 0, +1
    level_alpha = alpha[None, :] + credit_levels[:, None]
    level_beta = beta[None, :] + 1 - credit_levels[:, None]
    grid = BetaGrid.spanning(level_alpha.reshape(-1), level_beta.reshape(-1))
    levels = GridLevels.from_masses(grid.masses(level_alpha, level_beta))
    choice = (signed + 1) * alpha.size + np.arange(alpha.size)
    result = np.empty(signed.shape, dtype=np.float64)
    chunk = max(1, _PATTERN_CHUNK_CELLS // GRID_CELLS)
    for start in range(0, len(signed), chunk):
        result[start : start + chunk] = levels.best(choice[start : start + chunk])
    return result


def vote_entropy(votes: IntArray) -> FloatArray:
    """Entropy (nats) of the shares of +1, 0 and -1 votes on each pair: 0 when the committee
    agrees, log 3 at most."""
    votes = require_votes(votes)
    if votes.shape[1] == 0:
        return np.zeros(votes.shape[0])
    shares = np.stack([(votes == level).mean(axis=1) for level in (1, 0, -1)], axis=1)
    return entropies(shares)


def margin_value(score_a: FloatArray, score_b: FloatArray) -> FloatArray:
    """1 - min(1, |s_a - s_b|) for one grader's scores in [0, 1]: a close call is worth more. A
    pair with a failed grade (NaN) is worth 1: the grader could not call it at all."""
    a, b = _same_shape_1d(score_a=score_a, score_b=score_b)
    gap = np.abs(a - b)
    return np.where(np.isnan(gap), 1.0, 1.0 - np.minimum(1.0, gap))


def harm_potential(
    score_a: FloatArray, score_b: FloatArray, group_mean: FloatArray | float
) -> FloatArray:
    """1 where the pair straddles its group's mean m ((s_a - m) * (s_b - m) < 0), so misordering
    it flips the sign of an advantage (the errors harm-aware accuracy counts), else 0. A pair
    with a missing score or mean cannot be placed against the mean and gets 0."""
    a, b = _same_shape_1d(score_a=score_a, score_b=score_b)
    mean = np.broadcast_to(np.asarray(group_mean, dtype=np.float64), a.shape)
    return ((a - mean) * (b - mean) < 0).astype(np.float64)


def coverage_value(labels_in_group: IntArray) -> FloatArray:
    """1 / (1 + count), with count the labels the pair's group (domain, dimension, split)
    already has: thin groups first."""
    counts = np.asarray(labels_in_group)
    if counts.ndim != 1:
        raise ValueError(f"labels_in_group must be 1-D, got shape {counts.shape}")
    if counts.size and (counts < 0).any():
        raise ValueError("labels_in_group must be counts >= 0")
    return 1.0 / (1.0 + counts.astype(np.float64))


def _same_shape_1d(**arrays: FloatArray) -> list[FloatArray]:
    values = [np.asarray(array, dtype=np.float64) for array in arrays.values()]
    shapes = {name: value.shape for name, value in zip(arrays, values, strict=True)}
    if len(set(shapes.values())) != 1 or values[0].ndim != 1:
        raise ValueError(f"expected 1-D arrays of one length, got shapes {shapes}")
    return values


def recency_value(age: IntArray, *, scale: float) -> FloatArray:
    """1 / (1 + age / scale), with age 0 for the most recent rollouts and 1, 2, ... for each
    earlier step: 1/2 at `scale` steps back, 1/(1 + k) at k * scale. Hyperbolic rather than
    exponential so that no age underflows to 0: an old pair loses ground but can still be
    drawn."""
    ages = np.asarray(age)
    if ages.ndim != 1:
        raise ValueError(f"age must be 1-D, got shape {ages.shape}")
    if ages.size and (ages < 0).any():
        raise ValueError("age must be >= 0")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale}")
    return 1.0 / (1.0 + ages.astype(np.float64) / scale)
