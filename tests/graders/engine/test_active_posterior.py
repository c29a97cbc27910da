"""Posteriors over candidates' accuracies, P(best), entropy and labels to decide, against
hand-computed cases, quadrature and a seeded Monte Carlo."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from graders.engine.active.posterior import (
    Posterior,
    entropy,
    labels_to_decide,
    p_best,
    posterior_from_labels,
)

property_settings = settings(database=None, deadline=None, max_examples=60)


def posterior(alpha: list[float], beta: list[float]) -> Posterior:
    return Posterior(alpha=np.array(alpha), beta=np.array(beta))


def quadrature_p_best(alpha: list[float], beta: list[float]) -> list[float]:
    """The integral of f_k * prod_{j != k} F_j, by scipy's adaptive quadrature."""

    def integrand(x: float, k: int) -> float:
        others = [
            stats.beta.cdf(x, a, b)
            for j, (a, b) in enumerate(zip(alpha, beta, strict=True))
            if j != k
        ]
        return float(stats.beta.pdf(x, alpha[k], beta[k]) * np.prod(others))

    return [
        integrate.quad(integrand, 0, 1, args=(k,), limit=500, epsabs=1e-12)[0]
        for k in range(len(alpha))
    ]


def test_posterior_counts_credit_on_discriminating_pairs_only() -> None:
    votes = np.array([[1, 1, 1], [1, -1, 0], [-1, -1, 1], [0, 0, 0]])
    labels = np.array([1, 1, -1, -1])

    result = posterior_from_labels(votes, labels)

    # Rows 0 and 3 are unanimous and count for nothing: n = 2. Row 1 (label +1) credits
    # [1, 0, 0.5], row 2 (label -1) credits [1, 1, 0]: c = [2, 1, 0.5].
    # alpha = 1 + c = [3, 2, 1.5]; beta = 1 + n - c = [1, 2, 2.5].
    assert result.alpha.tolist() == [3.0, 2.0, 1.5]
    assert result.beta.tolist() == [1.0, 2.0, 2.5]
    prior_half = posterior_from_labels(votes, labels, prior=0.5)
    assert prior_half.alpha.tolist() == [2.5, 1.5, 1.0]


def test_posterior_from_labels_rejects_bad_input_by_name() -> None:
    votes = np.array([[1, -1], [0, 1]])
    with pytest.raises(ValueError, match="labels must be"):
        posterior_from_labels(votes, np.array([1, 0]))
    with pytest.raises(ValueError, match="one entry per row"):
        posterior_from_labels(votes, np.array([1]))
    with pytest.raises(ValueError, match="prior"):
        posterior_from_labels(votes, np.array([1, -1]), prior=0.0)
    with pytest.raises(ValueError, match="votes must hold"):
        posterior_from_labels(np.array([[2, 0]]), np.array([1]))
    with pytest.raises(ValueError, match="alpha and beta must be positive"):
        posterior([1.0, 0.0], [1.0, 1.0])


def test_p_best_of_two_candidates_matches_closed_forms() -> None:
    # Beta(2, 1) has density 2x; against a uniform, P(X > Y) = integral of 2x * x = 2/3.
    assert p_best(posterior([2, 1], [1, 1])) == pytest.approx([2 / 3, 1 / 3], abs=1e-5)
    # Against Beta(1, 2), whose CDF is 2y - y^2: integral of 2x (2x - x^2) = 4/3 - 1/2 = 5/6.
    assert p_best(posterior([2, 1], [1, 2])) == pytest.approx([5 / 6, 1 / 6], abs=1e-5)


def test_symmetric_candidates_get_equal_p_best() -> None:
    three = p_best(posterior([5, 5, 5], [3, 3, 3]))
    assert three == pytest.approx([1 / 3] * 3, abs=1e-12)

    mixed = p_best(posterior([12, 7, 12, 7], [4, 9, 4, 9]))
    assert mixed[0] == pytest.approx(mixed[2], abs=1e-12)
    assert mixed[1] == pytest.approx(mixed[3], abs=1e-12)
    assert mixed.sum() == pytest.approx(1.0, abs=1e-12)


def test_a_single_candidate_is_surely_best() -> None:
    assert p_best(posterior([3], [2])).tolist() == [1.0]


def test_a_dominant_candidate_is_nearly_surely_best() -> None:
    result = p_best(posterior([200, 10, 12], [10, 200, 198]))

    assert result[0] > 1 - 1e-9


@pytest.mark.parametrize(
    ("alpha", "beta", "tolerance"),
    [
        ([3, 5, 2], [4, 2, 6], 5e-5),
        ([30, 28, 25], [12, 14, 17], 5e-5),
        ([300, 290, 280, 299], [100, 110, 120, 101], 5e-5),
        ([1.5, 1, 2], [1, 1.5, 1], 5e-5),
        # An outsider far to the left: the cells where nobody can be best are dropped.
        ([200, 190, 20], [100, 110, 280], 5e-5),
        # A density infinite at 0 and one at 1 (a prior below 1 with no credit).
        ([0.5, 1], [3, 0.5], 5e-4),
    ],
)
def test_p_best_agrees_with_quadrature(
    alpha: list[float], beta: list[float], tolerance: float
) -> None:
    expected = quadrature_p_best(alpha, beta)
    assert p_best(posterior(alpha, beta)) == pytest.approx(expected, abs=tolerance)


def test_p_best_agrees_with_a_seeded_monte_carlo() -> None:
    alpha, beta = np.array([14.0, 12.5, 11.0, 9.0]), np.array([6.0, 7.5, 9.0, 11.0])
    draws = 4_000_000
    rng = np.random.default_rng(0)
    samples = rng.beta(alpha, beta, size=(draws, alpha.size))
    monte_carlo = np.bincount(samples.argmax(axis=1), minlength=alpha.size) / draws

    # The Monte Carlo's standard error is at most sqrt(0.25 / 4M) = 0.00025.
    assert p_best(Posterior(alpha, beta)) == pytest.approx(monte_carlo, abs=1e-3)


@property_settings
@given(st.lists(st.tuples(st.floats(0.3, 400), st.floats(0.3, 400)), min_size=1, max_size=12))
def test_p_best_is_a_distribution(parameters: list[tuple[float, float]]) -> None:
    alpha, beta = (np.array(column) for column in zip(*parameters, strict=True))

    result = p_best(Posterior(alpha, beta))

    assert np.isfinite(result).all()
    assert (result >= 0).all()
    assert result.sum() == pytest.approx(1.0, abs=1e-9)
    assert entropy(result) >= 0


def test_entropy_in_nats_with_zero_log_zero() -> None:
    assert entropy(np.array([0.5, 0.5])) == pytest.approx(math.log(2))
    assert entropy(np.array([0.25] * 4)) == pytest.approx(math.log(4))
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0


def test_labels_to_decide_at_the_current_rate_of_information() -> None:
    p = np.array([0.5, 0.3, 0.2])

    # H(p) = -(0.5 ln 0.5 + 0.3 ln 0.3 + 0.2 ln 0.2) = 1.029653;
    # H_0.9 = -(0.9 ln 0.9 + 2 * 0.05 ln 0.05) = 0.394398; (1.029653 - 0.394398) / 0.1 = 6.3526.
    h_p = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    h_threshold = -(0.9 * math.log(0.9) + 2 * 0.05 * math.log(0.05))
    assert labels_to_decide(p, 0.1) == pytest.approx((h_p - h_threshold) / 0.1)
    assert labels_to_decide(p, 0.1) == pytest.approx(6.3526, abs=1e-4)


def test_labels_to_decide_edges() -> None:
    assert labels_to_decide(np.array([0.92, 0.05, 0.03]), 0.1) == 0.0
    assert labels_to_decide(np.array([0.6, 0.4]), 0.0) is None
    assert labels_to_decide(np.array([0.6, 0.4]), 0.05, threshold=0.6) == 0.0
    # Below H_0.9 without a decision (the rest on one runner-up): the information is spent.
    assert labels_to_decide(np.array([0.85, 0.15, 0.0, 0.0, 0.0]), 0.1) == 0.0
    with pytest.raises(ValueError, match="threshold"):
        labels_to_decide(np.array([0.6, 0.4]), 0.1, threshold=1.5)
