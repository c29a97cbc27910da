"""The agreement page's charts: Cohen's kappa of every pair of annotators as a heatmap, and how
confident the labels were, per provider. Built from the report and label tally the page
already holds; the page keeps its tables under them."""

from collections import Counter
from typing import Any

from django.utils.safestring import SafeString

from labeling.agreement_stats import Tally
from labeling.charts import heatmap_svg, stacked_bars_svg

CONFIDENCE_SERIES = ("0 · a guess", "1 · leaning", "2 · certain", "not given")
CONFIDENCE_LEVELS = (0, 1, 2, None)


def kappa_heatmap(report: dict[str, Any]) -> SafeString | None:
    """None below two annotators with a shared pair."""
    rows = report["cohen_kappa"]
    if not rows:
        return None
    names = sorted({row["a"] for row in rows} | {row["b"] for row in rows})
    index = {name: position for position, name in enumerate(names)}
    cells = {
        tuple(sorted((index[row["a"]], index[row["b"]]))): (row["kappa"], row["n"]) for row in rows
    }
    return heatmap_svg(
        title="Cohen's kappa per pair of annotators",
        description=(
            "Each cell is the kappa of two annotators over the pairs both labeled; darker is "
            "more agreement beyond chance. The table below gives the same numbers."
        ),
        labels=names,
        cells=cells,
    )


def confidence_bars(counted: Tally, *, dimension: str | None = None) -> SafeString | None:
    """Labels (of one dimension, or all) per confidence level, one bar per provider; None
    without labels."""
    counts: dict[str, Counter[int | None]] = {}
    for (item_dimension, votes), items in counted.items():
        if dimension is None or item_dimension == dimension:
            for _, provider, _, confidence in votes:
                counts.setdefault(provider, Counter())[confidence] += items
    if not counts:
        return None
    return stacked_bars_svg(
        title="Confidence of the labels",
        description="How many labels of each provider came with each confidence level.",
        series=CONFIDENCE_SERIES,
        bars=[
            (provider, [count[level] for level in CONFIDENCE_LEVELS])
            for provider, count in sorted(counts.items())
        ],
    )
