import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import Project
from tests.labeling.helpers import write_jsonl


def pref(
    a: str, b: str, choice: str, annotator: str, provider: str = "human", confidence: int = 1
) -> dict[str, object]:
    return {
        "type": "preference",
        "a": a,
        "b": b,
        "choice": choice,
        "annotator": annotator,
        "provider": provider,
        "confidence": confidence,
    }


@pytest.fixture
def labeled(project: Project, tmp_path: Path) -> Project:
    records: list[dict[str, object]] = [{"type": "task", "id": "t", "prompt": "p"}]
    records += [
        {"type": "response", "id": f"r{i}", "task": "t", "content": str(i)} for i in range(4)
    ]
    records += [
        # r0-r1: ann1 and ann2 agree (first); r0-r2: they disagree; r0-r3: only ann1.
        pref("r0", "r1", "a", "ann1"), pref("r1", "r0", "b", "ann2", confidence=2),
        pref("r0", "r2", "a", "ann1"), pref("r0", "r2", "b", "ann2"),
        pref("r0", "r3", "tie", "ann1"),
        # The synthetic provider: agrees on r0-r1 and r0-r3, r0-r2 has no majority.
        pref("r0", "r1", "a", "gen", "synthetic"), pref("r0", "r3", "tie", "gen", "synthetic"),
        pref("r0", "r2", "a", "gen", "synthetic"),
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", records))
    return project


def test_agreement_command_json_by_hand(labeled: Project) -> None:
    out = io.StringIO()
    call_command("agreement", project="acme", json=True, stdout=out)
    report = json.loads(out.getvalue())
    # Items with human labels: 3. Overlap (2+ labels): r0-r1 (agree), r0-r2 (disagree).
    assert (report["pairs"], report["annotators"], report["overlap_pairs"]) == (3, 2, 2)
    assert report["unanimous_share"] == 0.5
    # Kappa over the 2 shared pairs: ann1 says first, first; ann2 first, second.
    # p_o = 1/2; p_e = P(first)_1 * P(first)_2 + P(second)_1 * P(second)_2 = 1 * 1/2 + 0 = 1/2
    # kappa = (1/2 - 1/2) / (1 - 1/2) = 0.
    assert report["cohen_kappa"] == [
        {"a": "ann1", "b": "ann2", "kappa": 0.0, "agreement": 0.5, "n": 2}
    ]
    # Synthetic vs majority: r0-r1 first = first, r0-r3 tie = tie (ann1 alone); r0-r2 split.
    assert report["providers"][0] == {
        "provider": "synthetic",
        "vs": "human_majority",
        "agreement": 1.0,
        "n": 2,
    }


def test_agreement_command_refuses_unknown_project_and_dimension(labeled: Project) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        call_command("agreement", project="nope")
    with pytest.raises(CommandError, match="no dimension 'tone'"):
        call_command("agreement", project="acme", dimension="tone")


def test_agreement_page_and_annotator_view(
    labeled: Project, reviewer_user: User, admin_user: User, expert_user: User
) -> None:
    client = Client()
    client.force_login(reviewer_user)
    html = client.get(reverse("agreement", args=["acme"])).content.decode()
    assert "Cohen" in html and "ann1" in html and "synthetic" in html
    assert client.get(reverse("annotators", args=["acme"])).status_code == 403
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get(reverse("annotators", args=["acme"])).content.decode()
    assert "ann1" in page and "ann2" in page
    empty = Client()
    empty.force_login(expert_user)
    assert empty.get(reverse("agreement", args=["acme"]), {"dimension": "nope"}).status_code == 404
