"""Inverse-propensity and LURE means over actively chosen labels: hand-computed cases and
unbiasedness."""

import itertools
import math

import numpy as np
import pytest

from graders.engine.active.estimators import ipw_mean, lure_mean, successive_pick_probabilities
from graders.engine.active.sampling import sampling_priorities, selection_probabilities

NAN = math.nan


def test_ipw_mean_weights_by_inverse_pool_times_probability() -> None:
    values = np.array([1.0, 0.0, 1.0])
    probabilities = np.array([0.5, 0.1, NAN])
    pools = np.array([4.0, 4.0, NAN])

    # w = [1 / (4 * 0.5), 1 / (4 * 0.1), 1 (not drawn)] = [0.5, 2.5, 1];
    # (0.5 * 1 + 2.5 * 0 + 1 * 1) / (0.5 + 2.5 + 1) = 1.5 / 4 = 0.375.
    assert ipw_mean(values, probabilities, pools) == pytest.approx(0.375)


def test_ipw_mean_of_uniform_draws_is_the_plain_mean() -> None:
    values = np.array([1.0, 0.0, 0.5, 1.0])

    assert ipw_mean(values, np.full(4, 0.1), np.full(4, 10.0)) == pytest.approx(0.625)


def test_ipw_mean_rejects_bad_input_by_name() -> None:
    with pytest.raises(ValueError, match="probabilities must be in"):
        ipw_mean(np.array([1.0]), np.array([1.5]), np.array([2.0]))
    with pytest.raises(ValueError, match="pool_sizes"):
        ipw_mean(np.array([1.0]), np.array([0.5]), np.array([0.0]))
    with pytest.raises(ValueError, match="one length"):
        ipw_mean(np.array([1.0, 0.0]), np.array([0.5]), np.array([2.0]))
    with pytest.raises(ValueError, match="values must be a non-empty"):
        ipw_mean(np.array([]), np.array([]), np.array([]))


def test_lure_mean_hand_computed() -> None:
    # N = 5, M = 2, q = [0.5, 0.25]:
    # v_1 = 1 + (5 - 2) / (5 - 1) * (1 / (5 * 0.5) - 1) = 1 + 0.75 * (0.4 - 1) = 0.55;
    # v_2 = 1 + (5 - 2) / (5 - 2) * (1 / (4 * 0.25) - 1) = 1 + 1 * 0 = 1;
    # estimate = (0.55 * 1 + 1 * 0) / 2 = 0.275.
    assert lure_mean(np.array([1.0, 0.0]), np.array([0.5, 0.25]), 5) == pytest.approx(0.275)


def test_lure_mean_of_the_whole_pool_is_the_plain_mean() -> None:
    # M = N: no 0 / 0 at m = N, every weight is 1.
    assert lure_mean(np.array([1.0, 0.0, 1.0]), np.array([0.2, 0.5, 1.0]), 3) == pytest.approx(
        2 / 3
    )


def test_lure_mean_rejects_a_pool_smaller_than_the_labels() -> None:
    with pytest.raises(ValueError, match="pool_size"):
        lure_mean(np.array([1.0, 0.0]), np.array([0.5, 0.5]), 1)
    with pytest.raises(ValueError, match="probabilities"):
        lure_mean(np.array([1.0]), np.array([0.0]), 3)


def test_successive_pick_probabilities_renormalize_over_the_pairs_left() -> None:
    q = np.array([0.5, 0.3, 0.2])

    # Pick 1 from all: 0.3; then 0 from {0, 2}: 0.5 / 0.7; then 2 alone: 1.
    assert successive_pick_probabilities(q, np.array([1, 0, 2])) == pytest.approx(
        [0.3, 0.5 / 0.7, 1.0]
    )
    with pytest.raises(ValueError, match="distinct"):
        successive_pick_probabilities(q, np.array([1, 1]))


def test_lure_is_exactly_unbiased_over_every_ordered_draw() -> None:
    values = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    q = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    labeled = 3

    expectation = 0.0
    for order in itertools.permutations(range(values.size), labeled):
        picks = np.array(order)
        probabilities = successive_pick_probabilities(q, picks)
        expectation += float(np.prod(probabilities)) * lure_mean(
            values[picks], probabilities, values.size
        )

    assert expectation == pytest.approx(values.mean(), abs=1e-12)


def test_reweighting_removes_the_bias_of_active_picks() -> None:
    # A pool whose high-value pairs are more likely to be picked (as a value that tracks the
    # metric would make them): the plain mean of the picks is biased upwards. Self-normalized
    # IPW is off by O(1 / labeled) and LURE is exact, so both land near the pool mean.
    rng = np.random.default_rng(0)
    pool = 400
    values = rng.random(pool)
    q = selection_probabilities(values, epsilon=0.1)
    labeled, repeats = 40, 3000
    plain, reweighted, lure = [], [], []
    for _ in range(repeats):
        picks = np.argsort(-sampling_priorities(q, rng))[:labeled]
        plain.append(values[picks].mean())
        reweighted.append(ipw_mean(values[picks], q[picks], np.full(labeled, float(pool))))
        lure.append(lure_mean(values[picks], successive_pick_probabilities(q, picks), pool))

    truth = values.mean()
    assert np.mean(plain) - truth > 0.1
    assert abs(np.mean(reweighted) - truth) < 0.01
    assert abs(np.mean(lure) - truth) < 0.005
