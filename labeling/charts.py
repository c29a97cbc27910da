"""Charts drawn on the server as SVG, the one charting path of every page (graders/charts.py
builds its own on these): the Content-Security-Policy allows no inline script, so a charting
library would be the only JavaScript on a page. Classes (app.css) and SVG presentation
attributes style them, never an inline style; every piece of text goes through format_html's
escaping, since names come from users, imports and models. Each page shows the same numbers
in a table beside or under its chart, for screen readers."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH = 640

SCATTER_LABEL = 24


def short(text: str) -> str:
    return text if len(text) <= SCATTER_LABEL else text[: SCATTER_LABEL - 1] + "…"


def n(value: float) -> str:
    """A coordinate, short enough to keep the markup small."""
    return f"{value:.1f}"


BAR_HEIGHT, BAR_GAP = 22, 10
BAR_LEFT, BAR_RIGHT, BAR_TOP = 96, 24, 12
# Segment fills by position (app.css .chart .bar.s0 ... s5); later series reuse the last.
BAR_FILLS = 6


def svg_open(
    width: float, height: float, title: str, description: str, *, css: str = "chart"
) -> SafeString:
    """A chart's opening tag: an image to assistive technology, named by `title` and
    described by `description` (both escaped)."""
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}"><title>{}</title><desc>{}</desc>',
        css, width, height, title, title, description,
    )  # fmt: skip


def stacked_bars_svg(
    *,
    title: str,
    description: str,
    series: Sequence[str],
    bars: Sequence[tuple[str, Sequence[int]]],
) -> SafeString:
    """Horizontal stacked bars drawn on the server: one bar per (label, counts), one segment
    per series, all scaled to the longest bar so lengths compare across bars; each segment
    carries its count as a tooltip and a legend names the series. The page shows the same
    numbers in a table beside it."""
    longest = max([sum(counts) for _, counts in bars] + [1])
    plot_w = WIDTH - BAR_LEFT - BAR_RIGHT
    legend_y = BAR_TOP + len(bars) * (BAR_HEIGHT + BAR_GAP) + 12
    height = legend_y + 24
    parts = [svg_open(WIDTH, height, title, description)]
    for row, (label, counts) in enumerate(bars):
        y = BAR_TOP + row * (BAR_HEIGHT + BAR_GAP)
        parts.append(
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
                BAR_LEFT - 6,
                n(y + BAR_HEIGHT / 2 + 4),
                label,
            )
        )
        x = float(BAR_LEFT)
        for index, (name, count) in enumerate(zip(series, counts, strict=True)):
            if count <= 0:
                continue
            width = plot_w * count / longest
            parts.append(
                format_html(
                    '<rect class="bar s{}" x="{}" y="{}" width="{}" height="{}">'
                    "<title>{}: {} {}</title></rect>",
                    min(index, BAR_FILLS - 1),
                    n(x),
                    y,
                    n(width),
                    BAR_HEIGHT,
                    label,
                    count,
                    name,
                )
            )
            x += width
        parts.append(
            format_html(
                '<text class="tick" x="{}" y="{}">{}</text>',
                n(x + 4),
                n(y + BAR_HEIGHT / 2 + 4),
                sum(counts),
            )
        )
    parts.append(_legend([(name, "") for name in series], x=BAR_LEFT, y=legend_y))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


def _legend(series: Sequence[tuple[str, str]], *, x: float, y: float) -> SafeString:
    """One swatch and label per (label, hint) in the bars' fill order, in a row from x; a
    hint (the paper's or the code's exact name) is the label's tooltip."""
    parts = []
    for index, (label, hint) in enumerate(series):
        tooltip = format_html("<title>{}</title>", hint) if hint else ""
        parts.append(
            format_html(
                '<rect class="bar s{}" x="{}" y="{}" width="12" height="12"/>'
                '<text class="legend" x="{}" y="{}">{}{}</text>',
                min(index, BAR_FILLS - 1),
                n(x),
                y,
                n(x + 16),
                y + 10,
                label,
                tooltip,
            )
        )
        x += 24 + 7 * len(label)
    return mark_safe("".join(parts))


@dataclass(frozen=True)
class HistogramSeries:
    """One series of a histogram: its legend label, a hint for it (the exact term, shown as
    the label's tooltip; "" for none), its count per bin, and the count its shares are of
    (the bins' sum, or more when some values fell in no bin)."""

    label: str
    hint: str
    counts: Sequence[int]
    total: int

    def share(self, index: int) -> float:
        return self.counts[index] / self.total if self.total else 0.0


HIST_LEFT, HIST_RIGHT, HIST_TOP, HIST_PLOT = 56, 16, 16, 200
# Bars fill this share of a bin's width, side by side, one per series.
HIST_FILL = 0.8


def histogram_svg(
    *,
    title: str,
    description: str,
    x_label: str,
    bins: Sequence[str],
    ticks: Sequence[tuple[float, str]],
    series: Sequence[HistogramSeries],
) -> SafeString:
    """Grouped vertical bars: one group per bin (`bins` names each bin's range, for the
    tooltips), one bar per series, each as the share of its series' total, so series of
    different sizes compare. `ticks` label the x axis at (position in bins from the left
    edge, text): bin edges at whole numbers, bin middles at halves. The y axis runs from 0 to
    the largest share rounded up to a tenth."""
    plot_w = WIDTH - HIST_LEFT - HIST_RIGHT
    bottom = HIST_TOP + HIST_PLOT
    legend_y = bottom + 48
    height = legend_y + 24
    largest = max([s.share(i) for s in series for i in range(len(bins))] + [0.0])
    top_share = max(math.ceil(largest * 10 - 1e-9) / 10, 0.1)
    bin_w = plot_w / max(len(bins), 1)
    bar_w = bin_w * HIST_FILL / max(len(series), 1)

    def y_of(share: float) -> float:
        return bottom - HIST_PLOT * share / top_share

    parts = [svg_open(WIDTH, height, title, description)]
    for step in range(5):
        share = top_share * step / 4
        parts.append(
            format_html(
                '<line class="gridline" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}%</text>',
                HIST_LEFT,
                n(y_of(share)),
                WIDTH - HIST_RIGHT,
                n(y_of(share)),
                HIST_LEFT - 6,
                n(y_of(share) + 4),
                f"{share * 100:.3g}",
            )
        )
    for index, bin_text in enumerate(bins):
        left = HIST_LEFT + index * bin_w + bin_w * (1 - HIST_FILL) / 2
        for position, line in enumerate(series):
            if not line.counts[index]:
                continue
            share = line.share(index)
            parts.append(
                format_html(
                    '<rect class="bar s{}" x="{}" y="{}" width="{}" height="{}">'
                    "<title>{}, {}: {} ({}%)</title></rect>",
                    min(position, BAR_FILLS - 1),
                    n(left + position * bar_w),
                    n(y_of(share)),
                    n(bar_w),
                    n(bottom - y_of(share)),
                    line.label,
                    bin_text,
                    line.counts[index],
                    f"{share * 100:.1f}",
                )
            )
    parts.append(
        format_html(
            '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>'
            '<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>',
            HIST_LEFT,
            bottom,
            WIDTH - HIST_RIGHT,
            bottom,
            n(HIST_LEFT + plot_w / 2),
            bottom + 34,
            x_label,
        )
    )
    for at, text in ticks:
        parts.append(
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
                n(HIST_LEFT + at * bin_w),
                bottom + 16,
                text,
            )
        )
    parts.append(_legend([(s.label, s.hint) for s in series], x=HIST_LEFT, y=legend_y))
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


HEAT_CELL, HEAT_LEFT, HEAT_TOP = 44, 120, 96
# Cell fills by value (app.css .chart .heat.h0 ... h4), from below 0 to at least 0.8.
HEAT_BOUNDS = (0.0, 0.2, 0.4, 0.6, 0.8)


def heat_class(value: float | None) -> str:
    """The fill class of a value in [-1, 1]: h0 below 0 (worse than chance for kappa), then
    one class per 0.2 up to h5 from 0.8; "none" for a missing value."""
    if value is None:
        return "none"
    return f"h{sum(value >= bound for bound in HEAT_BOUNDS)}"


def heatmap_svg(
    *,
    title: str,
    description: str,
    labels: Sequence[str],
    cells: Mapping[tuple[int, int], tuple[float | None, int]],
) -> SafeString:
    """A symmetric matrix as a grid of coloured cells (row label left, column label on top),
    each with its value and count as text and tooltip: `cells[(i, j)] = (value, n)` for
    i < j (the lower triangle mirrors it; the diagonal stays empty)."""
    size = len(labels)
    width = HEAT_LEFT + size * HEAT_CELL + 16
    height = HEAT_TOP + size * HEAT_CELL + 16
    parts = [svg_open(width, height, title, description, css="chart heatmap")]
    for index, label in enumerate(labels):
        middle = index * HEAT_CELL + HEAT_CELL / 2
        parts.append(
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
                '<text class="tick" x="{}" y="{}" text-anchor="start" '
                'transform="rotate(-45 {} {})">{}</text>',
                HEAT_LEFT - 6,
                n(HEAT_TOP + middle + 4),
                short(label),
                n(HEAT_LEFT + middle),
                HEAT_TOP - 6,
                n(HEAT_LEFT + middle),
                HEAT_TOP - 6,
                short(label),
            )
        )
    for (i, j), (value, count) in cells.items():
        for row, column in ((i, j), (j, i)):
            x, y = HEAT_LEFT + column * HEAT_CELL, HEAT_TOP + row * HEAT_CELL
            shown = "n/a" if value is None else f"{value:.2f}"
            parts.append(
                format_html(
                    '<rect class="heat {}" x="{}" y="{}" width="{}" height="{}">'
                    "<title>{} and {}: {} over {} pairs</title></rect>"
                    '<text class="cell" x="{}" y="{}" text-anchor="middle">{}</text>',
                    heat_class(value),
                    x,
                    y,
                    HEAT_CELL - 2,
                    HEAT_CELL - 2,
                    labels[row],
                    labels[column],
                    shown,
                    count,
                    n(x + HEAT_CELL / 2 - 1),
                    n(y + HEAT_CELL / 2 + 3),
                    shown,
                )
            )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))
