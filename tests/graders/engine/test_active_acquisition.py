"""Acquisition values: information gain about the best candidate, vote entropy, margin, harm
potential and coverage."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import integrate, stats

from graders.engine.active.acquisition import (
    coverage_value,
    harm_potential,
    information_gain,
    margin_value,
    vote_entropy,
)
from graders.engine.active.posterior import Posterior, p_best

NAN = math.nan
property_settings = settings(database=None, deadline=None, max_examples=60)


def two_candidate_p_best(alpha: list[float], beta: list[float]) -> float:
    """P(X_0 > X_1) for independent Betas, by quadrature."""

    def integrand(x: float) -> float:
        return float(stats.beta.pdf(x, alpha[0], beta[0]) * stats.beta.cdf(x, alpha[1], beta[1]))

    return float(integrate.quad(integrand, 0, 1, epsabs=1e-12)[0])


def binary_divergence(p: float, q: float) -> float:
    """KL((p, 1 - p) || (q, 1 - q)) in nats."""
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


def test_a_pair_every_candidate_votes_the_same_way_is_worth_exactly_zero() -> None:
    posterior = Posterior(alpha=np.array([6.0, 5.0, 3.0]), beta=np.array([3.0, 4.0, 6.0]))
    votes = np.array([[1, 1, 1], [0, 0, 0], [-1, -1, -1], [1, -1, 0]])

    gain = information_gain(posterior, votes)

    assert gain[:3].tolist() == [0.0, 0.0, 0.0]
    assert gain[3] > 0


def test_information_gain_follows_its_definition_for_two_candidates() -> None:
    alpha, beta = [4.0, 3.0], [2.0, 3.0]
    posterior = Posterior(alpha=np.array(alpha), beta=np.array(beta))

    gain = information_gain(posterior, np.array([[1, -1]]), smoothing=0.1)[0]

    # Label +1 credits candidate 0 (alpha 4 -> 5) and not candidate 1 (beta 3 -> 4); label -1
    # the other way round. P(+1) = 0.9 * (P_best(0) * 1 + P_best(1) * 0) + 0.1 * 0.5.
    # The gain is P(+1) KL(P_best | +1 || P_best) + P(-1) KL(P_best | -1 || P_best).
    now = two_candidate_p_best(alpha, beta)
    if_a = two_candidate_p_best([5.0, 3.0], [2.0, 4.0])
    if_b = two_candidate_p_best([4.0, 4.0], [3.0, 3.0])
    p_a = 0.9 * now + 0.05
    expected = p_a * binary_divergence(if_a, now) + (1 - p_a) * binary_divergence(if_b, now)
    assert expected > 0.01
    assert gain == pytest.approx(expected, rel=1e-3)


def test_information_gain_matches_p_best_of_each_updated_posterior() -> None:
    # Four candidates, ties among the votes: the shared grid and the per-vote levels must give
    # what p_best gives on each posterior after the label, computed one by one.
    alpha, beta = np.array([9.0, 8.5, 6.0, 7.0]), np.array([4.0, 4.5, 7.0, 6.0])
    posterior = Posterior(alpha=alpha, beta=beta)
    votes = np.array([[1, -1, 0, 1], [0, 1, -1, 0], [-1, 0, 0, 1]])
    now = p_best(posterior)

    expected = []
    for row in votes:
        credit_if_a = (1 + row) / 2
        outcomes = []
        for credit in (credit_if_a, 1 - credit_if_a):
            after = p_best(Posterior(alpha=alpha + credit, beta=beta + 1 - credit))
            outcomes.append(float((after * np.log(after / now)).sum()))
        p_a = 0.9 * float((now * credit_if_a).sum()) + 0.05
        expected.append(p_a * outcomes[0] + (1 - p_a) * outcomes[1])

    assert information_gain(posterior, votes) == pytest.approx(expected, rel=1e-3)


def test_a_pair_where_the_leader_abstains_and_the_runner_up_commits_is_worth_a_label() -> None:
    # P(best) = [0.711, 0.289]. The leader ties, the runner-up votes b: P(b better) =
    # 0.9 * (0.711 * 0.5 + 0.289 * 1) + 0.05 = 0.63, and either outcome moves P(best). The
    # entropy difference H(P_best) - E[H(P_best | y)] is -0.0135 here (the likelier outcome
    # raises the entropy), which clipped to 0 would never serve the pair.
    posterior = Posterior(alpha=np.array([21.0, 22.0]), beta=np.array([7.0, 10.0]))

    gain = information_gain(posterior, np.array([[0, -1]]))[0]

    assert gain == pytest.approx(0.0055, abs=2e-4)


def test_a_pair_between_the_leaders_is_worth_more_than_one_against_an_outsider() -> None:
    posterior = Posterior(alpha=np.array([20.0, 20.0, 2.0]), beta=np.array([10.0, 10.0, 30.0]))
    votes = np.array([[1, -1, 1], [1, 1, -1]])

    leaders, outsider = information_gain(posterior, votes)

    assert leaders > 10 * outsider


@property_settings
@given(
    st.integers(2, 6).flatmap(
        lambda k: st.tuples(
            hnp.arrays(np.float64, k, elements=st.floats(0.5, 80)),
            hnp.arrays(np.float64, k, elements=st.floats(0.5, 80)),
            hnp.arrays(np.int64, (12, k), elements=st.integers(-1, 1)),
        )
    ),
    st.floats(0, 1),
)
def test_information_gain_is_non_negative_and_shared_by_vote_pattern(
    case: tuple[np.ndarray, np.ndarray, np.ndarray], smoothing: float
) -> None:
    alpha, beta, votes = case
    posterior = Posterior(alpha=alpha, beta=beta)

    gain = information_gain(posterior, votes, smoothing=smoothing)

    assert np.isfinite(gain).all()
    assert (gain >= 0).all()
    unanimous = (votes == votes[:, :1]).all(axis=1)
    assert (gain[unanimous] == 0).all()
    # The pattern cache changes nothing: each pair alone gets the value it gets in the batch.
    one_by_one = [
        information_gain(posterior, row[None, :], smoothing=smoothing)[0] for row in votes
    ]
    assert gain == pytest.approx(one_by_one, abs=1e-12)


def test_information_gain_rejects_votes_for_other_candidates() -> None:
    posterior = Posterior(alpha=np.array([2.0, 2.0]), beta=np.array([2.0, 2.0]))
    with pytest.raises(ValueError, match="votes has 3 candidates and the posterior 2"):
        information_gain(posterior, np.array([[1, 0, -1]]))
    with pytest.raises(ValueError, match="smoothing"):
        information_gain(posterior, np.array([[1, 0]]), smoothing=1.5)


def test_vote_entropy_of_the_shares_of_each_vote() -> None:
    votes = np.array([[1, 1, 0, -1], [1, 1, 1, 1], [1, 0, -1, 0]])

    # Shares (1/2, 1/4, 1/4): 1/2 ln 2 + 2 * 1/4 ln 4 = 1.5 ln 2. Unanimous: 0.
    # (1/4, 1/2, 1/4) again 1.5 ln 2.
    assert vote_entropy(votes) == pytest.approx([1.5 * math.log(2), 0.0, 1.5 * math.log(2)])
    assert vote_entropy(np.array([[1, 0, -1]]))[0] == pytest.approx(math.log(3))


def test_margin_value_prefers_close_calls() -> None:
    score_a = np.array([0.9, 0.2, NAN, 0.0, 1.5])
    score_b = np.array([0.7, 0.2, 0.5, 1.0, 0.0])

    # 1 - 0.2; 1 - 0; a failed grade: 1; 1 - 1; 1 - min(1, 1.5).
    assert margin_value(score_a, score_b) == pytest.approx([0.8, 1.0, 1.0, 0.0, 0.0])


def test_harm_potential_marks_pairs_that_straddle_the_group_mean() -> None:
    score_a = np.array([0.9, 0.9, 0.5, 0.3, 0.2])
    score_b = np.array([0.2, 0.6, 0.5, NAN, 0.7])
    mean = np.array([0.5, 0.5, 0.5, 0.5, 0.4])

    # (0.4)(-0.3) < 0; (0.4)(0.1) > 0; 0 * 0 is not < 0; NaN; (-0.2)(0.3) < 0.
    assert harm_potential(score_a, score_b, mean).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert harm_potential(score_a, score_b, 0.5).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_coverage_value_puts_thin_groups_first() -> None:
    assert coverage_value(np.array([0, 1, 3])).tolist() == [1.0, 0.5, 0.25]
    with pytest.raises(ValueError, match="labels_in_group"):
        coverage_value(np.array([1, -1]))


def test_score_based_values_reject_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="score_a"):
        margin_value(np.zeros(2), np.zeros(3))
