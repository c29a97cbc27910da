"""Committee votes on a pair from two stored rewards, and a vote's credit against a label."""

import math

import numpy as np
import pytest

from graders.engine.active.votes import discriminating, pair_votes, vote_credit

NAN = math.nan


def test_votes_follow_the_difference_beyond_tol_and_abstain_on_failed_grades() -> None:
    score_a = np.array([[0.9, 0.5, NAN], [0.2, 0.6, 0.4]])
    score_b = np.array([[0.7, 0.55, 0.3], [0.3, 0.5, 0.5]])

    votes = pair_votes(score_a, score_b, tol=0.1)

    # 0.9 - 0.7 = 0.2 > 0.1: +1; 0.5 - 0.55 within 0.1: 0; NaN: 0. Row 2 differences are
    # -0.1, 0.1 and -0.1 up to float error: exactly at tol, so ties.
    assert votes.tolist() == [[1, 0, 0], [0, 0, 0]]
    assert votes.dtype == np.int64
    # With tol 0 (win rates) any difference is a vote.
    assert pair_votes(score_a, score_b, tol=0.0).tolist() == [[1, -1, 0], [-1, 1, -1]]


def test_votes_reject_mismatched_shapes_and_bad_tol() -> None:
    with pytest.raises(ValueError, match="score_a has shape"):
        pair_votes(np.zeros((2, 3)), np.zeros((2, 2)), tol=0.1)
    with pytest.raises(ValueError, match="tol"):
        pair_votes(np.zeros((2, 3)), np.zeros((2, 3)), tol=-0.1)


def test_credit_is_one_for_the_labeled_side_half_for_a_tie_zero_for_the_other() -> None:
    votes = np.array([1, 0, -1])

    assert vote_credit(votes, 1).tolist() == [1.0, 0.5, 0.0]
    assert vote_credit(votes, -1).tolist() == [0.0, 0.5, 1.0]


def test_a_pair_discriminates_when_any_vote_differs() -> None:
    votes = np.array([[1, 1, 1], [0, 0, 0], [1, 1, 0], [-1, 1, -1]])

    assert discriminating(votes).tolist() == [False, False, True, True]
