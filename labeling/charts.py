"""Charts drawn on the server as SVG, the one charting path of every page (graders/charts.py
builds its own on these): the Content-Security-Policy allows no inline script, so a charting
library would be the only JavaScript on a page. Classes (app.css) and SVG presentation
attributes style them, never an inline style; every piece of text goes through format_html's
escaping, since names come from users, imports and models. Each page shows the same numbers
in a table beside or under its chart, for screen readers."""

from collections.abc import Mapping, Sequence

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
    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {} {}" '
            'role="img" aria-label="{}"><title>{}</title><desc>{}</desc>',
            WIDTH,
            height,
            title,
            title,
            description,
        )
    ]
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
    x = BAR_LEFT
    for index, name in enumerate(series):
        parts.append(
            format_html(
                '<rect class="bar s{}" x="{}" y="{}" width="12" height="12"/>'
                '<text class="legend" x="{}" y="{}">{}</text>',
                min(index, BAR_FILLS - 1),
                x,
                legend_y,
                x + 16,
                legend_y + 10,
                name,
            )
        )
        x += 24 + 7 * len(name)
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
    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="chart heatmap" viewBox="0 0 {} {}" '
            'role="img" aria-label="{}"><title>{}</title><desc>{}</desc>',
            width,
            height,
            title,
            title,
            description,
        )
    ]
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
