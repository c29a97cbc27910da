"""Blinding on the Agreement page (issue 13, item 2): an expert who labels a pair a colleague
labeled must not be able to read the colleague's choice off the page, for instance by revising
their own label and comparing the page before and after."""

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import Preference, Project, QueueAssignment, Role
from labeling.queue import annotator_for_user, queue_build
from labeling.strategies import CoverageFirst
from tests.conftest import member
from tests.labeling.helpers import write_jsonl

TASKS = 21
COLLEAGUES = ("ann1", "ann2", "bob")


def _choice(colleague: str, task: int) -> str:
    # Mostly "a", with each colleague dissenting on a different stride: alpha is defined.
    stride = {"ann1": 5, "ann2": 3, "bob": 4}[colleague]
    return "b" if task % stride == 0 else "a"


@pytest.fixture
def panel(project: Project, tmp_path: Path) -> Project:
    """21 one-pair tasks, each labeled by three colleagues (two imported names and the app user
    bob), and a queue that serves them to the expert eve."""
    project.overlap = 4
    project.save()
    annotator_for_user(project=project, user=member(project, "bob", Role.EXPERT))
    records: list[dict[str, object]] = []
    for i in range(TASKS):
        records.append({"type": "task", "id": f"t{i}", "prompt": f"p{i}"})
        records += [
            {"type": "response", "id": f"t{i}/{s}", "task": f"t{i}", "content": f"{s}{i}"}
            for s in ("x", "y")
        ]
        records += [
            {"type": "preference", "a": f"t{i}/x", "b": f"t{i}/y", "choice": _choice(c, i),
             "annotator": c, "provider": "human", "confidence": 1}
            for c in COLLEAGUES
        ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "panel.jsonl", records))
    queue_build(project=project, strategy=CoverageFirst(), dimensions=[None])
    return project


def _page(client: Client) -> str:
    html = client.get(reverse("agreement", args=["acme"])).content.decode()
    # The CSRF token and the CSP nonce are fresh on every response; nothing else may differ.
    return re.sub(r'(csrfmiddlewaretoken" value="|X-CSRFToken": "|nonce=")[^"]+', r"\1", html)


def _label(client: Client, assignment: QueueAssignment, side: str) -> None:
    url = reverse("label-submit", args=["acme", assignment.pk])
    response = client.post(url, {"side": side, "confidence": "1", "seconds": "4"})
    assert response.status_code == 200


def test_expert_agreement_page_names_no_colleague(panel: Project, expert_user: User) -> None:
    client = Client()
    client.force_login(expert_user)
    client.get(reverse("label", args=["acme"]))
    _label(client, QueueAssignment.objects.get(annotator__user=expert_user), "left")
    html = _page(client)
    for colleague in COLLEAGUES:
        assert colleague not in html
    # No per-pair or per-person tables: no kappa rows, no "human:NAME" provider rows.
    assert "Cohen" not in html and "human:" not in html and "human_majority" not in html
    # The panel's aggregate is shown: three others, 21 overlapping pairs, above the minimums.
    assert "other annotators" in html and "Krippendorff" in html
    assert "Not enough overlapping labels" not in html
    # Fragments the expert can reach: the per-person page is refused.
    assert client.get(reverse("annotators", args=["acme"])).status_code == 403


def test_revising_an_overlapping_label_changes_nothing_shown(
    panel: Project, expert_user: User
) -> None:
    """The attack: label a pair the colleagues labeled, look, flip the label, look again."""
    client = Client()
    client.force_login(expert_user)
    client.get(reverse("label", args=["acme"]))
    assignment = QueueAssignment.objects.get(annotator__user=expert_user)
    _label(client, assignment, "left")
    before = _page(client)
    _label(client, assignment, "right")
    after = _page(client)
    assert before == after
    # A tie, the third answer, leaves it unchanged too.
    _label(client, assignment, "tie")
    assert _page(client) == before


def test_panel_withheld_below_three_other_annotators(panel: Project, expert_user: User) -> None:
    """With two colleagues only, the 'panel' would be a statement about those two people."""
    Preference.objects.filter(annotator__name="ann2").delete()
    client = Client()
    client.force_login(expert_user)
    html = _page(client)
    assert "Not enough overlapping labels" in html and "Krippendorff" not in html


def test_admin_still_sees_every_annotator(panel: Project, admin_user: User) -> None:
    client = Client()
    client.force_login(admin_user)
    html = _page(client)
    assert "Cohen" in html
    for colleague in COLLEAGUES:
        assert f"<td>{colleague}</td>" in html or f"human:{colleague}" in html
    annotators = client.get(reverse("annotators", args=["acme"])).content.decode()
    assert all(colleague in annotators for colleague in COLLEAGUES)


def test_no_other_page_or_api_an_expert_reaches_names_a_colleague(
    panel: Project, expert_user: User
) -> None:
    """A guard: the rest of what an expert can open (overview, tasks, a task, the queue, the
    label and grading pages, the API) shows counts at most, never whose label is whose."""
    client = Client()
    client.force_login(expert_user)
    urls = [
        reverse("project-overview", args=["acme"]),
        reverse("task-list", args=["acme"]),
        reverse("task-detail", args=["acme", "t0"]),
        reverse("queue", args=["acme"]),
        reverse("label", args=["acme"]),
        reverse("grade", args=["acme"]),
        reverse("api-project", args=["acme"]),
        reverse("api-tasks", args=["acme"]),
        reverse("api-task", args=["acme", "t0"]),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        assert not [c for c in COLLEAGUES if c in body], url
    for url in (reverse("export", args=["acme"]), reverse("api-export", args=["acme"])):
        assert client.get(url).status_code == 403
