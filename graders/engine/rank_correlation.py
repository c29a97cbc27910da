"""Spearman's rank correlation with a two-sided p value, and Holm's correction, in numpy (scipy
is only a development dependency). The meta-evaluation's correlation panel uses them across
evaluators (PADME Table 4: accuracy against tie rate, distinct scores and leniency).

- rho: Pearson's correlation of the average ranks (ties share their mean rank).
- p, for n <= EXACT_MAX_N: exact, by permutation: the share of all n! orderings of the second
  variable's ranks whose |rho| is at least the observed |rho|. A handful of evaluators is the
  usual case, where the t approximation is poor.
- p, for larger n: the t approximation, t = rho * sqrt((n - 2) / (1 - rho^2)) with n - 2 degrees
  of freedom (what scipy.stats.spearmanr reports), through the regularized incomplete beta
  function.
- Holm-Bonferroni: the i-th smallest of m p values times (m - i + 1), made non-decreasing and
  capped at 1.
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graders.engine.metrics import FLOAT_SLACK, FloatArray, average_ranks

EXACT_MAX_N = 8  # 8! = 40,320 orderings
MIN_N = 3
_BETA_ITERATIONS, _BETA_EPSILON = 300, 1e-15


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman's rho over n paired values and its p value; both None when it is undefined
    (fewer than MIN_N pairs, or a variable that does not vary). `method` says how p was
    computed: "exact" or "t"."""

    n: int
    rho: float | None
    p: float | None
    method: str


def spearman(x: Sequence[float], y: Sequence[float]) -> RankCorrelation:
    """Spearman's rho of x and y (same length) with its two-sided p value."""
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values and y {len(y)}")
    n = len(x)
    method = "exact" if n <= EXACT_MAX_N else "t"
    if n < MIN_N:
        return RankCorrelation(n, None, None, method)
    x_ranks = average_ranks(np.asarray(x, dtype=np.float64))
    y_ranks = average_ranks(np.asarray(y, dtype=np.float64))
    rho = _pearson(x_ranks, y_ranks)
    if rho is None:
        return RankCorrelation(n, None, None, method)
    p = _exact_p(x_ranks, y_ranks, rho) if method == "exact" else _t_p(rho, n)
    return RankCorrelation(n, rho, p, method)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def _pearson(x: FloatArray, y: FloatArray) -> float | None:
    x_centered, y_centered = x - x.mean(), y - y.mean()
    scale = math.sqrt(float((x_centered**2).sum() * (y_centered**2).sum()))
    if scale <= FLOAT_SLACK:
        return None
    return float((x_centered * y_centered).sum() / scale)


def _exact_p(x_ranks: FloatArray, y_ranks: FloatArray, rho: float) -> float:
    permuted = np.array(list(itertools.permutations(y_ranks)), dtype=np.float64)
    x_centered = x_ranks - x_ranks.mean()
    y_centered = permuted - permuted.mean(axis=1, keepdims=True)
    scale = np.sqrt((x_centered**2).sum() * (y_centered**2).sum(axis=1))
    rhos = (y_centered @ x_centered) / scale
    return float(np.mean(np.abs(rhos) >= abs(rho) - FLOAT_SLACK))


def _t_p(rho: float, n: int) -> float:
    if abs(rho) >= 1.0 - FLOAT_SLACK:
        return 0.0
    df = n - 2
    t_squared = rho * rho * df / (1.0 - rho * rho)
    # P(|T| >= |t|) for Student's t with df degrees of freedom.
    return _regularized_beta(df / (df + t_squared), df / 2.0, 0.5)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by its continued fraction (modified Lentz), on the side where it converges."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, _BETA_ITERATIONS + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < _BETA_EPSILON:
            break
    return fraction
