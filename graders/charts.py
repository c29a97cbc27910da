"""The search curve (SearchRun.curve) as a chart drawn on the server, and the overfitting
warning read off it.

Drawn here as SVG because the Content-Security-Policy allows no inline script and a charting
library would be the only JavaScript on the page; classes (app.css) and SVG presentation
attributes style it, never an inline style. Candidate names come from a proposer model, so
every piece of text goes through format_html's escaping."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from labeling.charts import (
    BAR_GAP,
    BAR_HEIGHT,
    BAR_RIGHT,
    BAR_TOP,
    WIDTH,
)
from labeling.charts import n as _n
from labeling.charts import short as _short
from labeling.templatetags.terms import TERMS

Point = Mapping[str, Any]

# The gap (selection minus eval accuracy) may grow by this much before the page warns.
GAP_WIDENING = 0.05
# 0.11 - 0.06 is not exactly 0.05 in floating point.
EPSILON = 1e-9

HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 16, 72
# Points keep this far from the plot's left and right edges, whiskers included.
INSET = 16
Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
# (curve key, legend text, hint, horizontal nudge): the whiskers of one round sit side by
# side. The legend speaks plainly, as labeling/templatetags/terms.py does, with the paper's
# name as the label's tooltip. "untouched" is D_selection's part kept from the proposer, in
# curves of a rule with a split.
SERIES = (
    ("selection", f"{TERMS['D_selection'].capitalize()} (proposer saw)", "D_selection", -3.0),
    ("untouched", f"{TERMS['D_selection'].capitalize()}, untouched", "D_selection", 0.0),
    ("eval", TERMS["D_eval"].capitalize(), "D_eval", 3.0),
)
LEGEND_STEP = 200


def curve_warning(curve: Sequence[Point]) -> str | None:
    """A warning when the best-so-far candidate's lead on D_selection over D_eval grew by at
    least GAP_WIDENING between the first and the last round that have both accuracies: the
    search then rewards what D_selection happens to contain, not what the experts want.
    Rounds without an eval accuracy (no D_eval tasks, or nothing to compare) are skipped."""
    both = [p for p in curve if p.get("selection") is not None and p.get("eval") is not None]
    if len(both) < 2:
        return None
    first = both[0]["selection"] - both[0]["eval"]
    last = both[-1]["selection"] - both[-1]["eval"]
    if last - first < GAP_WIDENING - EPSILON:
        return None
    return (
        f"the gap between selection and eval accuracy widened from {first:.2f} to {last:.2f}: "
        "the search may be fitting D_selection rather than the experts"
    )


def curve_svg(curve: Sequence[Point]) -> SafeString:
    """The curve as an inline SVG: x the round, y the tolerant ranking accuracy from 0 to 1,
    one line per split for the best candidate so far, each point with its 95% interval; the
    untouched part of D_selection only when the curve has it."""
    shown = [
        s
        for s in SERIES
        if s[0] != "untouched" or any(p.get("untouched") is not None for p in curve)
    ]
    rounds = [p["iteration"] for p in curve] or [0]
    low, high = min(rounds), max(rounds)
    plot_w = WIDTH - LEFT - RIGHT - 2 * INSET
    y_of = _unit_y

    def x_of(iteration: float) -> float:
        offset = plot_w / 2 if high == low else plot_w * (iteration - low) / (high - low)
        return LEFT + INSET + offset

    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
            'role="img" aria-labelledby="curve-title curve-desc">'
            '<title id="curve-title">Search curve</title>'
            '<desc id="curve-desc">Tolerant ranking accuracy of the best candidate so far after '
            "each round, on the selection tasks (D_selection) as the proposer was told it, on "
            "their untouched part when the selection rule keeps one, and on the held-out tasks "
            "(D_eval), with 95% intervals. The "
            "table below gives the same numbers.</desc>",
            WIDTH,
            HEIGHT,
        ),
        _axes(
            [(x_of(r), str(r)) for r in sorted(set(rounds))],
            y_of,
            x_label="Round",
            y_label="Tolerant ranking accuracy",
        ),
        *(_series(curve, key, nudge, x_of, y_of) for key, _, _, nudge in shown),
        _legend(shown),
        mark_safe("</svg>"),
    ]
    return mark_safe("".join(parts))


def _axes(
    ticks: Sequence[tuple[float, str]],
    y_of: Callable[[float], float],
    *,
    x_label: str,
    y_label: str,
) -> SafeString:
    """Grid lines at Y_TICKS, the x ticks (position, text) and both axis labels."""
    left, right, bottom = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM
    grid = format_html_join(
        "",
        '<line class="gridline" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
        (
            (left, _n(y_of(t)), right, _n(y_of(t)), left - 6, _n(y_of(t) + 4), f"{t:g}")
            for t in Y_TICKS
        ),
    )
    x_ticks = format_html_join(
        "",
        '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
        ((_n(x), bottom + 16, text) for x, text in ticks),
    )
    middle = (TOP + bottom) / 2
    labels = format_html(
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>'
        '<text class="axis-label" x="16" y="{}" text-anchor="middle" '
        'transform="rotate(-90 16 {})">{}</text>',
        left,
        bottom,
        right,
        bottom,
        _n((left + right) / 2),
        bottom + 34,
        x_label,
        _n(middle),
        _n(middle),
        y_label,
    )
    return mark_safe(grid + x_ticks + labels)


def _series(
    curve: Sequence[Point],
    key: str,
    nudge: float,
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
) -> SafeString:
    """A line through the points that have this split's value (broken where one is missing),
    the interval whiskers, and one marker per point with its numbers as a tooltip."""
    parts: list[str] = []
    segment: list[str] = []
    for point in curve:
        value = point.get(key)
        if value is None:
            parts.append(_polyline(key, segment))
            segment = []
            continue
        x, y = x_of(point["iteration"]) + nudge, y_of(value)
        segment.append(f"{_n(x)},{_n(y)}")
        interval = point.get(f"{key}_ci")
        parts.append(_whisker(key, x, interval, y_of))
        interval_text = _interval_text(interval)
        parts.append(
            format_html(
                '<circle class="point {}" cx="{}" cy="{}" r="4"><title>Round {}, {}: {} {}{}'
                "</title></circle>",
                key,
                _n(x),
                _n(y),
                point["iteration"],
                point.get("name") or "(unnamed)",
                key,
                f"{value:.3f}",
                interval_text,
            )
        )
    parts.append(_polyline(key, segment))
    return mark_safe("".join(parts))


def depth_accuracy_svg(depths: Sequence[Point]) -> SafeString:
    """Synthetic-label accuracy against the human majority per filter depth D_k (a synthesis's
    validation, PADME Table 2), each with its 95% interval; depths without judged pairs have
    no point. `depths` are rows with depth, accuracy, ci ([low, high] or None) and judged."""
    plot_w = WIDTH - LEFT - RIGHT - 2 * INSET
    count = max(len(depths), 1)

    y_of = _unit_y

    def x_of(index: float) -> float:
        return LEFT + INSET + (plot_w / 2 if count == 1 else plot_w * index / (count - 1))

    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
            'role="img" aria-labelledby="depth-title depth-desc">'
            '<title id="depth-title">Label accuracy by filter depth</title>'
            '<desc id="depth-desc">Share of validated pairs whose human majority agrees with '
            "the synthetic label, among the pairs surviving the first k filter judges, with "
            "95% bootstrap intervals. The table beside gives the same numbers.</desc>",
            WIDTH,
            HEIGHT,
        ),
        _axes(
            [(x_of(i), f"D_{row['depth']}") for i, row in enumerate(depths)],
            y_of,
            x_label="Filter depth",
            y_label="Synthetic-label accuracy",
        ),
    ]
    segment: list[str] = []
    for index, row in enumerate(depths):
        if row.get("accuracy") is None:
            parts.append(_polyline("accuracy", segment))
            segment = []
            continue
        x, y = x_of(index), y_of(row["accuracy"])
        segment.append(f"{_n(x)},{_n(y)}")
        interval = row.get("ci")
        parts.append(_whisker("accuracy", x, interval, y_of))
        parts.append(
            format_html(
                '<circle class="point accuracy" cx="{}" cy="{}" r="4"><title>D_{}: accuracy {} '
                "over {} pairs{}</title></circle>",
                _n(x),
                _n(y),
                row["depth"],
                f"{row['accuracy']:.3f}",
                row.get("judged", ""),
                _interval_text(interval),
            )
        )
    parts.append(_polyline("accuracy", segment))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


def _unit_y(value: float) -> float:
    """The plot's y coordinate of a value in [0, 1] (clamped onto the plot)."""
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - min(max(value, 0.0), 1.0))


def _whisker(
    key: str, x: float, interval: Sequence[float] | None, y_of: Callable[[float], float]
) -> str:
    """The 95% interval at x as a vertical bar with caps; nothing without an interval."""
    if not interval:
        return ""
    top, bottom = _n(y_of(interval[1])), _n(y_of(interval[0]))
    left, right = _n(x - 4), _n(x + 4)
    path = f"M{_n(x)},{top}V{bottom}M{left},{top}H{right}M{left},{bottom}H{right}"
    return format_html('<path class="whisker {}" d="{}"/>', key, path)


def _interval_text(interval: Sequence[float] | None) -> str:
    return f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""


def _polyline(key: str, segment: Sequence[str]) -> str:
    if len(segment) < 2:
        return ""
    return format_html(
        '<polyline class="line {}" fill="none" points="{}"/>', key, " ".join(segment)
    )


def _legend(series: Sequence[tuple[str, str, str, float]]) -> SafeString:
    """A line sample and label per (key, label, hint, nudge); a hint is the label's tooltip."""
    y = HEIGHT - 16
    return format_html_join(
        "",
        '<line class="line {}" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="legend" x="{}" y="{}">{}{}</text>',
        (
            (key, x, y - 4, x + 24, y - 4, x + 30, y, label,
             format_html("<title>{}</title>", hint) if hint else "")
            for (key, label, hint, _), x in zip(
                series, range(LEFT, LEFT + LEGEND_STEP * len(series), LEGEND_STEP), strict=True
            )
        ),
    )  # fmt: skip


def scatter_svg(
    points: Sequence[Point], *, x_key: str, y_key: str, x_label: str, y_label: str, title: str
) -> SafeString:
    """Points with both values in [0, 1] as an inline SVG scatter (x_key across, y_key up),
    each with its `label` as a tooltip; points missing either value are left out. Labels come
    from users and imports (evaluator names): escaped like every other text here."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT - 2 * INSET, HEIGHT - TOP - BOTTOM

    def x_of(value: float) -> float:
        return LEFT + INSET + plot_w * min(max(value, 0.0), 1.0)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - min(max(value, 0.0), 1.0))

    left, right, bottom = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM
    middle = (TOP + bottom) / 2
    grid = format_html_join(
        "",
        '<line class="gridline" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
        '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (left, _n(y_of(t)), right, _n(y_of(t)), left - 6, _n(y_of(t) + 4), f"{t:g}",
             _n(x_of(t)), bottom + 16, f"{t:g}")
            for t in Y_TICKS
        ),
    )  # fmt: skip
    axes = format_html(
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>'
        '<text class="axis-label" x="16" y="{}" text-anchor="middle" '
        'transform="rotate(-90 16 {})">{}</text>',
        left, bottom, right, bottom, _n((left + right) / 2), bottom + 34, x_label,
        _n(middle), _n(middle), y_label,
    )  # fmt: skip
    shown = [p for p in points if p.get(x_key) is not None and p.get(y_key) is not None]
    # Each point is named beside it (cut to SCATTER_LABEL characters; the tooltip and the
    # table have the whole name).
    dots = format_html_join(
        "",
        '<circle class="point selection" cx="{}" cy="{}" r="5"><title>{}: {} {}, {} {}'
        '</title></circle><text class="tick" x="{}" y="{}">{}</text>',
        (
            (_n(x_of(p[x_key])), _n(y_of(p[y_key])), p.get("label", ""), x_label,
             f"{p[x_key]:.3f}", y_label, f"{p[y_key]:.3f}", _n(x_of(p[x_key]) + 8),
             _n(y_of(p[y_key]) - 6), _short(str(p.get("label", ""))))
            for p in shown
        ),
    )  # fmt: skip
    head = format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
        'role="img" aria-labelledby="scatter-title scatter-desc">'
        '<title id="scatter-title">{}</title>'
        '<desc id="scatter-desc">{} against {}, one point per evaluator. The table beside it '
        "gives the same numbers.</desc>",
        WIDTH, HEIGHT, title, y_label, x_label,
    )  # fmt: skip
    return mark_safe(head + grid + axes + dots + "</svg>")


P_BEST_LEFT, P_BEST_TICKS = 180, (0.0, 0.25, 0.5, 0.75, 1.0)


def p_best_bars_svg(bars: Sequence[tuple[str, float]], *, threshold: float) -> SafeString:
    """P(best) per candidate as horizontal bars on a 0 to 1 scale, one per (name, probability)
    in the given order, with a marked line where a candidate counts as decided (`threshold`).
    Names come from a proposer model: escaped, cut to fit (the tooltip and the table beside
    the chart have them whole)."""
    plot_w = WIDTH - P_BEST_LEFT - BAR_RIGHT
    bottom = BAR_TOP + len(bars) * (BAR_HEIGHT + BAR_GAP)
    height = bottom + 40

    def x_of(value: float) -> float:
        return P_BEST_LEFT + plot_w * min(max(value, 0.0), 1.0)

    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
            'role="img" aria-labelledby="p-best-title p-best-desc">'
            '<title id="p-best-title">P(best) per candidate</title>'
            '<desc id="p-best-desc">The probability that each candidate has the highest '
            "accuracy, given the labels so far; a candidate reaching {} decides the question. "
            "The table beside gives the same numbers.</desc>",
            WIDTH,
            height,
            f"{threshold:g}",
        ),
        format_html_join(
            "",
            '<line class="gridline" x1="{}" y1="{}" x2="{}" y2="{}"/>'
            '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
            (
                (_n(x_of(t)), BAR_TOP - 4, _n(x_of(t)), bottom, _n(x_of(t)), bottom + 14, f"{t:g}")
                for t in P_BEST_TICKS
            ),
        ),
        format_html(
            '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"><title>Decided at {}</title>'
            "</line>",
            _n(x_of(threshold)),
            BAR_TOP - 4,
            _n(x_of(threshold)),
            bottom,
            f"{threshold:g}",
        ),
        format_html(
            '<text class="axis-label" x="{}" y="{}" text-anchor="middle">P(best)</text>',
            _n(P_BEST_LEFT + plot_w / 2),
            bottom + 32,
        ),
    ]
    for row, (name, probability) in enumerate(bars):
        y = BAR_TOP + row * (BAR_HEIGHT + BAR_GAP)
        middle = _n(y + BAR_HEIGHT / 2 + 4)
        parts.append(
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
                '<rect class="bar s0" x="{}" y="{}" width="{}" height="{}">'
                "<title>{}: P(best) {}</title></rect>"
                '<text class="tick" x="{}" y="{}">{}</text>',
                P_BEST_LEFT - 6,
                middle,
                _short(name),
                P_BEST_LEFT,
                y,
                _n(x_of(probability) - P_BEST_LEFT),
                BAR_HEIGHT,
                name,
                f"{probability:.3f}",
                _n(x_of(probability) + 4),
                middle,
                f"{probability:.2f}",
            )
        )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


# (bucket key, legend text, class): the drift chart's lines reuse the curve's line classes.
DRIFT_LINES = (
    ("accuracy", "Fresh accuracy", "accuracy"),
    ("mean_reward", "Mean captured reward", "eval"),
)
DRIFT_SELECTION = ("untouched", "Accuracy at selection", "", 0.0)


def drift_svg(buckets: Sequence[Point], *, selection: float | None) -> SafeString:
    """A promoted grader's drift against training step (graders/drift.py report buckets): fresh
    tolerant accuracy with its 95% interval, the mean reward of every captured rollout in the
    bucket (clamped onto 0..1 like every value here), and the accuracy at selection as a flat
    line; buckets without a value leave a gap in that line. x is proportional to the bucket's
    first step, so buckets without labels or rewards show as distance."""
    plot_w = WIDTH - LEFT - RIGHT - 2 * INSET
    steps = [b["first_step"] for b in buckets] or [0]
    low, high = min(steps), max(steps)
    y_of = _unit_y

    def x_of(step: float) -> float:
        offset = plot_w / 2 if high == low else plot_w * (step - low) / (high - low)
        return LEFT + INSET + offset

    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
            'role="img" aria-labelledby="drift-title drift-desc">'
            '<title id="drift-title">Drift against training step</title>'
            '<desc id="drift-desc">Tolerant ranking accuracy on fresh expert labels per '
            "training-step bucket with 95% intervals, and the mean reward the grader gave "
            "captured rollouts in that bucket. The table beside gives the same numbers.</desc>",
            WIDTH,
            HEIGHT,
        ),
        _axes(
            [(x_of(b["first_step"]), str(b["first_step"])) for b in buckets],
            y_of,
            x_label="Training step (bucket start)",
            y_label="Accuracy / mean reward",
        ),
    ]
    if selection is not None:
        parts.append(
            format_html(
                '<line class="line untouched" x1="{}" y1="{}" x2="{}" y2="{}">'
                "<title>Accuracy at selection {}</title></line>",
                LEFT,
                _n(y_of(selection)),
                WIDTH - RIGHT,
                _n(y_of(selection)),
                f"{selection:.3f}",
            )
        )
    for key, label, css in DRIFT_LINES:
        segment: list[str] = []
        for bucket in buckets:
            found = bucket.get(key)
            value = found.get("value") if isinstance(found, Mapping) else found
            if value is None:
                parts.append(_polyline(css, segment))
                segment = []
                continue
            x, y = x_of(bucket["first_step"]), y_of(value)
            segment.append(f"{_n(x)},{_n(y)}")
            interval = found.get("ci") if isinstance(found, Mapping) else None
            parts.append(_whisker(css, x, interval, y_of))
            parts.append(
                format_html(
                    '<circle class="point {}" cx="{}" cy="{}" r="4"><title>Steps {}-{}: {} {}{}'
                    "</title></circle>",
                    css,
                    _n(x),
                    _n(y),
                    bucket["first_step"],
                    bucket["last_step"],
                    label.lower(),
                    f"{value:.3f}",
                    _interval_text(interval),
                )
            )
        parts.append(_polyline(css, segment))
    legend = [(css, label, "", 0.0) for _, label, css in DRIFT_LINES]
    parts.append(_legend(legend + ([DRIFT_SELECTION] if selection is not None else [])))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))
