"""Drift arithmetic on hand-computed cases (tolerant accuracy, tol 0.1: a pair 0.9 over 0.1
earns 1, a tie 0.5 / 0.5 earns 0.5, 0.1 over 0.9 earns 0)."""

from datetime import UTC, datetime, timedelta

import pytest

from graders.engine.drift import (
    Accuracy,
    CapturedReward,
    FreshPair,
    drift_alert,
    drift_compute,
)
from graders.engine.metrics import ConfidenceInterval

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)
RIGHT, TIE, WRONG = (0.9, 0.1), (0.5, 0.5), (0.1, 0.9)


def pair(task: int, scores: tuple[float, float], hours: float, step: int | None) -> FreshPair:
    return FreshPair(task, scores[0], scores[1], T0 + timedelta(hours=hours), step)


def compute(pairs: list[FreshPair], rewards: list[CapturedReward], **overrides: object):
    options: dict[str, object] = {
        "selection_value": 0.8,
        "tol": 0.1,
        "window": DAY,
        "bucket_width": 10,
        "margin": 0.05,
        "min_pairs": 1,
        "draws": 200,
    }
    return drift_compute(pairs, rewards, **(options | overrides))  # type: ignore[arg-type]


def test_windows_are_aligned_to_the_first_label_and_empty_ones_are_left_out() -> None:
    pairs = [
        pair(1, RIGHT, 0, None),
        pair(2, TIE, 23.99, None),  # still day 0: (1 + 0.5) / 2 = 0.75 over 2 tasks
        pair(3, WRONG, 24, None),  # day 1 starts exactly at first + 1 day: 0 over 1 task
        pair(1, RIGHT, 72, None),  # day 3 (day 2 is empty): 1 over 1 task
    ]
    drift = compute(pairs, [])
    assert [(w.start, w.end) for w in drift.windows] == [
        (T0, T0 + DAY),
        (T0 + DAY, T0 + 2 * DAY),
        (T0 + 3 * DAY, T0 + 4 * DAY),
    ]
    assert [(w.accuracy.pairs, w.accuracy.tasks, w.accuracy.value) for w in drift.windows] == [
        (2, 2, 0.75),
        (1, 1, 0.0),
        (1, 1, 1.0),
    ]
    # One task: no interval; two tasks: an interval.
    assert drift.windows[1].accuracy.ci is None
    assert drift.windows[0].accuracy.ci is not None
    # Overall: (1 + 0.5 + 0 + 1) / 4 = 0.625 over 3 tasks.
    assert drift.overall is not None
    assert (drift.overall.pairs, drift.overall.tasks, drift.overall.value) == (4, 3, 0.625)


def test_windows_start_at_the_first_label_not_the_first_listed() -> None:
    drift = compute([pair(1, RIGHT, 30, None), pair(2, WRONG, 6, None)], [])
    # First label at 6 h: 30 h is 24 h later, so it opens the second window.
    assert [w.start for w in drift.windows] == [
        T0 + timedelta(hours=6),
        T0 + timedelta(hours=30),
    ]


def test_step_buckets_hold_fresh_accuracy_and_every_captured_reward() -> None:
    pairs = [
        pair(1, RIGHT, 0, 0),
        pair(2, WRONG, 0, 9),  # steps 0 and 9: bucket 0-9, (1 + 0) / 2 = 0.5
        pair(3, TIE, 0, 10),  # bucket 10-19: 0.5
        pair(4, RIGHT, 0, None),  # no step: overall only
    ]
    rewards = [
        CapturedReward(3, 0.2),
        CapturedReward(5, 0.4),  # bucket 0-9: (0.2 + 0.4) / 2 = 0.3
        CapturedReward(12, 0.9),  # bucket 10-19: 0.9
        CapturedReward(25, 1.0),  # bucket 20-29: rewards, no fresh pair
        CapturedReward(None, 5.0),  # no step: in no bucket
    ]
    drift = compute(pairs, rewards)
    rows = [
        (
            b.first_step,
            b.last_step,
            b.accuracy.value if b.accuracy else None,
            b.mean_reward,
            b.rewards,
        )
        for b in drift.buckets
    ]
    assert rows == [
        (0, 9, 0.5, pytest.approx(0.3), 2),
        (10, 19, 0.5, 0.9, 1),
        (20, 29, None, 1.0, 1),
    ]
    assert drift.overall is not None and drift.overall.pairs == 4


def test_alert_needs_the_high_end_strictly_below_selection_minus_margin() -> None:
    # Two tasks, each a tie (0.5): every bootstrap draw is 0.5, so the interval is [0.5, 0.5].
    ties = [pair(1, TIE, 0, None), pair(2, TIE, 1, None)]
    at_margin = compute(ties, [], selection_value=0.75, margin=0.25)  # 0.75 - 0.25 = 0.5
    assert at_margin.overall is not None and at_margin.overall.ci == ConfidenceInterval(0.5, 0.5)
    assert not at_margin.alert
    beyond = compute(ties, [], selection_value=0.76, margin=0.25)  # 0.5 < 0.51
    assert beyond.alert


def test_alert_needs_min_pairs_an_interval_and_a_selection_value() -> None:
    low = Accuracy(pairs=20, tasks=5, value=0.4, ci=ConfidenceInterval(0.3, 0.5))
    assert drift_alert(low, selection_value=0.8, margin=0.05, min_pairs=20)
    assert not drift_alert(low, selection_value=0.8, margin=0.05, min_pairs=21)
    assert not drift_alert(low, selection_value=None, margin=0.05, min_pairs=1)
    one_task = Accuracy(pairs=30, tasks=1, value=0.0, ci=None)
    assert not drift_alert(one_task, selection_value=0.8, margin=0.05, min_pairs=1)
    assert not drift_alert(None, selection_value=0.8, margin=0.05, min_pairs=0)


def test_hacking_signal_when_reward_rises_while_agreement_falls() -> None:
    pairs = [pair(1, RIGHT, 0, 0), pair(2, TIE, 0, 10), pair(3, WRONG, 0, 20)]  # 1, 0.5, 0
    rising = [CapturedReward(0, 0.2), CapturedReward(10, 0.5), CapturedReward(20, 0.8)]
    drift = compute(pairs, rising)
    assert (drift.reward_rho, drift.agreement_rho) == (pytest.approx(1.0), pytest.approx(-1.0))
    assert drift.hacking
    falling = [CapturedReward(0, 0.8), CapturedReward(10, 0.5), CapturedReward(20, 0.2)]
    drift = compute(pairs, falling)
    assert drift.reward_rho == pytest.approx(-1.0)
    assert not drift.hacking


def test_hacking_signal_needs_three_buckets_of_each() -> None:
    pairs = [pair(1, RIGHT, 0, 0), pair(2, WRONG, 0, 10)]
    rewards = [CapturedReward(0, 0.2), CapturedReward(10, 0.5), CapturedReward(20, 0.8)]
    drift = compute(pairs, rewards)
    assert drift.reward_rho == pytest.approx(1.0)
    assert drift.agreement_rho is None  # two buckets with fresh pairs
    assert not drift.hacking


def test_no_fresh_pairs_gives_no_figures_and_no_alert() -> None:
    drift = compute([], [])
    assert (drift.overall, drift.windows, drift.buckets, drift.alert) == (None, [], [], False)


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="time window"):
        compute([], [], window=timedelta(0))
    with pytest.raises(ValueError, match="bucket width"):
        compute([], [], bucket_width=0)


def test_without_breakdown_intervals_only_the_overall_figure_has_one() -> None:
    pairs = [pair(1, RIGHT, 0, 0), pair(2, WRONG, 1, 1), pair(3, TIE, 2, 2)]
    drift = compute(pairs, [], breakdown_intervals=False)
    assert drift.overall is not None and drift.overall.ci is not None
    # Same point values, no intervals: (1 + 0 + 0.5) / 3 = 0.5 in one window and one bucket.
    assert [(w.accuracy.value, w.accuracy.ci) for w in drift.windows] == [(0.5, None)]
    assert [(b.accuracy.value, b.accuracy.ci) for b in drift.buckets if b.accuracy] == [(0.5, None)]
    assert compute(pairs, []).buckets[0].accuracy.ci is not None  # type: ignore[union-attr]
