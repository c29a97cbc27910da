"""Which candidate grader is best: Beta posteriors over each candidate's tolerant accuracy on the
labeled pairs where the committee disagrees, and P(best) from them (DESIGN.md section 8, after
CODA, Kay et al. 2025).

Only discriminating pairs (the candidates' votes are not all identical) count: a pair every
candidate votes the same way adds the same credit to every candidate and cannot change which one
is best. With n such labeled pairs and c_k candidate k's summed credit on them, k's accuracy has
the posterior Beta(prior + c_k, prior + n - c_k).

P(best)(k) = integral of f_k(x) * prod_{j != k} F_j(x) dx, integrated on a grid of GRID_CELLS
equal cells spanning every candidate's mean +- TAIL_SDS standard deviations (clipped to [0, 1]):

- each cell's Beta mass is its width times the density at its midpoint (a cell at 0 or 1
  integrates the factor that can be infinite there exactly), normalized over the cells, so the
  Beta function cancels and no log-gamma is needed;
- within a cell, k's mass times the others' CDFs averaged over the cell's two edges, a
  second-order rule that is exact for two candidates (the sum telescopes to the cell's mass of
  the maximum), then normalized so that P(best) sums to 1; GridLevels does the products as
  matrix products, so that many alternative posteriors cost little more than one, and skips
  the cells where no candidate can be best.

Candidates share n, so their posteriors have similar widths and the span stays a few widths
wide. Against quadrature P(best) is within about 1e-5, 1e-4 where a density is infinite at 0
or 1 (a prior below 1); a Monte Carlo of 4M draws is further off than that.
"""

from dataclasses import dataclass

import numpy as np

from graders.engine.active.votes import (
    FloatArray,
    IntArray,
    discriminating,
    require_votes,
    vote_credit,
)

GRID_CELLS = 512
TAIL_SDS = 12.0
_CDF_FLOOR = 1e-300
NEGLIGIBLE = 1e-16


@dataclass(frozen=True)
class Posterior:
    """Beta(alpha[k], beta[k]) over candidate k's tolerant accuracy on discriminating pairs."""

    alpha: FloatArray
    beta: FloatArray

    def __post_init__(self) -> None:
        alpha, beta = np.asarray(self.alpha), np.asarray(self.beta)
        if alpha.ndim != 1 or alpha.shape != beta.shape:
            raise ValueError(
                f"alpha and beta must be 1-D of one length, got {alpha.shape} and {beta.shape}"
            )
        if alpha.size == 0:
            raise ValueError("a posterior needs at least one candidate")
        if not (np.isfinite(alpha).all() and np.isfinite(beta).all()):
            raise ValueError("alpha and beta must be finite")
        if not ((alpha > 0).all() and (beta > 0).all()):
            raise ValueError("alpha and beta must be positive")


def posterior_from_labels(votes: IntArray, labels: IntArray, *, prior: float = 1.0) -> Posterior:
    """The posterior after labels y (+1: a better, -1: b better) on L pairs that the K
    candidates voted on (`votes` of shape (L, K)); pairs where every vote is the same count for
    nothing."""
    votes = require_votes(votes)
    labels = np.asarray(labels)
    if labels.shape != (votes.shape[0],):
        raise ValueError(
            f"labels must have one entry per row of votes ({votes.shape[0]}), got {labels.shape}"
        )
    if labels.size and not np.isin(labels, (-1, 1)).all():
        raise ValueError("labels must be +1 (a better) or -1 (b better); leave tied labels out")
    if not (np.isfinite(prior) and prior > 0):
        raise ValueError(f"prior must be a positive number, got {prior}")
    counted = discriminating(votes)
    credit = vote_credit(votes[counted], labels[counted, None]).sum(axis=0)
    return Posterior(alpha=prior + credit, beta=prior + float(counted.sum()) - credit)


def p_best(posterior: Posterior) -> FloatArray:
    """P(best)(k): the probability that candidate k has the highest accuracy; sums to 1."""
    alpha = np.asarray(posterior.alpha, dtype=np.float64)
    beta = np.asarray(posterior.beta, dtype=np.float64)
    levels = GridLevels.from_masses(BetaGrid.spanning(alpha, beta).masses(alpha, beta))
    result: FloatArray = levels.best(np.arange(alpha.size)[None, :])[0]
    return result


def entropy(p: FloatArray) -> float:
    """Shannon entropy in nats, with 0 log 0 = 0."""
    return float(entropies(np.asarray(p, dtype=np.float64)))


def entropies(p: FloatArray) -> FloatArray:
    """`entropy` of each row (the last axis holds one distribution)."""
    values = np.asarray(p, dtype=np.float64)
    terms = np.where(values > 0, values * np.log(np.where(values > 0, values, 1.0)), 0.0)
    result: FloatArray = -terms.sum(axis=-1)
    return result


def labels_to_decide(
    p_best: FloatArray, gain_per_label: float, *, threshold: float = 0.9
) -> float | None:
    """About how many more labels until the top P(best) passes `threshold`, at the current rate
    of information: (H(P_best) - H_threshold) / gain_per_label, with H_threshold the entropy of
    `threshold` on one candidate and the rest spread evenly over the others (the most uncertain
    distribution that has decided). 0 when a candidate already has P(best) >= threshold, None
    when gain_per_label <= 0 (the labels left cannot move P(best)). gain_per_label is in nats,
    as information_gain is: the mean gain of the pairs about to be served, say.

    A distribution can be below H_threshold without any candidate reaching `threshold` (most of
    the rest on one runner-up); its information is then spent and the answer is 0.
    """
    probabilities = np.asarray(p_best, dtype=np.float64)
    if probabilities.ndim != 1 or probabilities.size == 0:
        raise ValueError(f"p_best must be a non-empty 1-D array, got shape {probabilities.shape}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if probabilities.max() >= threshold:
        return 0.0
    if not gain_per_label > 0:
        return None
    others = probabilities.size - 1
    decided = np.array([threshold] + [(1 - threshold) / others] * others)
    return max(0.0, (entropy(probabilities) - entropy(decided)) / gain_per_label)


@dataclass(frozen=True)
class BetaGrid:
    """Equal cells over [low, high] on which Beta masses are integrated."""

    log_x: FloatArray  # log of each cell's midpoint
    log_1mx: FloatArray  # log of 1 - each cell's midpoint
    log_width: float
    from_zero: bool  # the first cell starts at 0
    to_one: bool  # the last cell ends at 1

    @classmethod
    def spanning(cls, alpha: FloatArray, beta: FloatArray) -> "BetaGrid":
        """Cells covering every Beta(alpha[k], beta[k]) to TAIL_SDS standard deviations."""
        total = alpha + beta
        mean = alpha / total
        sd = np.sqrt(alpha * beta / (total * total * (total + 1)))
        low = max(0.0, float((mean - TAIL_SDS * sd).min()))
        high = min(1.0, float((mean + TAIL_SDS * sd).max()))
        edges = np.linspace(low, high, GRID_CELLS + 1)
        middle = (edges[:-1] + edges[1:]) / 2
        return cls(
            log_x=np.log(middle),
            log_1mx=np.log1p(-middle),
            log_width=float(np.log((high - low) / GRID_CELLS)),
            from_zero=low == 0.0,
            to_one=high == 1.0,
        )

    def masses(self, alpha: FloatArray, beta: FloatArray) -> FloatArray:
        """Each cell's share of Beta(alpha, beta): shape alpha.shape + (cells,), rows sum to 1.

        A cell's mass is its width times the density at its midpoint, except that a cell at 0
        integrates the x^(alpha - 1) factor exactly (width^alpha / alpha) and a cell at 1 the
        (1 - x)^(beta - 1) factor: with alpha or beta below 1 the density is infinite there and
        the midpoint would miss much of that cell's mass. Logs leave out the common width.
        """
        a = np.asarray(alpha, dtype=np.float64)[..., None]
        b = np.asarray(beta, dtype=np.float64)[..., None]
        log_mass = (a - 1) * self.log_x + (b - 1) * self.log_1mx
        if self.from_zero:
            log_mass[..., 0] = (
                (a[..., 0] - 1) * self.log_width
                - np.log(a[..., 0])
                + (b[..., 0] - 1) * self.log_1mx[0]
            )
        if self.to_one:
            log_mass[..., -1] = (
                (a[..., 0] - 1) * self.log_x[-1]
                + (b[..., 0] - 1) * self.log_width
                - np.log(b[..., 0])
            )
        mass = np.exp(log_mass - log_mass.max(axis=-1, keepdims=True))
        result: FloatArray = mass / mass.sum(axis=-1, keepdims=True)
        return result


@dataclass(frozen=True)
class GridLevels:
    """Alternative posteriors of each candidate on one grid (rows: level-major, so row
    level * K + k is candidate k at that level), prepared so that P(best) for any choice of one
    level per candidate takes two matrix products.

    With m the cell masses and F the CDFs averaged over each cell's edges, P(best)(k) is
    sum_i m_k,i * prod_{j != k} F_j,i = sum_i (m_k,i / F_k,i) * E_i, where E_i = prod_j F_j,i
    = exp(sum_j log F_j,i). So E for many choices is exp(choices @ log F), and the P(best)s are
    E @ (m / F)^T, read at each choice's rows. m / F is at most 2 (F >= m / 2), and log F is
    floored where a CDF underflows so that 0 * log 0 never makes a NaN.

    Cells that cannot matter are dropped: on the left those where, for every k, the product of
    the other candidates' largest CDFs over their levels is below NEGLIGIBLE (no candidate can
    be best there), on the right those where every mass is below NEGLIGIBLE.
    """

    log_cdf: FloatArray  # (levels * K, cells)
    ratio: FloatArray  # (levels * K, cells)

    @classmethod
    def from_masses(cls, mass: FloatArray) -> "GridLevels":
        """From cell masses of shape (levels, K, cells), or (K, cells) for one level."""
        candidates, cells = mass.shape[-2], mass.shape[-1]
        rows = mass.reshape(-1, cells)
        mean_cdf = np.cumsum(rows, axis=-1) - rows / 2
        log_cdf = np.log(np.maximum(mean_cdf, _CDF_FLOOR))
        highest = log_cdf.reshape(-1, candidates, cells).max(axis=0)
        others = highest.sum(axis=0) - highest.min(axis=0)
        first = int(np.argmax(others > np.log(NEGLIGIBLE)))
        stop = cells - int(np.argmax(rows.max(axis=0)[::-1] > NEGLIGIBLE))
        kept = slice(first, max(stop, first + 1))
        ratio = np.divide(
            rows[:, kept],
            mean_cdf[:, kept],
            out=np.zeros_like(rows[:, kept]),
            where=mean_cdf[:, kept] > 0,
        )
        return cls(log_cdf=log_cdf[:, kept], ratio=ratio)

    def best(self, choice: IntArray) -> FloatArray:
        """P(best) for each row of `choice` (B, K): the level row each candidate takes."""
        rows = self.log_cdf.shape[0]
        picked = np.zeros((choice.shape[0], rows))
        np.put_along_axis(picked, choice, 1.0, axis=1)
        everyone = np.exp(picked @ self.log_cdf)  # (B, cells): CDF of the maximum
        scores = np.take_along_axis(everyone @ self.ratio.T, choice, axis=1)
        result: FloatArray = scores / scores.sum(axis=1, keepdims=True)
        return result
