"""The demo synthesis (labeling/demo_data/demo_synthesis.jsonl, generated once with the bundled
135M judge): load_demo imports it once, the shipped file imports cleanly, and every page and
report that shows it carries its "mechanics only" label."""

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from labeling.demo import (
    DEMO_SYNTHESIS_FILE,
    DEMO_SYNTHESIS_ID,
    DEMO_SYNTHESIS_NOTE,
    demo_load,
    demo_synthesis_note,
)
from labeling.imports import jsonl_import
from labeling.models import (
    Dimension,
    Preference,
    Project,
    Response,
    Synthesis,
    SynthesisCell,
    SynthesisDraw,
    SynthesisVote,
    Task,
)
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

# What the generation stored (README, "The demo synthesis"): 5 airline tasks by 2 dimensions,
# cascade local-demo -> local-demo-2, R = 1.
CELLS, DRAWS, KEPT = 10, 20, 2


def shipped() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DEMO_SYNTHESIS_FILE.read_text("utf-8").splitlines()]


def counts() -> dict[str, int]:
    demo = Synthesis.objects.filter(project__slug="demo", external_id=DEMO_SYNTHESIS_ID)
    return {
        "syntheses": demo.count(),
        "cells": SynthesisCell.objects.filter(synthesis__in=demo).count(),
        "draws": SynthesisDraw.objects.filter(cell__synthesis__in=demo).count(),
        "kept": SynthesisDraw.objects.filter(cell__synthesis__in=demo, outcome="kept").count(),
        "votes": SynthesisVote.objects.filter(draw__cell__synthesis__in=demo).count(),
        "responses": Response.objects.filter(task__project__slug="demo").count(),
        "implied": Preference.objects.filter(
            task__project__slug="demo", provider="synthetic", annotator__name=DEMO_SYNTHESIS_ID
        ).count(),
    }


def load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", judge_url="http://127.0.0.1:9/v1", stdout=out)
    return out.getvalue()


def funnel_json(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("synthesis_funnel", "--project", "demo", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def reviewer() -> Client:
    client = Client()
    assert client.login(username="reviewer", password="workbench-demo")
    return client


def test_the_shipped_file_is_only_the_synthesis_and_the_rollouts_it_needs() -> None:
    records = shipped()
    kinds = Counter(r["type"] for r in records)
    draws = [r for r in records if r["type"] == "synthesis_draw"]
    named = {rid for d in draws for rid in d.get("responses", [])}

    assert set(kinds) <= {"synthesis", "synthesis_draw", "response"}
    assert kinds["synthesis"] == 1 and kinds["synthesis_draw"] == DRAWS
    assert {r["id"] for r in records if r["type"] == "response"} == named
    assert {d["task"] for d in draws} <= {f"air-0{n}" for n in range(1, 6)}
    # Steering text stays out of a labels file, so out of the demo too.
    assert "steering" not in json.dumps(records)


def test_the_shipped_file_imports_cleanly_and_twice_changes_nothing(settings: Any) -> None:
    settings.DEBUG = True
    project, _ = demo_load()  # the demo's tasks and dimensions, without the synthesis
    records = shipped()
    responses = sum(r["type"] == "response" for r in records)

    report = jsonl_import(project=project, path=DEMO_SYNTHESIS_FILE)

    assert report.created["synthesis"] == 1
    assert report.created["synthesis_draw"] == DRAWS
    assert report.created["response"] == responses
    again = jsonl_import(project=project, path=DEMO_SYNTHESIS_FILE)
    assert not again.changed


def test_load_demo_imports_the_synthesis_once(settings: Any) -> None:
    settings.DEBUG = True
    first = load_demo()
    loaded = counts()
    funnel = funnel_json()

    assert f"{DEMO_SYNTHESIS_NOTE}: imported." in first
    draws = [r for r in shipped() if r["type"] == "synthesis_draw"]
    assert loaded["syntheses"] == 1
    assert (loaded["cells"], loaded["draws"], loaded["kept"]) == (CELLS, DRAWS, KEPT)
    assert loaded["votes"] == sum(len(d["votes"]) for d in draws)
    assert loaded["implied"] == sum("responses" in d for d in draws) == DRAWS

    second = load_demo()

    assert "imported" not in second
    assert counts() == loaded
    assert funnel_json() == funnel


def test_the_funnel_command_carries_the_label(settings: Any) -> None:
    settings.DEBUG = True
    load_demo()

    report = funnel_json()
    assert (report["synthesis"], report["note"]) == (DEMO_SYNTHESIS_ID, DEMO_SYNTHESIS_NOTE)
    assert (report["cells"], report["draws"], report["kept"]) == (CELLS, DRAWS, KEPT)
    out = io.StringIO()
    call_command("synthesis_funnel", "--project", "demo", stdout=out)
    assert out.getvalue().splitlines()[0] == DEMO_SYNTHESIS_NOTE


def test_the_list_funnel_and_validation_pages_show_it_with_the_label(settings: Any) -> None:
    settings.DEBUG = True
    load_demo()
    synthesis = Synthesis.objects.get(project__slug="demo", external_id=DEMO_SYNTHESIS_ID)
    client = reviewer()

    listing = client.get(reverse("synthesis-runs", args=["demo"])).content.decode()
    funnel = client.get(reverse("synthesis-funnel", args=["demo"])).content.decode()
    validation = client.get(
        reverse("synthesis-validation", args=["demo", synthesis.pk])
    ).content.decode()

    for page in (listing, funnel, validation):
        assert DEMO_SYNTHESIS_NOTE in page
    funnel_link = f"{reverse('synthesis-funnel', args=['demo'])}?synthesis={DEMO_SYNTHESIS_ID}"
    assert funnel_link in listing
    assert reverse("synthesis-validation", args=["demo", synthesis.pk]) in listing
    row = listing.split('id="syntheses"')[1].split("</table>")[0]
    assert f'<td class="num">{CELLS}</td><td class="num">{DRAWS}</td>' in row
    assert f'<td class="num">{KEPT}</td>' in row and " · imported" in row
    assert f"{CELLS} cells, {DRAWS} draws, {KEPT} kept." in funnel
    # The nav reaches the list page from any project page.
    overview = client.get(reverse("project-overview", args=["demo"])).content.decode()
    assert f'href="{reverse("synthesis-runs", args=["demo"])}"' in overview


def test_only_the_demo_synthesis_is_labeled(settings: Any, tmp_path: Path) -> None:
    settings.DEBUG = True
    load_demo()
    demo = Project.objects.get(slug="demo")
    task = Task.objects.filter(project=demo).first()
    assert task is not None
    # Another synthesis of the demo, and one named like the demo's in another project.
    other = Project.objects.create(slug="acme", name="Acme")
    Dimension.objects.create(project=other, name="helpfulness")
    Synthesis.objects.create(project=other, external_id=DEMO_SYNTHESIS_ID, judges=["j1"])
    s1 = {"type": "synthesis", "id": "s1", "judges": ["j1"], "retries": 0}
    jsonl_import(project=demo, path=write_jsonl(tmp_path / "s.jsonl", [s1]))

    notes = {
        (s.project.slug, s.external_id): demo_synthesis_note(s) for s in Synthesis.objects.all()
    }

    assert notes == {
        ("demo", DEMO_SYNTHESIS_ID): DEMO_SYNTHESIS_NOTE,
        ("demo", "s1"): "",
        ("acme", DEMO_SYNTHESIS_ID): "",
    }
    assert funnel_json("--synthesis", "s1")["note"] is None
    page = reviewer().get(reverse("synthesis-funnel", args=["demo"]), {"synthesis": "s1"})
    assert DEMO_SYNTHESIS_NOTE not in page.content.decode()
