"""The agreement page's charts (labeling/charts.py heatmap, labeling/agreement_charts.py): fill
classes on hand-picked kappas, every pair of annotators drawn on both sides of the diagonal,
names escaped, confidence counts per provider, and both charts on the page."""

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.agreement_charts import confidence_bars, kappa_heatmap
from labeling.agreement_stats import Label, tally
from labeling.charts import heat_class
from labeling.imports import jsonl_import
from labeling.models import Project
from tests.labeling.helpers import write_jsonl


@pytest.mark.parametrize(
    ("kappa", "fill"),
    [(None, "none"), (-0.3, "h0"), (0.0, "h1"), (0.19, "h1"), (0.2, "h2"), (0.61, "h4"),
     (0.8, "h5"), (1.0, "h5")],
)  # fmt: skip
def test_fill_classes(kappa: float | None, fill: str) -> None:
    assert heat_class(kappa) == fill


def test_every_pair_is_drawn_on_both_sides_and_names_are_escaped() -> None:
    report = {
        "cohen_kappa": [
            {"a": "ann", "b": "<b>bo</b>", "kappa": 0.5, "agreement": 0.7, "n": 12},
            {"a": "ann", "b": "cy", "kappa": None, "agreement": None, "n": 0},
            {"a": "<b>bo</b>", "b": "cy", "kappa": 0.9, "agreement": 0.95, "n": 8},
        ]
    }
    svg = str(kappa_heatmap(report))
    assert svg.count('<rect class="heat') == 6  # 3 pairs, mirrored
    assert svg.count('class="heat h3"') == 2 and svg.count('class="heat h5"') == 2
    assert svg.count('class="heat none"') == 2
    assert "<b>bo</b>" not in svg and "&lt;b&gt;bo&lt;/b&gt;" in svg
    assert "ann and cy: n/a over 0 pairs" in svg
    assert kappa_heatmap({"cohen_kappa": []}) is None


def test_confidence_counts_per_provider() -> None:
    labels = [
        Label(("r1", "r2"), None, "ann", "human", "r1", confidence)
        for confidence in (2, 2, 1, None)
    ] + [Label(("r1", "r2"), None, "judge-x", "judge", "r2", 0)]
    svg = str(confidence_bars(tally(labels)))
    assert "<title>human: 2 2 · certain</title>" in svg
    assert "<title>human: 1 1 · leaning</title>" in svg
    assert "<title>human: 1 not given</title>" in svg
    assert "<title>judge: 1 0 · a guess</title>" in svg
    assert confidence_bars(tally([])) is None


@pytest.mark.django_db
def test_the_page_draws_both_charts(project: Project, admin_user: User, tmp_path: Path) -> None:
    records = [{"type": "task", "id": "t", "prompt": "P"}]
    records += [{"type": "response", "id": f"t/{k}", "task": "t", "content": k} for k in "abc"]
    records += [
        {"type": "preference", "a": "t/a", "b": f"t/{other}", "choice": "a", "annotator": who,
         "confidence": 2}
        for who in ("ann", "bo") for other in "bc"
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "l.jsonl", records))
    client = Client()
    client.force_login(admin_user)
    html = client.get(reverse("agreement", args=[project.slug])).content.decode()
    assert html.count('class="chart heatmap"') == 1
    assert "Confidence of the labels" in html and "<title>human: 4 2 · certain</title>" in html
