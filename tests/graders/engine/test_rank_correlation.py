"""Spearman's rho with its p value (exact for a few evaluators, the t approximation past
EXACT_MAX_N) and Holm's correction, pinned by hand and checked against scipy."""

import pytest
from scipy import stats

from graders.engine.rank_correlation import EXACT_MAX_N, holm, spearman


def test_four_evaluators_by_hand() -> None:
    # Ranks 1 2 3 4 against 1 3 2 4: d^2 sums to 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8.
    # Of the 24 orderings, |rho| >= 0.8 for the identity, the 3 adjacent swaps (rho 0.8), the
    # reversal and its 3 adjacent swaps (rho -1 and -0.8): 8 / 24.
    result = spearman([0.1, 0.2, 0.3, 0.4], [10, 30, 20, 40])
    assert result.rho == pytest.approx(0.8)
    assert result.p == pytest.approx(1 / 3)
    assert (result.n, result.method) == (4, "exact")


def test_a_perfect_anticorrelation_of_five_by_hand() -> None:
    # Only the identity and the reversal reach |rho| = 1: 2 / 120.
    result = spearman([0.5, 0.4, 0.3, 0.2, 0.1], [1, 2, 3, 4, 5])
    assert result.rho == pytest.approx(-1.0)
    assert result.p == pytest.approx(1 / 60)


def test_ties_take_their_average_rank_by_hand() -> None:
    # y's ranks are 1.5 1.5 3 4.5 4.5; centered x -2..2, y -1.5 -1.5 0 1.5 1.5: covariance sum 9,
    # squares 10 and 9, rho = 9 / sqrt(90).
    result = spearman([1, 2, 3, 4, 5], [0.2, 0.2, 0.5, 0.9, 0.9])
    assert result.rho == pytest.approx(9 / 90**0.5)
    assert result.rho == pytest.approx(
        stats.spearmanr([1, 2, 3, 4, 5], [0.2, 0.2, 0.5, 0.9, 0.9])[0]
    )


def test_past_the_exact_limit_p_is_the_t_approximation_scipy_reports() -> None:
    x = [0.81, 0.64, 0.77, 0.52, 0.70, 0.45, 0.66, 0.38, 0.59, 0.71, 0.49]
    y = [0.05, 0.22, 0.09, 0.31, 0.12, 0.40, 0.22, 0.57, 0.18, 0.02, 0.35]
    assert len(x) > EXACT_MAX_N
    result = spearman(x, y)
    reference = stats.spearmanr(x, y)
    assert result.method == "t"
    assert result.rho == pytest.approx(reference.statistic)
    assert result.p == pytest.approx(reference.pvalue, rel=1e-9)


@pytest.mark.parametrize("rho_sign", [1, -1])
def test_t_p_values_match_scipy_over_a_range_of_sizes(rho_sign: int) -> None:
    for n in (9, 12, 25, 60):
        x = list(range(n))
        y = [rho_sign * ((i * 7) % n + 0.3 * i) for i in range(n)]
        result, reference = spearman(x, y), stats.spearmanr(x, y)
        assert result.p == pytest.approx(reference.pvalue, rel=1e-8, abs=1e-300)


def test_undefined_cases_have_no_rho() -> None:
    assert spearman([0.1, 0.2], [1, 2]).rho is None  # too few
    constant = spearman([0.5, 0.5, 0.5], [1, 2, 3])
    assert (constant.rho, constant.p) == (None, None)
    with pytest.raises(ValueError, match="x has 2 values and y 3"):
        spearman([1, 2], [1, 2, 3])


def test_holm_by_hand() -> None:
    # Sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> made non-decreasing: 0.06.
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
