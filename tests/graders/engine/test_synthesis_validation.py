"""Table 2 arithmetic (graders.engine.synthesis.validation), pinned on hand-computed cases."""

import krippendorff
import numpy as np
import pytest

from graders.engine.metrics import ConfidenceInterval
from graders.engine.synthesis.validation import (
    ValidationInput,
    ValidationPair,
    ValidationReport,
    human_majority,
    validation_json,
    validation_report,
)

T, F = True, False

# Two judges; seven sampled first draws. The cascade stops at a veto (False) or at no verdict
# (None). Human labels are verdicts in level terms: which level's response the person preferred.
PAIRS = (
    ValidationPair(1, 2, (T, T), ("high", "high", "high")),  # P1: D_2, majority high (right)
    ValidationPair(4, 3, (T, T), ("high", "high", "low")),  # P2: D_2, high (right), high id < low
    ValidationPair(5, 6, (T, F), ("low", "low", "high")),  # P3: vetoed by j2, low (wrong)
    ValidationPair(8, 7, (F,), ("high", "tie", "tie")),  # P4: vetoed by j1, tie (wrong)
    ValidationPair(9, 10, (None,), ("high", "high", "low")),  # P5: no verdict from j1, high
    ValidationPair(11, 12, (T, T), ("high", "low", "tie")),  # P6: D_2, complete, no majority
    ValidationPair(13, 14, (T, T), ("high", "high")),  # P7: D_2, two labels: not complete
)


@pytest.fixture
def report() -> ValidationReport:
    return validation_report(ValidationInput(judges=("j1", "j2"), pairs=PAIRS))


def test_depth_sizes_and_yield(report: ValidationReport) -> None:
    # D_0 = all 7; D_1 = cascade[0] is True: P1 P2 P3 P6 P7; D_2 = also cascade[1]: P1 P2 P6 P7.
    assert [(r.depth, r.pairs) for r in report.depths] == [(0, 7), (1, 5), (2, 4)]
    assert [r.yield_ for r in report.depths] == [1.0, 5 / 7, 4 / 7]
    assert (report.sampled, report.complete, report.no_majority) == (7, 6, 1)


def test_accuracy_against_the_human_majority(report: ValidationReport) -> None:
    # Judged = complete with a majority (P6 split, P7 two labels are out).
    # D_0: P1..P5, right P1 P2 P5 = 3/5. D_1: P1 P2 P3 = 2/3. D_2: P1 P2 = 2/2.
    assert [r.judged for r in report.depths] == [5, 3, 2]
    assert [r.accuracy for r in report.depths] == [pytest.approx(0.6), pytest.approx(2 / 3), 1.0]


def test_bootstrap_intervals(report: ValidationReport) -> None:
    # Resampling n pairs with k right: the mean is Binomial(n, k/n) / n.
    # D_0 (3 of 5): P(0) = 0.4^5 = 0.010 < 0.025 < P(<= 0.2) = 0.087, P(1) = 0.6^5 = 0.078 > 0.025:
    #   [0.2, 1.0]. D_1 (2 of 3): P(0) = 1/27 = 0.037 > 0.025, P(1) = 8/27: [0, 1].
    # D_2 (2 of 2 right): every draw is 1: [1, 1]. 10,000 draws put each tail far from 2.5%.
    assert [r.ci for r in report.depths] == [
        ConfidenceInterval(0.2, 1.0),
        ConfidenceInterval(0.0, 1.0),
        ConfidenceInterval(1.0, 1.0),
    ]


def test_bootstrap_interval_of_three_right_of_four() -> None:
    # Binomial(4, 3/4): P(0) = 1/256 = 0.004, P(<= 0.25) = 13/256 = 0.051, P(1) = 81/256 = 0.32.
    pairs = tuple(
        ValidationPair(2 * i, 2 * i + 1, (T,), (v, v, v))
        for i, v in enumerate(["high", "high", "high", "low"])
    )
    row = validation_report(ValidationInput(judges=("j",), pairs=pairs)).depths[0]
    assert row.accuracy == 0.75
    assert row.ci == ConfidenceInterval(0.25, 1.0)


def test_krippendorff_alpha_by_hand(report: ValidationReport) -> None:
    # Codes: 0 = the smaller response id won, 1 = the larger, 2 = tie. Synthetic: the high id.
    #   P1 (1<2 high):   syn 1, majority high -> 1
    #   P2 (4>3 high):   syn 0, majority high -> 0
    #   P3 (5<6 high):   syn 1, majority low  -> 0   (disagree)
    #   P4 (8>7 high):   syn 0, majority tie  -> 2   (disagree)
    #   P5 (9<10 high):  syn 1, majority high -> 1
    # D_0: n = 10 values; n_0 = 4, n_1 = 5, n_2 = 1; off-diagonal coincidences = 2 per
    # disagreeing unit = 4; sum_{c != k} n_c n_k = 100 - (16 + 25 + 1) = 58.
    # alpha = 1 - (n - 1) * 4 / 58 = 1 - 36/58 = 11/29.
    # D_1 (P1 P2 P3): n = 6, n_0 = 3, n_1 = 3, off-diagonal 2, 36 - 18 = 18: 1 - 5 * 2/18 = 4/9.
    # D_2 (P1 P2): no disagreement: 1.
    alphas = [r.krippendorff_alpha for r in report.depths]
    assert alphas == [pytest.approx(11 / 29), pytest.approx(4 / 9), pytest.approx(1.0)]
    package = krippendorff.alpha(
        reliability_data=np.array([[1, 0, 1, 0, 1], [1, 0, 0, 2, 1]], dtype=float),
        value_domain=[0, 1, 2],
        level_of_measurement="nominal",
    )
    assert package == pytest.approx(11 / 29)


def test_validity_among_each_judges_rejects(report: ValidationReport) -> None:
    # j1 rejected P4 (veto, tie: wrong) and P5 (no verdict, high: right); j2 rejected P3 (wrong).
    rows = [(r.judge, r.pairs, r.judged, r.accuracy) for r in report.rejected_by]
    assert rows == [("j1", 2, 2, 0.5), ("j2", 1, 1, 0.0)]


def test_json_has_the_formats_shape(report: ValidationReport) -> None:
    document = validation_json(report)
    assert set(document) == {"depths", "rejected_by"}
    assert document["depths"][0] == {
        "depth": 0,
        "pairs": 7,
        "yield": 1.0,
        "accuracy": pytest.approx(0.6),
        "ci": [0.2, 1.0],
        "krippendorff_alpha": pytest.approx(11 / 29),
    }
    assert document["rejected_by"] == [
        {"judge": "j1", "pairs": 2, "accuracy": 0.5},
        {"judge": "j2", "pairs": 1, "accuracy": 0.0},
    ]


def test_undefined_numbers_are_none() -> None:
    empty = validation_report(ValidationInput(judges=("j1",), pairs=()))
    assert [(r.pairs, r.yield_, r.accuracy, r.ci, r.krippendorff_alpha) for r in empty.depths] == [
        (0, None, None, None, None),
        (0, None, None, None, None),
    ]
    assert empty.rejected_by[0].accuracy is None
    # One judged pair: both raters say one category, so alpha is 0/0.
    lone = ValidationInput(judges=("j1",), pairs=(ValidationPair(1, 2, (T,), ("high",) * 3),))
    assert validation_report(lone).depths[0].krippendorff_alpha is None


@pytest.mark.parametrize(
    ("labels", "majority"),
    [
        (("high", "high", "low"), "high"),
        (("tie", "tie", "high"), "tie"),
        (("high", "low", "tie"), None),
        (("high", "high"), None),  # fewer than three labels: not complete
        (("high", "high", "low", "low"), None),
        (("low", "low", "low", "high"), "low"),
    ],
)
def test_human_majority(labels: tuple[str, ...], majority: str | None) -> None:
    assert human_majority(labels, min_labels=3) == majority  # type: ignore[arg-type]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="after a veto"):
        ValidationPair(1, 2, (F, T), ())
    with pytest.raises(ValueError, match="distinct"):
        ValidationPair(1, 1, (), ())
    with pytest.raises(ValueError, match="unknown human verdicts"):
        ValidationPair(1, 2, (), ("better",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 votes but the cascade has 1"):
        ValidationInput(judges=("j1",), pairs=(ValidationPair(1, 2, (T, T), ()),))
    with pytest.raises(ValueError, match="at least one filter judge"):
        ValidationInput(judges=(), pairs=())
