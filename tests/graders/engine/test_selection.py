"""Selection rules of graders/engine/selection.py, pinned on tiny hand-computed matrices."""

import numpy as np
import pytest

from graders.engine.metrics import (
    RankingPairs,
    task_bootstrap_ci,
    tolerant_credit_by_task,
    tolerant_ranking_accuracy,
)
from graders.engine.selection import (
    SelectionInput,
    SelectionRule,
    best_index,
    bootstrap_lower_bounds,
    bootstrap_p_best,
    selection_select,
    thresholdout_answers,
    untouched_tasks,
)

# untouched_tasks(np.arange(1, 11), seed=0), pinned: a change of hash would move the tasks of
# every stored search to the other part. The hash positions of tasks 1..10 are 0.946, 0.810,
# 0.028, 0.560, 0.384, 0.833, 0.094, 0.213, 0.116, 0.650; untouched is position >= 1 - 0.2 =
# 0.8: tasks 1, 2 and 6.
SPLIT_SEED_0 = [True, True, False, False, False, True, False, False, False, False]


def data(
    credit: list[list[float]],
    pairs: list[float],
    *,
    tasks: list[int] | None = None,
    cost: list[float] | None = None,
    seed: int = 0,
) -> SelectionInput:
    return SelectionInput(
        credit=np.array(credit, dtype=np.float64),
        pairs=np.array(pairs, dtype=np.float64),
        tasks=np.array(tasks if tasks is not None else range(1, len(pairs) + 1), dtype=np.int64),
        cost=np.array(cost if cost is not None else [0.0] * len(credit), dtype=np.float64),
        seed=seed,
    )


def test_argmax_picks_the_highest_point_estimate() -> None:
    # A: (2 + 1) / (2 + 2) = 0.75; B: (1 + 2) / 4 = 0.75 (a tie); C: (2 + 2) / 4 = 1.0.
    selection = selection_select(SelectionRule.ARGMAX, data([[2, 1], [1, 2], [2, 2]], [2, 2]))
    assert selection.score.tolist() == [0.75, 0.75, 1.0]
    assert selection.feedback.tolist() == selection.pick.tolist() == [0.75, 0.75, 1.0]
    assert selection.winner == 2 and selection.untouched is None
    assert selection.estimate == 1.0


def test_ties_go_to_the_cheaper_candidate_then_to_the_earlier_one() -> None:
    values = np.array([0.8, 0.7 + 0.1, 0.8, 0.5])  # 0.7 + 0.1 is 0.7999999999999999
    assert best_index(values, np.array([2.0, 1.0, 1.0, 0.0])) == 1  # cheapest of the tied
    assert best_index(values, np.array([1.0, 1.0, 1.0, 0.0])) == 0  # then the earliest
    assert best_index(np.array([np.nan, 0.1]), np.zeros(2)) == 1  # NaN never wins
    with pytest.raises(ValueError, match="no candidate has a value"):
        best_index(np.array([np.nan]), np.zeros(1))


def test_lower_bound_prefers_a_steady_candidate_to_a_lucky_one() -> None:
    # Four tasks of one pair each. A earns 0.5 on every task: every resample gives 0.5, so its
    # 2.5 percentile is 0.5. B earns 1, 1, 0, 0.5: point 2.5 / 4 = 0.625 > 0.5, but a resample
    # of 4 tasks averages <= 0.25 with probability (draws from {0, 0.5} summing to <= 1:
    # (1 + 4 + 6) / 256, plus one 1 and three 0s: 4 * (1/2) * (1/4)^3 = 8 / 256) = 19 / 256
    # = 0.074 > 0.025, so B's 2.5 percentile is at most 0.25.
    inputs = data([[0.5, 0.5, 0.5, 0.5], [1, 1, 0, 0.5]], [1, 1, 1, 1])
    assert selection_select(SelectionRule.ARGMAX, inputs).winner == 1
    selection = selection_select(SelectionRule.LOWER_BOUND, inputs)
    assert selection.pick[0] == pytest.approx(0.5) and selection.pick[1] <= 0.25
    assert selection.winner == 0
    # The proposer is still told the point estimate, and so is the page.
    assert selection.feedback.tolist() == [0.5, 0.625] and selection.estimate == 0.5


def test_a_lower_bound_is_the_low_end_of_the_candidates_own_task_bootstrap_interval() -> None:
    rng = np.random.default_rng(5)
    pairs = rng.integers(1, 6, size=7).astype(np.float64)
    credit = np.floor(rng.random((3, 7)) * (2 * pairs + 1)) / 2  # 0, 0.5, ... up to the pairs
    bounds = bootstrap_lower_bounds(credit, pairs)
    for row, bound in zip(credit, bounds, strict=True):
        assert bound == pytest.approx(task_bootstrap_ci(row, pairs).low)


def test_p_best_is_the_share_of_joint_draws_won_with_ties_split() -> None:
    # Two tasks of one pair each; A earns 1, 1 and B earns 1, 0. A draw of two tasks is
    # (t1, t1) with probability 1/4 (a tie, A gets half), else A leads: P(A best) =
    # 1/4 * 1/2 + 3/4 = 0.875 and P(B best) = 0.125, up to the 10,000 draws' sampling error
    # (sd sqrt(0.875 * 0.125 / 10,000) = 0.0033 at most).
    p_best = bootstrap_p_best(np.array([[1.0, 1.0], [1.0, 0.0]]), np.array([1.0, 1.0]))
    assert p_best.sum() == pytest.approx(1.0)
    assert p_best[0] == pytest.approx(0.875, abs=0.012)
    selection = selection_select(SelectionRule.P_BEST, data([[1, 1], [1, 0]], [1, 1]))
    assert selection.winner == 0 and selection.pick.tolist() == p_best.tolist()


def test_p_best_splits_every_draw_between_identical_candidates() -> None:
    p_best = bootstrap_p_best(np.array([[1.0, 0.0, 2.0]] * 2), np.array([1.0, 1.0, 2.0]))
    assert p_best.tolist() == [0.5, 0.5]


def test_the_split_is_deterministic_about_a_fifth_and_stable_when_tasks_are_added() -> None:
    assert untouched_tasks(np.arange(1, 11), 0).tolist() == SPLIT_SEED_0
    many = untouched_tasks(np.arange(1, 1001), 0)
    assert 170 <= many.sum() <= 230  # UNTOUCHED_SHARE 0.2 of 1000 is 200
    # Adding tasks 1001..1100 moves none of the first thousand.
    assert untouched_tasks(np.arange(1, 1101), 0)[:1000].tolist() == many.tolist()
    assert untouched_tasks(np.arange(1, 1001), 1).tolist() != many.tolist()  # seeded


def test_a_split_that_hashes_to_one_side_moves_one_task_across() -> None:
    # Tasks 3 and 5 are both feedback tasks with seed 0 (SPLIT_SEED_0), so one must cross.
    split = untouched_tasks(np.array([3, 5]), 0)
    assert sorted(split.tolist()) == [False, True]
    with pytest.raises(ValueError, match="at least two D_selection tasks"):
        untouched_tasks(np.array([3]), 0)


def test_holdout_tells_the_feedback_part_and_picks_on_the_untouched_part_of_a_shortlist() -> None:
    # Tasks 1..4 with seed 0: 1 and 2 are untouched (positions 0.946, 0.810 >= 0.8), 3 and 4
    # the feedback part (0.028, 0.560). One pair each.
    # Feedback (tasks 3, 4): A (1 + 1) / 2 = 1.0, B (1 + 0.5) / 2 = 0.75, C (0.5 + 0.5) / 2
    # = 0.5, D (0 + 0.5) / 2 = 0.25; the shortlist of two: A, B.
    # Untouched (tasks 1, 2): A 0.0, B (1 + 0.5) / 2 = 0.75, C (1 + 1) / 2 = 1.0 (best there,
    # but third by feedback), D 0.0.
    assert untouched_tasks(np.array([1, 2, 3, 4]), 0).tolist() == [True, True, False, False]
    inputs = data([[0, 0, 1, 1], [1, 0.5, 1, 0.5], [1, 1, 0.5, 0.5], [0, 0, 0, 0.5]], [1, 1, 1, 1])
    selection = selection_select(SelectionRule.HOLDOUT, inputs)
    assert selection.feedback.tolist() == [1.0, 0.75, 0.5, 0.25]
    assert selection.untouched is not None
    assert selection.untouched.tolist() == [0.0, 0.75, 1.0, 0.0]
    assert selection.pick[:2].tolist() == [0.0, 0.75]
    assert np.isnan(selection.pick[2:]).all()
    assert selection.winner == 1 and selection.estimate == 0.75
    # On all four tasks: A 2 / 4, B 3 / 4, C 3 / 4, D 0.5 / 4.
    assert selection.score.tolist() == [0.5, 0.75, 0.75, 0.125]
    # A shortlist of three lets C in, which wins on the untouched part; of one, only A.
    assert selection_select(SelectionRule.HOLDOUT, inputs, shortlist=3).winner == 2
    assert selection_select(SelectionRule.HOLDOUT, inputs, shortlist=1).winner == 0


def test_thresholdout_answers_the_feedback_value_while_both_parts_agree() -> None:
    feedback = np.array([0.70, 0.80, 0.75])
    untouched = np.array([0.71, 0.79, 0.75])
    # Without noise the threshold is exactly 0.04, and no difference here exceeds it.
    exact = thresholdout_answers(feedback, untouched, seed=0, noise_scale=0.0)
    assert exact.tolist() == feedback.tolist()
    noisy = thresholdout_answers(feedback, untouched, seed=0)
    assert noisy.tolist() == feedback.tolist()


def test_thresholdout_answers_a_noisy_untouched_value_when_the_parts_differ() -> None:
    feedback = np.array([0.90, 0.80])
    untouched = np.array([0.60, 0.85])
    # Without noise: |0.6 - 0.9| = 0.3 > 0.04, so the untouched value; |0.85 - 0.8| = 0.05
    # > 0.04 too.
    exact = thresholdout_answers(feedback, untouched, seed=0, noise_scale=0.0)
    assert exact.tolist() == pytest.approx([0.60, 0.85])
    noisy = thresholdout_answers(feedback, untouched, seed=0)
    assert noisy[0] != 0.60 and noisy[0] == pytest.approx(0.60, abs=0.1)
    # Seeded per query: the same answers again, and an earlier answer never depends on a
    # later query.
    assert thresholdout_answers(feedback, untouched, seed=0).tolist() == noisy.tolist()
    assert thresholdout_answers(feedback[:1], untouched[:1], seed=0)[0] == noisy[0]
    with pytest.raises(ValueError, match="noise_scale"):
        thresholdout_answers(feedback, untouched, seed=0, noise_scale=-1.0)


def test_thresholdout_rule_tells_the_proposer_its_answers_and_picks_as_holdout() -> None:
    # Tasks 1..4, seed 0: tasks 3 and 4 are the feedback part. A agrees across parts (1.0 and
    # 1.0), B does not (1.0 on tasks 3 and 4, 0.0 untouched: answered 0.0), C is 0.5 on both.
    # The shortlist of two by those answers: A (1.0), C (0.5).
    inputs = data([[1, 1, 1, 1], [0, 0, 1, 1], [0.5, 0.5, 0.5, 0.5]], [1, 1, 1, 1])
    selection = selection_select(SelectionRule.THRESHOLDOUT, inputs, noise_scale=0.0)
    assert selection.feedback.tolist() == [1.0, 0.0, 0.5]
    assert selection.pick[[0, 2]].tolist() == [1.0, 0.5] and np.isnan(selection.pick[1])
    assert selection.winner == 0


def test_input_errors_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="one entry per task"):
        data([[1, 1]], [1])
    with pytest.raises(ValueError, match="at least one pair"):
        data([[0, 1]], [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        data([[0, 1]], [1, 1], tasks=[4, 4])
    with pytest.raises(ValueError, match="seed"):
        data([[0, 1]], [1, 1], seed=-1)
    with pytest.raises(ValueError, match="at least two D_selection tasks"):
        selection_select(SelectionRule.HOLDOUT, data([[1]], [1]))


def test_credit_by_task_sums_to_the_tolerant_accuracy() -> None:
    # Task 7: leads 0.5 (credit 1) and 0.05 (within 0.1: 0.5); task 2: -0.3 (credit 0).
    pairs = RankingPairs(
        task=np.array([7, 7, 2]),
        winner_score=np.array([0.9, 0.55, 0.2]),
        loser_score=np.array([0.4, 0.5, 0.5]),
    )
    tasks, credit, counts = tolerant_credit_by_task(pairs, tol=0.1)
    assert tasks.tolist() == [2, 7] and credit.tolist() == [0.0, 1.5]
    assert counts.tolist() == [1, 2]
    assert credit.sum() / counts.sum() == tolerant_ranking_accuracy(pairs, tol=0.1)
