"""The meta-evaluation's additions (DESIGN.md sections 7 and 11): accuracy when committed per
judge, and the correlation panel across judges, in `meta_eval --json`, its text and its page,
on a small case worked out by hand."""

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import Project
from tests.labeling.helpers import write_jsonl

# Pairs r0 > r1 and r3 > r2 (synthetic labels); one run per judge.
SCORES = {
    "j1": {"r0": 0.9, "r1": 0.2, "r2": 0.1, "r3": 0.6},  # both right
    "j2": {"r0": 0.5, "r1": 0.5, "r2": 0.2, "r3": 0.8},  # a tie, then right
    "j3": {"r0": 0.7, "r1": 0.7, "r2": 0.7, "r3": 0.7},  # two ties
    "j4": {"r0": 0.1, "r1": 0.9, "r2": 0.3, "r3": 0.6},  # wrong, then right
}


@pytest.fixture
def four_judges(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, Any]] = [{"type": "task", "id": "t", "prompt": "p"}]
    records += [
        {"type": "response", "id": f"r{i}", "task": "t", "content": str(i)} for i in range(4)
    ]
    records += [
        {"type": "preference", "a": "r0", "b": "r1", "choice": "a", "provider": "synthetic", "annotator": "gen"},
        {"type": "preference", "a": "r2", "b": "r3", "choice": "b", "provider": "synthetic", "annotator": "gen"},
    ]  # fmt: skip
    records += [
        {"type": "judge_score", "judge": judge, "response": response, "run": 0, "score": score}
        for judge, scores in SCORES.items()
        for response, score in scores.items()
    ]
    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", records))
    return project


def test_accuracy_when_committed_and_the_correlations_by_hand(four_judges: Project) -> None:
    out = io.StringIO()
    call_command("meta_eval", project="acme", json=True, stdout=out)
    report = json.loads(out.getvalue())
    rows = {row["judge"]: row for row in report["rows"]}
    assert {j: r["accuracy"] for j, r in rows.items()} == {
        "j1": 1.0,
        "j2": 0.5,
        "j3": 0.0,
        "j4": 0.5,
    }
    # Committed runs: j1 2 of 2, j2 1 of 1 (its tie left out), j3 none, j4 1 of 2.
    assert {j: r["accuracy_when_committed"] for j, r in rows.items()} == {
        "j1": 1.0, "j2": 1.0, "j3": None, "j4": 0.5,
    }  # fmt: skip
    correlations = report["correlations"]
    assert correlations["evaluators"] == 4
    assert "exact by permutation" in correlations["method"]
    factors = {f["factor"]: f for f in correlations["factors"]}
    assert list(factors) == ["tie_rate", "distinct_scores", "leniency"]
    # Accuracy ranks 4 2.5 1 2.5 (centered 1.5 0 -1.5 0, squares 4.5).
    # Tie rates 0 .5 1 0: ranks 1.5 3 4 1.5, centered -1 .5 1.5 -1 (squares 4.5); covariance
    # -1.5 - 2.25 = -3.75: rho -3.75 / 4.5. rho = (t1 - t3) / 3 over the 24 orderings of
    # {-1, -1, .5, 1.5}: |rho| >= 5/6 only with {t1, t3} = {1.5, -1}: 8 orderings, p = 1/3.
    assert factors["tie_rate"]["rho"] == pytest.approx(-3.75 / 4.5)
    assert factors["tie_rate"]["p"] == pytest.approx(1 / 3)
    # Distinct scores 4 3 1 4: ranks 3.5 2 1 3.5, centered 1 -.5 -1.5 1: rho 3.75 / 4.5, and the
    # same 8 of 24 orderings.
    assert factors["distinct_scores"]["rho"] == pytest.approx(3.75 / 4.5)
    assert factors["distinct_scores"]["p"] == pytest.approx(1 / 3)
    # Leniency .45 .5 .7 .475: ranks 1 3 4 2, centered -1.5 .5 1.5 -.5 (squares 5): rho
    # -4.5 / sqrt(4.5 * 5); only {l1, l3} = {-1.5, 1.5} reaches it: 4 of 24, p = 1/6.
    assert factors["leniency"]["rho"] == pytest.approx(-4.5 / (4.5 * 5) ** 0.5)
    assert factors["leniency"]["p"] == pytest.approx(1 / 6)
    # Holm over 1/3, 1/3, 1/6: 1/6 x 3 = .5; 1/3 x 2 = 2/3; 1/3 x 1 -> kept at 2/3.
    holm = [factors[f]["p_holm"] for f in ("tie_rate", "distinct_scores", "leniency")]
    assert holm == pytest.approx([2 / 3, 2 / 3, 0.5])


def test_the_text_report_and_the_page_show_them(four_judges: Project, reviewer_user: Any) -> None:
    text = io.StringIO()
    call_command("meta_eval", project="acme", stdout=text)
    lines = text.getvalue().splitlines()
    assert "accuracy_when_committed" in lines[0].split("\t")
    # j3 never committed: accuracy 0, no accuracy when committed, tie rate 1.
    assert any(line.startswith("j3\t-\t2\t1\t0.000\t-\t1.000\t") for line in lines)
    assert "tie_rate\t4\t-0.833\t0.333\t0.667" in lines
    client = Client()
    client.force_login(reviewer_user)
    page = client.get(reverse("meta-eval", args=["acme"])).content.decode()
    assert "When committed" in page and "<td>Leniency (mean score)</td>" in page
    # The scatter: one point per judge, with its name and numbers as the tooltip.
    assert page.count('<circle class="point selection"') == 4
    assert "<title>j2: Tie rate 0.500, Accuracy 0.500</title>" in page
    assert '<td>Tie rate</td><td class="num">4</td><td class="num">-0.833</td>' in page


def test_fewer_than_three_judges_have_no_correlation(
    project: Project, tmp_path: Path, reviewer_user: Any
) -> None:
    records: list[dict[str, Any]] = [{"type": "task", "id": "t", "prompt": "p"}]
    records += [
        {"type": "response", "id": f"r{i}", "task": "t", "content": str(i)} for i in range(2)
    ]
    records += [
        {"type": "preference", "a": "r0", "b": "r1", "choice": "a", "provider": "synthetic", "annotator": "gen"},
        {"type": "judge_score", "judge": "<b>j</b>", "response": "r0", "score": 0.9},
        {"type": "judge_score", "judge": "<b>j</b>", "response": "r1", "score": 0.1},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "m.jsonl", records))
    out = io.StringIO()
    call_command("meta_eval", project="acme", json=True, stdout=out)
    factors = json.loads(out.getvalue())["correlations"]["factors"]
    assert [(f["n"], f["rho"], f["p"], f["p_holm"]) for f in factors] == [(1, None, None, None)] * 3
    client = Client()
    client.force_login(reviewer_user)
    page = client.get(reverse("meta-eval", args=["acme"])).content.decode()
    assert "need at least three judges with scores; 1 so far" in page
    assert "<b>j</b>" not in page and "&lt;b&gt;j&lt;/b&gt;" in page
