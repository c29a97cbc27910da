"""Selection probabilities with an epsilon share drawn uniformly, and priorities whose order is
a draw from them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from graders.engine.active.sampling import sampling_priorities, selection_probabilities

property_settings = settings(database=None, deadline=None, max_examples=80)


def test_selection_probabilities_mix_values_with_a_uniform_share() -> None:
    values = np.array([3.0, 1.0, 0.0, 0.0])

    # 0.8 * [3/4, 1/4, 0, 0] + 0.2 / 4 = [0.65, 0.25, 0.05, 0.05].
    assert selection_probabilities(values, epsilon=0.2) == pytest.approx([0.65, 0.25, 0.05, 0.05])
    # Squared: [9, 1, 0, 0] / 10, so 0.8 * [0.9, 0.1, 0, 0] + 0.05.
    assert selection_probabilities(values, epsilon=0.2, sharpness=2.0) == pytest.approx(
        [0.77, 0.13, 0.05, 0.05]
    )


def test_epsilon_one_and_all_zero_values_give_exactly_uniform() -> None:
    uniform = np.full(4, 0.25)

    assert np.array_equal(selection_probabilities(np.array([3.0, 1, 0, 0]), epsilon=1.0), uniform)
    assert np.array_equal(selection_probabilities(np.zeros(4), epsilon=0.0), uniform)
    assert selection_probabilities(np.zeros(0), epsilon=0.1).size == 0


@property_settings
@given(
    hnp.arrays(np.float64, st.integers(1, 50), elements=st.floats(0, 1e6)),
    st.floats(0, 1),
    st.floats(0.1, 8),
)
def test_selection_probabilities_sum_to_one_and_stay_positive_with_epsilon(
    values: np.ndarray, epsilon: float, sharpness: float
) -> None:
    q = selection_probabilities(values, epsilon=epsilon, sharpness=sharpness)

    assert q.sum() == pytest.approx(1.0, abs=1e-9)
    assert (q >= epsilon / values.size * (1 - 1e-12)).all()


@pytest.mark.parametrize(
    ("values", "arguments", "named"),
    [
        ([1.0, 2.0], {"epsilon": -0.1}, "epsilon"),
        ([1.0, 2.0], {"epsilon": 1.5}, "epsilon"),
        ([1.0, float("nan")], {"epsilon": 0.1}, "values"),
        ([1.0, -2.0], {"epsilon": 0.1}, "values"),
        ([1.0, 2.0], {"epsilon": 0.1, "sharpness": 0.0}, "sharpness"),
    ],
)
def test_selection_probabilities_name_the_bad_argument(
    values: list[float], arguments: dict[str, float], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        selection_probabilities(np.array(values), **arguments)


def test_first_served_frequencies_match_q() -> None:
    q = np.array([0.5, 0.3, 0.15, 0.05])
    draws = 20_000
    rng = np.random.default_rng(0)
    first = np.empty(draws, dtype=np.int64)
    first_two = np.zeros((4, 4))
    for draw in range(draws):
        order = np.argsort(-sampling_priorities(q, rng))
        first[draw] = order[0]
        first_two[order[0], order[1]] += 1

    observed = np.bincount(first, minlength=4)
    chi_square = float((((observed - draws * q) ** 2) / (draws * q)).sum())
    # 3 degrees of freedom: P(chi-square > 16.27) = 0.001.
    assert chi_square < 16.27
    # A draw without replacement: P(first 0, then 1) = 0.5 * 0.3 / (1 - 0.5) = 0.3.
    assert first_two[0, 1] / draws == pytest.approx(0.3, abs=0.015)


def test_priorities_are_at_most_zero_and_a_zero_q_comes_last() -> None:
    priorities = sampling_priorities(np.array([0.6, 0.4, 0.0]), np.random.default_rng(1))

    assert (priorities[:2] <= 0).all()
    assert priorities[2] == -np.inf
    with pytest.raises(ValueError, match="q must hold"):
        sampling_priorities(np.array([0.5, -0.1]), np.random.default_rng(1))
