"""The search curve chart and its overfitting warning, on hand-made curves (no database)."""

import re
from typing import Any

from graders.charts import curve_svg, curve_warning, depth_accuracy_svg
from labeling.charts import HistogramSeries, histogram_svg, stacked_bars_svg

HOSTILE = "<script>alert(1)</script>"


def point(iteration: int, selection: float | None, eval_: float | None, **extra: Any) -> dict:
    return {
        "iteration": iteration,
        "candidate": iteration + 1,
        "name": f"cand-{iteration}",
        "selection": selection,
        "selection_ci": None if selection is None else [selection - 0.1, selection + 0.05],
        "eval": eval_,
        "eval_ci": None if eval_ is None else [eval_ - 0.1, eval_ + 0.05],
        "candidates": 4 + iteration,
    } | extra


def test_a_widening_gap_warns_with_the_numbers() -> None:
    curve = [point(0, 0.80, 0.78), point(1, 0.85, 0.80), point(2, 0.90, 0.79)]
    assert curve_warning(curve) == (
        "the gap between selection and eval accuracy widened from 0.02 to 0.11: the search "
        "may be fitting D_selection rather than the experts"
    )


def test_a_gap_that_grows_by_exactly_the_threshold_warns_and_less_does_not() -> None:
    # 0.07 - 0.02 is 0.05 only up to floating point; it still counts.
    assert curve_warning([point(0, 0.80, 0.78), point(1, 0.90, 0.83)]) is not None
    assert curve_warning([point(0, 0.80, 0.78), point(1, 0.90, 0.84)]) is None


def test_a_stable_or_narrowing_gap_does_not_warn() -> None:
    assert curve_warning([point(0, 0.70, 0.65), point(1, 0.80, 0.76), point(2, 0.85, 0.81)]) is None
    assert curve_warning([point(0, 0.80, 0.60), point(1, 0.85, 0.80)]) is None


def test_missing_eval_values_are_skipped_or_silence_the_warning() -> None:
    assert curve_warning([point(0, 0.8, None), point(1, 0.9, None)]) is None
    assert curve_warning([point(0, 0.8, 0.7)]) is None
    assert curve_warning([]) is None
    # The first round without an eval value is skipped: the gap is measured from round 1.
    curve = [point(0, 0.5, None), point(1, 0.80, 0.78), point(2, 0.95, 0.80)]
    assert "widened from 0.02 to 0.15" in (curve_warning(curve) or "")


def test_the_chart_has_one_marker_per_point_and_series_and_escapes_names() -> None:
    curve = [point(0, 0.6, 0.55), point(1, 0.7, None, name=HOSTILE), point(2, 0.8, 0.6)]
    svg = str(curve_svg(curve))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('class="point selection"') == 3
    assert svg.count('class="point eval"') == 2  # round 1 has no eval value
    assert svg.count('class="whisker selection"') == 3
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "style=" not in svg  # the CSP blocks inline styles
    assert "Round" in svg and "Tolerant ranking accuracy" in svg  # axis labels
    assert "D_selection" in svg and "D_eval" in svg  # legend
    # The eval line breaks at the missing value: two single points draw no line segment.
    assert svg.count('class="line eval" fill="none"') == 0
    assert svg.count('class="line selection" fill="none"') == 1


def test_points_are_placed_by_round_and_accuracy() -> None:
    svg = str(curve_svg([point(0, 0.0, None), point(2, 1.0, None)]))
    xs_ys = [
        (float(x), float(y))
        for x, y in re.findall(r'class="point selection" cx="([\d.]+)" cy="([\d.]+)"', svg)
    ]
    (x0, y0), (x2, y2) = xs_ys
    assert x0 < x2 and y0 > y2  # later rounds to the right, higher accuracy higher up
    # One x tick per round that has a point.
    assert re.findall(r'class="tick" [^>]*text-anchor="middle">(\d+)</text>', svg) == ["0", "2"]


def test_a_single_round_is_drawn_in_the_middle() -> None:
    svg = str(curve_svg([point(0, 0.5, 0.4)]))
    assert svg.count('class="point selection"') == 1 and svg.count('class="point eval"') == 1


def test_depth_chart_draws_one_point_and_interval_per_judged_depth() -> None:
    depths = [
        {"depth": 0, "accuracy": 0.5, "ci": [0.25, 0.75], "judged": 8},
        {"depth": 1, "accuracy": None, "ci": None, "judged": 0},
        {"depth": 2, "accuracy": 1.0, "ci": [1.0, 1.0], "judged": 2},
    ]
    svg = str(depth_accuracy_svg(depths))
    # Plot from y=16 (1.0) to y=228 (0.0): 0.5 at 122, 0.75 at 69, 0.25 at 175.
    assert svg.count('<circle class="point accuracy"') == 2
    assert 'cy="122.0"' in svg and 'cy="16.0"' in svg
    assert 'd="M80.0,69.0V175.0' in svg  # D_0 sits at the left inset: 64 + 16
    assert "D_0: accuracy 0.500 over 8 pairs [0.250, 0.750]" in svg
    # Every depth has its tick, the one without a point included; no line across the gap.
    assert all(f">D_{k}</text>" in svg for k in range(3))
    assert "<polyline" not in svg


def test_the_scatter_escapes_its_labels_and_leaves_out_points_without_both_values() -> None:
    from graders.charts import scatter_svg

    points = [
        {"label": HOSTILE, "tie_rate": 0.5, "accuracy": 0.25},
        {"label": "no leniency", "tie_rate": None, "accuracy": 0.9},
        {"label": "a judge with a very long name indeed", "tie_rate": 0.0, "accuracy": 1.0},
    ]
    svg = str(
        scatter_svg(points, x_key="tie_rate", y_key="accuracy", x_label="Tie rate",
                    y_label="Accuracy", title="Accuracy against tie rate")
    )  # fmt: skip
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert svg.count("<circle") == 2 and "no leniency" not in svg
    assert "a judge with a very lon…</text>" in svg
    # x = LEFT + INSET + 0.5 * (640 - 64 - 24 - 32) = 340; y = 16 + 212 * 0.75 = 175.
    assert '<circle class="point selection" cx="340.0" cy="175.0" r="5">' in svg


def test_stacked_bars_scale_to_the_longest_bar_skip_empty_segments_and_escape() -> None:
    # Plot width 640 - 96 - 24 = 520 for the longest bar (3): 2 -> 346.7, 1 -> 173.3.
    svg = str(
        stacked_bars_svg(
            title="Funnel",
            description="Draws",
            series=["kept", "<i>j1</i>"],
            bars=[("retry 0", [2, 1]), ("retry 1", [1, 0])],
        )
    )
    assert svg.count('<rect class="bar s0"') == 3  # two bars and the legend swatch
    assert '<rect class="bar s0" x="96.0" y="12" width="346.7"' in svg
    assert '<rect class="bar s1" x="442.7" y="12" width="173.3"' in svg
    assert '<rect class="bar s0" x="96.0" y="44" width="173.3"' in svg
    assert svg.count('<rect class="bar s1"') == 2  # retry 1 has no j1 segment
    assert "<i>" not in svg and "&lt;i&gt;j1&lt;/i&gt;" in svg


def test_the_curve_legend_speaks_plainly_with_the_paper_s_term_as_its_hint() -> None:
    svg = str(curve_svg([point(0, 0.6, 0.55)]))
    assert '<text class="legend"' in svg and ">D_selection (proposer saw)<" not in svg
    assert ">Selection tasks (proposer saw)<title>D_selection</title></text>" in svg
    assert ">Held-out tasks<title>D_eval</title></text>" in svg


def test_the_histogram_draws_shares_per_series_and_escapes_its_text() -> None:
    svg = str(
        histogram_svg(
            title=HOSTILE, description="d", x_label="Reward", bins=["0 to under 0.5", "0.5 to 1"],
            ticks=[(0.0, "0"), (1.0, "0.5"), (2.0, "1")],
            series=[HistogramSeries(HOSTILE, "split <meta>", [1, 3], 4),
                    HistogramSeries("eval", "", [0, 2], 4)],
        )
    )  # fmt: skip
    assert "<script>" not in svg and "<meta>" not in svg
    assert "<title>split &lt;meta&gt;</title>" in svg
    # Bars: two of the first series, one of the second (its empty bin draws nothing).
    assert (
        svg.count('<rect class="bar s0" x') == 2 + 1
        and svg.count('<rect class="bar s1" x') == 1 + 1
    )
    assert "0.5 to 1: 3 (75.0%)" in svg and "0.5 to 1: 2 (50.0%)" in svg
    # The y axis tops out at the largest share rounded up to a tenth: 75% -> 80%.
    assert ">80%</text>" in svg
