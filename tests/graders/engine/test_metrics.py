"""Metrics of DESIGN.md section 7, pinned by hand-computed examples and a few properties."""

import math
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from graders.engine.metrics import (
    EvaluatorRuns,
    RankingPairs,
    ScoredResponses,
    Stability,
    evaluator_report,
    harm_aware_accuracy,
    harm_aware_accuracy_ci,
    ranking_accuracy,
    ranking_accuracy_ci,
    ranking_pairs_from_scores,
    task_bootstrap_ci,
    tolerant_ranking_accuracy,
    tolerant_ranking_accuracy_ci,
    within_task_spearman,
    within_task_spearman_ci,
)

NAN = math.nan


def scored(rows: Sequence[tuple[int, float, float]]) -> ScoredResponses:
    """(task, true score, grader score) per response."""
    task, true, pred = zip(*rows, strict=True)
    return ScoredResponses(
        task=np.array(task, dtype=np.int64), true=np.array(true), pred=np.array(pred)
    )


def preferences(rows: Sequence[tuple[int, float, float]]) -> RankingPairs:
    """(task, s of the preferred response, s of the other) per labeled non-tie pair."""
    task, winner, loser = zip(*rows, strict=True)
    return RankingPairs(
        task=np.array(task, dtype=np.int64),
        winner_score=np.array(winner),
        loser_score=np.array(loser),
    )


def random_pairs(tasks: int, seed: int) -> RankingPairs:
    """Five responses per task with distinct true scores (10 pairs each), a noisy grader."""
    rng = np.random.default_rng(seed)
    true = np.tile(np.arange(5.0), tasks)
    return ranking_pairs_from_scores(
        ScoredResponses(
            task=np.repeat(np.arange(tasks, dtype=np.int64), 5),
            true=true,
            pred=np.round(true + rng.normal(0, 2, true.size), 1),
        )
    )


# --- P from scores ---------------------------------------------------------------------------


def test_pairs_from_scores_exclude_true_ties_and_single_response_tasks() -> None:
    pairs = ranking_pairs_from_scores(
        scored(
            [
                # Task 1: a(t=1.0) beats b and c; b and c are tied in truth, so (b, c) is not in P.
                (1, 1.0, 0.9),
                (1, 0.5, 0.2),
                (1, 0.5, 0.4),
                # Task 2: one response, no pair.
                (2, 0.7, 0.1),
            ]
        )
    )
    assert sorted(zip(pairs.task, pairs.winner_score, pairs.loser_score, strict=True)) == [
        (1, 0.9, 0.2),
        (1, 0.9, 0.4),
    ]


def test_empty_p_is_an_error_not_a_number() -> None:
    pairs = ranking_pairs_from_scores(scored([(1, 0.5, 0.1), (1, 0.5, 0.9), (2, 1.0, 0.3)]))
    with pytest.raises(ValueError, match="P is empty"):
        ranking_accuracy(pairs)


def test_missing_true_score_is_rejected() -> None:
    with pytest.raises(ValueError, match="true score"):
        scored([(1, NAN, 0.5)])


# --- reported and tolerant ranking accuracy --------------------------------------------------

PAIRS_WITH_A_PREDICTED_TIE = [
    (1, 0.8, 0.3),  # right: reported 1, tolerant 1 (0.5 > 0.1)
    (1, 0.5, 0.5),  # predicted tie: reported 0, tolerant 0.5
    (2, 0.2, 0.6),  # wrong: reported 0, tolerant 0 (-0.4 < -0.1)
    (2, 0.9, 0.85),  # right by 0.05: reported 1, tolerant 0.5 (within tol)
]


def test_ranking_accuracy_gives_a_predicted_tie_zero() -> None:
    # (1 + 0 + 0 + 1) / 4
    assert ranking_accuracy(preferences(PAIRS_WITH_A_PREDICTED_TIE)) == 0.5


def test_tolerant_ranking_accuracy_gives_a_predicted_tie_half() -> None:
    # (1 + 0.5 + 0 + 0.5) / 4
    pairs = preferences(PAIRS_WITH_A_PREDICTED_TIE)
    assert tolerant_ranking_accuracy(pairs, tol=0.1) == 0.5
    # With tol = 0 only the exact tie earns a half: (1 + 0.5 + 0 + 1) / 4
    assert tolerant_ranking_accuracy(pairs, tol=0) == 0.625


def test_tolerance_edge_counts_half_even_after_float_rounding() -> None:
    pairs = preferences(
        [
            (1, 0.8, 0.7),  # 0.8 - 0.7 = 0.10000000000000009 in floats, == tol: 0.5
            (1, 0.6, 0.5),  # 0.6 - 0.5 = 0.09999999999999998, == tol: 0.5
            (1, 0.1, 0.2),  # |-0.1| == tol: 0.5
            (1, 0.25, 0.1),  # 0.15 > tol: 1
        ]
    )
    # (0.5 + 0.5 + 0.5 + 1) / 4
    assert tolerant_ranking_accuracy(pairs, tol=0.1) == 0.625


def test_win_rates_with_tol_zero() -> None:
    # Pairwise win rates of a group of 4 are multiples of 1/6; 0.1 + 0.2 vs 0.3 is a tie.
    pairs = preferences([(1, 4 / 6, 2 / 6), (1, 0.1 + 0.2, 0.3), (1, 1 / 6, 5 / 6)])
    # (1 + 0.5 + 0) / 3
    assert tolerant_ranking_accuracy(pairs, tol=0) == 0.5


def test_missing_grader_score_is_misordered_in_both_accuracies() -> None:
    pairs = preferences([(1, NAN, 0.2), (1, 0.9, NAN), (1, 0.9, 0.2)])
    # Only the last pair earns anything: 1 / 3, and no half credit for a NaN "tie".
    assert ranking_accuracy(pairs) == pytest.approx(1 / 3)
    assert tolerant_ranking_accuracy(pairs, tol=0.1) == pytest.approx(1 / 3)


# --- harm-aware ranking accuracy -------------------------------------------------------------


def test_harm_aware_accuracy_worked_example() -> None:
    responses = scored(
        [
            # Task 1: t = 4 3 2 1 (mean 2.5, A_t = +1.5 +0.5 -0.5 -1.5);
            #         s = .7 .8 .1 .2 (mean .45, A_s = +.25 +.35 -.35 -.25).
            # (a, b) misordered, but a keeps A_s > 0 and b has A_t > 0: harmless.
            # (c, d) misordered, but d keeps A_s < 0 and c has A_t < 0: harmless.
            # The other 4 pairs are right. 6 pairs: 4 right, 0 harmful.
            (1, 4, 0.7),
            (1, 3, 0.8),
            (1, 2, 0.1),
            (1, 1, 0.2),
            # Task 2: t = 1 0 (A_t = +.5 -.5); s = .3 .3 (a tie, A_s = 0 0): misordered, and
            # A_t(i) > 0 with A_s(i) <= 0: harmful. 1 pair: 0 right, 1 harmful.
            (2, 1, 0.3),
            (2, 0, 0.3),
            # Task 3: t = 2 1 0 (A_t = +1 0 -1); s = .2 .6 .1 (mean .3, A_s = -.1 +.3 -.2).
            # (a, b) misordered and A_t(a) > 0 with A_s(a) <= 0: harmful. (a, c), (b, c) right.
            # 3 pairs: 2 right, 1 harmful.
            (3, 2, 0.2),
            (3, 1, 0.6),
            (3, 0, 0.1),
        ]
    )
    pairs = ranking_pairs_from_scores(responses)
    # |P| = 6 + 1 + 3 = 10; right = 4 + 0 + 2 = 6; harmful = 0 + 1 + 1 = 2.
    assert ranking_accuracy(pairs) == pytest.approx(0.6)
    assert harm_aware_accuracy(pairs) == pytest.approx(1 - 2 / 10)


def test_harm_aware_response_exactly_at_the_mean_has_no_sign() -> None:
    # t = .3 .2 .1: mean(t) is 0.20000000000000004 in floats, yet b sits exactly at the mean
    # (A_t(b) = 0). s = .5 .6 .1 (A_s = +.1 +.2 -.3). (a, b) is misordered, a keeps A_s > 0 and
    # b has no negative true advantage to lose: harmless. (a, c), (b, c) right.
    pairs = ranking_pairs_from_scores(scored([(1, 0.3, 0.5), (1, 0.2, 0.6), (1, 0.1, 0.1)]))
    assert ranking_accuracy(pairs) == pytest.approx(2 / 3)
    assert harm_aware_accuracy(pairs) == 1.0


def test_harm_aware_counts_a_missing_score_as_harmful() -> None:
    # t = 1 0 and the better response's grade failed: misordered and harmful, 1 - 1/1.
    pairs = ranking_pairs_from_scores(scored([(1, 1.0, NAN), (1, 0.0, 0.3)]))
    assert harm_aware_accuracy(pairs) == 0.0


def test_harm_aware_accuracy_needs_true_scores() -> None:
    with pytest.raises(ValueError, match="needs true scores"):
        harm_aware_accuracy(preferences(PAIRS_WITH_A_PREDICTED_TIE))


# --- within-task Spearman --------------------------------------------------------------------


def test_within_task_spearman_by_hand() -> None:
    responses = scored(
        [
            # Task 1: ranks t = 1 2 3, s = 1 3 2; rho = 1 - 6 * (0 + 1 + 1) / (3 * 8) = 0.5.
            (1, 1, 0.1),
            (1, 2, 0.3),
            (1, 3, 0.2),
            # Task 2: average ranks t = 1.5 1.5 3 (tie), s = 1 2 3. Centered on 2:
            # t = -.5 -.5 1, s = -1 0 1; cov = .5 + 0 + 1 = 1.5; rho = 1.5 / sqrt(1.5 * 2)
            # = sqrt(3) / 2.
            (2, 1, 0.1),
            (2, 1, 0.2),
            (2, 2, 0.3),
            # Task 3: constant grader: contributes 0.
            (3, 1, 0.5),
            (3, 2, 0.5),
            # Task 4: true scores all equal: excluded.
            (4, 2, 0.1),
            (4, 2, 0.9),
            # Task 5: a single response: excluded.
            (5, 1, 0.4),
        ]
    )
    assert within_task_spearman(responses) == pytest.approx((0.5 + math.sqrt(3) / 2 + 0) / 3)


def test_within_task_spearman_missing_grade_contributes_zero() -> None:
    # Task 1 would be rho = 1, but a grade failed: 0. Task 2: rho = -1. Mean (0 - 1) / 2.
    responses = scored([(1, 1, 0.1), (1, 2, NAN), (1, 3, 0.3), (2, 1, 0.9), (2, 2, 0.1)])
    assert within_task_spearman(responses) == -0.5


def test_within_task_spearman_without_an_eligible_task_is_an_error() -> None:
    with pytest.raises(ValueError, match="not all equal"):
        within_task_spearman(scored([(1, 2, 0.1), (1, 2, 0.9), (2, 1, 0.4)]))


# --- task bootstrap --------------------------------------------------------------------------


def test_bootstrap_is_reproducible_with_the_same_seed() -> None:
    pairs = random_pairs(tasks=60, seed=1)
    first = ranking_accuracy_ci(pairs)
    assert ranking_accuracy_ci(pairs) == first
    # Another seed may land on the same grid values (a draw's statistic is a multiple of 1/600
    # here), so it need not differ; with 10,000 draws it must at least agree closely.
    other = ranking_accuracy_ci(pairs, seed=1)
    assert other.low == pytest.approx(first.low, abs=0.01)
    assert other.high == pytest.approx(first.high, abs=0.01)


def test_bootstrap_ci_contains_the_point_estimate() -> None:
    pairs = random_pairs(tasks=200, seed=2)
    for point, ci in [
        (ranking_accuracy(pairs), ranking_accuracy_ci(pairs)),
        (tolerant_ranking_accuracy(pairs, tol=0.1), tolerant_ranking_accuracy_ci(pairs, tol=0.1)),
        (harm_aware_accuracy(pairs), harm_aware_accuracy_ci(pairs)),
    ]:
        assert ci.low < point < ci.high
        # 200 tasks x 10 pairs: the interval is a few points wide, not the whole range.
        assert ci.high - ci.low < 0.15


def test_bootstrap_of_one_task_collapses_to_the_point() -> None:
    # Every draw resamples the one task, so every draw equals the point estimate (2 / 3 here).
    pairs = preferences([(7, 0.9, 0.1), (7, 0.8, 0.2), (7, 0.1, 0.9)])
    ci = ranking_accuracy_ci(pairs, draws=200)
    assert ci.low == ci.high == pytest.approx(ranking_accuracy(pairs))


def test_bootstrap_of_equal_task_accuracies_collapses_too() -> None:
    # Each task has 1 of 2 pairs right: any resample is 0.5, however many tasks it has.
    pairs = preferences([(task, s, 0.5) for task in range(20) for s in (0.9, 0.1)])
    ci = ranking_accuracy_ci(pairs, draws=500)
    assert ci.low == ci.high == 0.5


def test_bootstrap_is_pair_weighted() -> None:
    # Task 0 has 10 pairs, all right; tasks 1-9 have 1 pair each, wrong. Point: 10 / 19.
    # A draw holding task 0 K times (K ~ Binomial(10, 0.1)) scores 10K / (10K + 10 - K):
    # K = 0 -> 0 (P = .349), 1 -> 10/19, 2 -> 20/28 (P(K <= 2) = .930), 3 -> 30/37
    # (P(K <= 3) = .987). So the 97.5th percentile is 30/37 = 0.81; a task mean (K / 10) would
    # give 0.3.
    pairs = preferences([(0, 1, 0)] * 10 + [(task, 0, 1) for task in range(1, 10)])
    assert ranking_accuracy(pairs) == pytest.approx(10 / 19)
    ci = ranking_accuracy_ci(pairs)
    assert ci.low == 0.0
    assert ci.high == pytest.approx(30 / 37)


def test_bootstrap_rejects_a_task_without_pairs() -> None:
    with pytest.raises(ValueError, match="positive count"):
        task_bootstrap_ci(np.array([1.0, 0.0]), np.array([1.0, 0.0]))


def test_within_task_spearman_ci() -> None:
    one_task = scored([(1, 1, 0.1), (1, 2, 0.3), (1, 3, 0.2), (2, 1, 0.5), (2, 1, 0.5)])
    # Only task 1 is eligible (rho 0.5): every draw is 0.5.
    assert within_task_spearman_ci(one_task, draws=100).low == pytest.approx(0.5)
    assert within_task_spearman_ci(one_task, draws=100).high == pytest.approx(0.5)
    rng = np.random.default_rng(3)
    true = np.tile(np.arange(4.0), 100)
    many = ScoredResponses(
        task=np.repeat(np.arange(100, dtype=np.int64), 4),
        true=true,
        pred=true + rng.normal(0, 2, true.size),
    )
    ci = within_task_spearman_ci(many)
    assert ci == within_task_spearman_ci(many)
    assert ci.low < within_task_spearman(many) < ci.high


# --- PADME evaluator metrics -----------------------------------------------------------------

# (preferred, other) -> scores in runs 1, 2, 3 (None = failed call).
EVALUATOR_TABLE: dict[tuple[str, str], tuple[list[float | None], list[float | None]]] = {
    # Right in all 3 runs: stable.
    ("a1", "a2"): ([0.9, 0.8, 0.9], [0.2, 0.3, 0.1]),
    # Tied in all 3 runs: always tied.
    ("b1", "b2"): ([0.5, 0.6, 0.4], [0.5, 0.6, 0.4]),
    # Tie, right, right: wobbled.
    ("c1", "c2"): ([0.7, 0.8, 0.6], [0.7, 0.6, 0.5]),
    # Other picked, preferred picked, failed (ignored): flipped.
    ("d1", "d2"): ([0.3, 0.7, None], [0.6, 0.2, 0.5]),
    # Never both scored: failed.
    ("e1", "e2"): ([None, 0.4, None], [0.5, None, None]),
    # Wrong in all 3 runs: stable too (the same side every run), never correct.
    ("g1", "g2"): ([0.2, 0.1, 0.2], [0.4, 0.3, 0.5]),
}


def evaluator_runs(
    table: dict[tuple[str, str], tuple[list[float | None], list[float | None]]],
) -> EvaluatorRuns:
    runs = len(next(iter(table.values()))[0])
    scores: list[dict[str, float | None]] = [{} for _ in range(runs)]
    for (preferred, other), (preferred_scores, other_scores) in table.items():
        for run in range(runs):
            scores[run][preferred] = preferred_scores[run]
            scores[run][other] = other_scores[run]
    return EvaluatorRuns(pairs=list(table), scores=scores)


def test_evaluator_report_by_hand() -> None:
    report = evaluator_report(evaluator_runs(EVALUATOR_TABLE))
    assert (report.pairs, report.runs) == (6, 3)
    # Correct runs: a 3 + b 0 + c 2 + d 1 + e 0 + g 0 = 6 of 6 x 3 = 18.
    assert report.accuracy == pytest.approx(6 / 18)
    # Committed runs (a side picked): the 6 correct, and d run 1 and g's 3 wrong: 6 of 10.
    assert report.accuracy_when_committed == pytest.approx(6 / 10)
    # Ties with both scores: b 3 + c 1 = 4 of 18 (the 4 failed runs stay in the denominator).
    assert report.tie_rate == pytest.approx(4 / 18)
    # Failed runs: d run 3, e runs 1-3.
    assert report.failed_runs == 4
    # 36 slots - 5 None = 31 emitted scores summing to 2.6 + .6 + 1.5 + 1.5 + 2.1 + 1.8 + 1.0
    # + 1.3 + .4 + .5 + .5 + 1.2 = 15.0.
    assert report.leniency == pytest.approx(15 / 31)
    # Sample SDs of the 10 responses with >= 2 scores (e1, e2 have one each): a1 and g1
    # (.9 .8 .9 / .2 .1 .2) sqrt(1/300); a2, b1, b2, c1, c2, g2 0.1; d1 (.3 .7) sqrt(.08);
    # d2 (.6 .2 .5) sqrt(.26 / 3 / 2).
    expected_sd = (2 * math.sqrt(1 / 300) + 6 * 0.1 + math.sqrt(0.08) + math.sqrt(0.13 / 3)) / 10
    assert report.score_sd == pytest.approx(expected_sd)
    # 0.1 to 0.9 all appear.
    assert report.distinct_scores == 9
    assert report.pair_stability == (
        Stability.STABLE,
        Stability.ALWAYS_TIED,
        Stability.WOBBLED,
        Stability.FLIPPED,
        Stability.FAILED,
        Stability.STABLE,
    )
    counts = (report.stable, report.always_tied, report.wobbled, report.flipped)
    assert counts == (2, 1, 1, 1)
    assert report.failed_pairs == 1


def test_distinct_scores_ignore_float_rounding() -> None:
    # 0.1 + 0.2 is 0.30000000000000004: still the score 0.3. Distinct: 0.3 and 0.7.
    report = evaluator_report(
        EvaluatorRuns(pairs=[("x", "y")], scores=[{"x": 0.3, "y": 0.7}, {"x": 0.1 + 0.2, "y": 0.7}])
    )
    assert report.distinct_scores == 2


def test_evaluator_report_counts_a_shared_response_once_per_run() -> None:
    # x is in both pairs: emitted scores are x 1.0, y 0.0 (z failed), so leniency is 0.5, not
    # (1 + 1 + 0) / 3. One run: no response has 2 scores, so no SD.
    report = evaluator_report(
        EvaluatorRuns(pairs=[("x", "y"), ("x", "z")], scores=[{"x": 1.0, "y": 0.0, "z": None}])
    )
    assert report.leniency == 0.5
    assert report.score_sd is None
    assert report.accuracy == 0.5
    assert report.failed_runs == 1


def test_evaluator_report_with_every_call_failed() -> None:
    report = evaluator_report(EvaluatorRuns(pairs=[("x", "y")], scores=[{"x": None, "y": None}]))
    assert (report.accuracy, report.tie_rate, report.leniency, report.distinct_scores) == (
        0.0,
        0.0,
        None,
        0,
    )
    assert report.failed_pairs == 1
    assert report.accuracy_when_committed is None  # it never picked a side


def test_evaluator_runs_must_cover_every_response() -> None:
    with pytest.raises(ValueError, match=r"run 1 .*'y'"):
        evaluator_report(
            EvaluatorRuns(pairs=[("x", "y")], scores=[{"x": 1.0, "y": 0.0}, {"x": 1.0}])
        )


# --- properties ------------------------------------------------------------------------------

# Scores on a coarse grid make true ties, predicted ties and misorderings common; NaN is a
# failed grade.
grid_scores = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])
grader_scores = st.one_of(grid_scores, st.just(NAN))
response_rows = st.lists(
    st.tuples(st.integers(0, 4), grid_scores, grader_scores), min_size=2, max_size=30
)
# No example database in the work tree, and no per-example deadline on a busy 2-core CI machine.
property_settings = settings(database=None, deadline=None)


@property_settings
@given(response_rows)
def test_ranking_accuracy_matches_a_loop_over_all_pairs(
    rows: list[tuple[int, float, float]],
) -> None:
    credits = [
        1.0 if si > sj else 0.0
        for ti_task, ti, si in rows
        for tj_task, tj, sj in rows
        if ti_task == tj_task and ti > tj
    ]
    pairs = ranking_pairs_from_scores(scored(rows))
    if not credits:
        assert pairs.task.size == 0
        return
    assert ranking_accuracy(pairs) == pytest.approx(sum(credits) / len(credits))
    # Only misordered pairs can be harmful, so harm-aware accuracy is never below the reported.
    assert harm_aware_accuracy(pairs) >= ranking_accuracy(pairs)


@property_settings
@given(response_rows)
def test_within_task_spearman_matches_scipy(rows: list[tuple[int, float, float]]) -> None:
    by_task: dict[int, list[tuple[float, float]]] = {}
    for task, true, pred in rows:
        by_task.setdefault(task, []).append((true, pred))
    rhos = []
    for members in by_task.values():
        true_scores, pred_scores = zip(*members, strict=True)
        if len(set(true_scores)) < 2:
            continue
        constant_or_failed = len(set(pred_scores)) < 2 or any(map(math.isnan, pred_scores))
        rhos.append(0.0 if constant_or_failed else stats.spearmanr(true_scores, pred_scores)[0])
    if not rhos:
        with pytest.raises(ValueError):
            within_task_spearman(scored(rows))
        return
    assert within_task_spearman(scored(rows)) == pytest.approx(float(np.mean(rhos)))


# --- purity ----------------------------------------------------------------------------------


def test_metrics_import_without_django() -> None:
    # pytest-django has already imported Django here, so check in a fresh interpreter.
    code = "import sys, graders.engine.metrics; assert 'django' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
