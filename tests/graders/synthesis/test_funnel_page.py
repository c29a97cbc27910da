"""The funnel page and `synthesis_funnel` command on an imported synthesis (FORMATS.md records),
so imported draws give the same page a generated run does."""

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.imports import jsonl_import
from labeling.models import (
    Dimension,
    Membership,
    Project,
    Role,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)
from tests.graders.synthesis_factory import draw_make, synthesis_make
from tests.labeling.helpers import synthesis_records, write_jsonl

# The imported synthesis (tests/labeling/helpers.py synthesis_records): cascade j1, j2, one
# retry; c1 vetoed by j2 then kept, c2 kept at once, c3 vetoed by j1 twice. So retry 0: 3
# draws, 1 kept (c2), j1 rejects c3, j2 rejects c1, retention 1/3, cumulative 1/3; retry 1:
# 2 draws, 1 kept (c1), j1 rejects c3, retention 1/2, cumulative 2/3. Cost .25 + .5 + .25 = 1
# over 2 kept pairs.


@pytest.fixture
def imported(project: Project, tmp_path: Path) -> Project:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", synthesis_records()))
    return project


def funnel_json(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("synthesis_funnel", "--project", "acme", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_the_command_prints_the_formats_shape_for_an_imported_synthesis(imported: Project) -> None:
    report = funnel_json()
    assert (report["synthesis"], report["cells"], report["draws"], report["kept"]) == (
        "s1",
        3,
        5,
        2,
    )
    assert [
        (
            r["retry"],
            r["draws"],
            r["kept"],
            r["rejected"],
            r["retention"],
            r["cumulative_retention"],
        )
        for r in report["by_retry"]
    ] == [
        (0, 3, 1, {"j1": 1, "j2": 1}, 1 / 3, 1 / 3),
        (1, 2, 1, {"j1": 1, "j2": 0}, 1 / 2, 2 / 3),
    ]
    total = report["total"]
    assert (total["draws"], total["kept"], total["rejected"]) == (5, 2, {"j1": 2, "j2": 1})
    assert (total["retention"], total["cumulative_retention"]) == (2 / 5, 2 / 3)
    # airline: c1 (2 draws, kept) and c3 (2 draws, none); retail: c2 (1 draw, kept).
    assert [(r["value"], r["cells"], r["filled"], r["draws"], r["draws_per_kept"])
            for r in report["by"]["domain"]] == [("airline", 2, 1, 4, 4.0), ("retail", 1, 1, 1, 1.0)]  # fmt: skip
    assert set(report["by"]) == {"dimension", "domain", "contrast", "agent"}
    assert report["cost_per_kept"] == pytest.approx(0.5)


def test_the_command_names_what_is_wrong(imported: Project, project: Project) -> None:
    for args, reason in (
        (["--project", "nope"], "project 'nope' does not exist"),
        (["--project", "acme", "--synthesis", "s9"], "project 'acme' has no synthesis 's9'"),
    ):
        with pytest.raises(CommandError, match=reason):
            call_command("synthesis_funnel", *args, stdout=io.StringIO())
    other = Project.objects.create(slug="empty", name="Empty")
    with pytest.raises(CommandError, match="project 'empty' has no synthesis yet"):
        call_command("synthesis_funnel", "--project", other.slug, stdout=io.StringIO())


def test_several_syntheses_need_a_choice_on_the_command(imported: Project, tmp_path: Path) -> None:
    second = [{"type": "synthesis", "id": "s2", "judges": ["j9"], "retries": 0}]
    jsonl_import(project=imported, path=write_jsonl(tmp_path / "t.jsonl", second))
    with pytest.raises(CommandError, match=r"2 syntheses \(s2, s1\): name one with --synthesis"):
        call_command("synthesis_funnel", "--project", "acme", stdout=io.StringIO())
    assert funnel_json("--synthesis", "s2")["cells"] == 0


def test_the_text_output_has_the_tables(imported: Project) -> None:
    out = io.StringIO()
    call_command("synthesis_funnel", "--project", "acme", stdout=out)
    text = out.getvalue()
    assert "Synthesis s1: 3 cells, 5 draws, 2 kept; cost per kept pair 0.500" in text
    assert "1\t2\t1\tj1=1 j2=0\t0\t0.500\t0.667" in text
    assert "By contrast" in text and "Position audit" in text


def member(project: Project, role: str) -> Client:
    user = User.objects.create_user(username=f"u-{role}", password="pw-for-tests-1")
    Membership.objects.create(user=user, project=project, role=role)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("role", "status"),
    [
        (Role.ADMIN, 200),
        (Role.REVIEWER, 200),
        (Role.EXPERT, 403),
        ("outsider", 404),
        ("anonymous", 302),
    ],
)
def test_reviewers_and_admins_see_the_page_experts_do_not(
    imported: Project, outsider: User, role: str, status: int
) -> None:
    if role == "outsider":
        client = Client()
        client.force_login(outsider)
    elif role == "anonymous":
        client = Client()
    else:
        client = member(imported, role)
    response = client.get(reverse("synthesis-funnel", args=["acme"]))
    assert response.status_code == status


def test_the_page_shows_table_1_table_8_cost_chart_and_audit(imported: Project) -> None:
    page = member(imported, Role.REVIEWER).get(reverse("synthesis-funnel", args=["acme"]))
    html = page.content.decode()
    assert "<svg" in html and 'class="bar s0"' in html
    # Retry 1 row: 2 draws, 1 kept, j1 1, j2 0, no failures, retention .5, cumulative .667.
    assert (
        '<tr><td>1</td><td class="num">2</td><td class="num">1</td><td class="num">1</td><td class="num">0</td><td class="num">0</td><td class="num">0.500</td><td class="num">0.667</td></tr>'
        in html
    )
    assert "per kept pair $0.5000" in html
    assert "By level contrast" in html and '<td class="num">1/1</td>' in html
    # Imported votes here have no slot order: the audit says so rather than showing zeros.
    assert "No vote recorded its slot order" in html
    assert 'name="synthesis"' not in html  # one synthesis: no picker


def test_a_picker_when_several_and_each_synthesis_reads_its_own_rows(
    imported: Project, tmp_path: Path
) -> None:
    records = [{**r, "synthesis": "s2"} if r["type"] == "synthesis_draw" else r
               for r in synthesis_records()]  # fmt: skip
    records = [
        {"type": "synthesis", "id": "s2", "judges": ["j1", "j2"], "retries": 1},
        *[r for r in records if r["type"] == "synthesis_draw" and r["cell"] == "c2"],
    ]
    for r in records[1:]:
        r["votes"] = [{"judge": "j1", "agrees": True, "slot_order": "ab"},
                      {"judge": "j2", "agrees": True, "slot_order": "ab"}]  # fmt: skip
    jsonl_import(project=imported, path=write_jsonl(tmp_path / "t.jsonl", records))
    client = member(imported, Role.ADMIN)
    url = reverse("synthesis-funnel", args=["acme"])
    newest = client.get(url).content.decode()
    assert '<select id="synthesis" name="synthesis">' in newest
    assert "<strong>s2</strong>" in newest and "1 cells, 1 draws, 1 kept" in newest
    # Both votes showed the better response second: 2 of 2, p = 2 * (1/4) = 0.5.
    assert (
        '<td>All votes</td><td class="num">2</td><td class="num">2</td><td class="num">1.000</td><td class="num">0.500</td>'
        in newest
    )
    older = client.get(url, {"synthesis": "s1"}).content.decode()
    assert "<strong>s1</strong>" in older and "3 cells, 5 draws, 2 kept" in older
    assert client.get(url, {"synthesis": "nope"}).status_code == 404


def test_empty_state_without_a_synthesis(project: Project) -> None:
    page = member(project, Role.ADMIN).get(reverse("synthesis-funnel", args=["acme"]))
    assert page.status_code == 200
    assert "No synthesis in this project yet" in page.content.decode()


def test_judge_names_are_escaped_in_the_table_and_chart(project: Project, tmp_path: Path) -> None:
    records = [r for r in synthesis_records() if r["type"] != "synthesis"]
    records.append({"type": "synthesis", "id": "s1", "judges": ["j1", "<b>j2</b>"], "retries": 1})
    for r in records:
        for v in r.get("votes", []):
            if v["judge"] == "j2":
                v["judge"] = "<b>j2</b>"
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))
    html = (
        member(project, Role.ADMIN).get(reverse("synthesis-funnel", args=["acme"])).content.decode()
    )
    assert "<b>j2</b>" not in html and "&lt;b&gt;j2&lt;/b&gt;" in html


@pytest.mark.parametrize(
    ("role", "pairs", "blind", "answers"),
    [(Role.ADMIN, 200, 200, 200), (Role.REVIEWER, 200, 200, 403), (Role.EXPERT, 403, 403, 403)],
)
def test_kept_pair_downloads_and_the_answers_only_for_admins(
    imported: Project, role: str, pairs: int, blind: int, answers: int
) -> None:
    client = member(imported, role)
    query = {"synthesis": "s1"}
    got = client.get(reverse("synthesis-kept-pairs", args=["acme"]), query)
    assert got.status_code == pairs
    if pairs == 200:
        lines = b"".join(got.streaming_content).decode().splitlines()
        assert [json.loads(line)["cell"] for line in lines] == ["c1", "c2"]
    for part, status in (("blind", blind), ("answers", answers)):
        got = client.get(reverse("synthesis-release", args=["acme", part]), query)
        assert got.status_code == status
    if role == Role.ADMIN:
        body = client.get(reverse("synthesis-release", args=["acme", "answers"]), query).json()
        assert [a["id"] for a in body] == ["c1", "c2"]
        page = client.get(reverse("synthesis-funnel", args=["acme"])).content.decode()
        assert "Release: answers" in page
    elif role == Role.REVIEWER:
        page = client.get(reverse("synthesis-funnel", args=["acme"])).content.decode()
        assert "Release: blind dataset" in page and "Release: answers" not in page
    assert (
        client.get(reverse("synthesis-release", args=["acme", "steering"]), query).status_code
        == 404
    )
    assert client.get(
        reverse("synthesis-kept-pairs", args=["acme"]), {"synthesis": "x"}
    ).status_code in {403, 404}


def test_the_api_gives_the_command_document_to_reviewers_only(imported: Project) -> None:
    url = reverse("api-synthesis-funnel", args=["acme"])
    assert member(imported, Role.EXPERT).get(url).status_code == 403
    assert Client().get(url).status_code == 403
    reviewer = member(imported, Role.REVIEWER)
    assert reviewer.get(url).json() == funnel_json()
    missing = reviewer.get(url, {"synthesis": "s9"})
    assert (missing.status_code, missing.json()) == (
        400, {"detail": "project 'acme' has no synthesis 's9'"},
    )  # fmt: skip


def test_a_generated_synthesis_shows_its_stages_and_never_its_steering(project: Project) -> None:
    # Rows as a run made here writes them: steering on the cell, usage and slot orders recorded.

    task = Task.objects.create(project=project, external_id="t1", prompt="p", domain="airline")
    dimension = Dimension.objects.create(project=project, name="clarity")
    synthesis = Synthesis.objects.create(
        project=project, external_id="run-1", judges=["j1"], retries=0
    )
    cell = SynthesisCell.objects.create(
        synthesis=synthesis, external_id="t1.clarity", task=task, dimension=dimension,
        low_level="ok", high_level="good", agent="m-1",
        steering={"reasoning": "SECRET-R", "bad": "SECRET-B", "ok": "SECRET-O", "good": "SECRET-G"},
    )  # fmt: skip
    draw = SynthesisDraw.objects.create(
        cell=cell, retry=0, outcome="kept", cost=0.04,
        usage={"steer": {"calls": 1, "tokens": 300}, "rollout": {"calls": 2, "tokens": 1000},
               "filter": {"calls": 1, "tokens": 700}},
    )  # fmt: skip
    SynthesisVote.objects.create(draw=draw, position=0, judge="j1", agrees=True, slot_order="ba")
    html = (
        member(project, Role.ADMIN).get(reverse("synthesis-funnel", args=["acme"])).content.decode()
    )
    assert (
        '<tr><td>rollout</td><td class="num">2</td><td class="num">1000</td><td class="num">2.000</td><td class="num">1000.000</td></tr>'
        in html
    )
    # One vote, better response in slot 1: share 0, p = 2 * (1/2) = 1.
    assert (
        '<td>judge: j1</td><td class="num">1</td><td class="num">0</td><td class="num">0.000</td><td class="num">1.000</td>'
        in html
    )
    assert "SECRET" not in html


def test_the_page_reads_the_same_statements_for_four_cells_as_for_one(project: Project) -> None:
    synthesis = synthesis_make(project)
    client = member(project, Role.REVIEWER)
    counted = []
    for task in ("t1", "t2", "t3", "t4"):
        draw_make(synthesis, task=task, votes=(True, False))
        draw_make(synthesis, task=task, retry=1)
        with CaptureQueriesContext(connection) as queries:
            page = client.get(reverse("synthesis-funnel", args=["acme"]))
        assert page.status_code == 200
        counted.append(len(queries))
    assert len(set(counted)) == 1, counted
    # Retry 1: four draws, four kept (every retry-0 draw was vetoed by the second judge).
    assert '<tr><td>1</td><td class="num">4</td><td class="num">4</td>' in page.content.decode()
