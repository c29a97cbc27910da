"""Kept pairs out as preference pairs and as the PADME release's two files, and the release
imported back as a synthesis (round trip)."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from graders.engine.synthesis.release import BLIND_KEYS, ReleaseInvalid
from graders.synthesis.funnel_selectors import synthesis_funnel
from graders.synthesis.kept_pairs import (
    ANSWERS_FILE,
    BLIND_FILE,
    kept_pairs_records,
    release_export,
    release_import,
)
from labeling.imports import jsonl_import
from labeling.models import Project, Response, Synthesis, SynthesisCell, SynthesisDraw
from tests.labeling.helpers import synthesis_records, write_jsonl


@pytest.fixture
def source(project: Project, tmp_path: Path) -> Synthesis:
    records = synthesis_records()
    for record in records:
        if record.get("id") == "a1":
            record["documents"] = [{"id": "policy", "title": "Policy", "text": "No refunds."}]
        if record.get("id") == "a2/good/0":
            del record["content"]
            record["messages"] = [{"role": "user", "content": "Return?"},
                                  {"role": "assistant", "content": "Gladly!"}]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", records))
    SynthesisCell.objects.filter(external_id="c1").update(
        steering={"reasoning": "r", "bad": "be curt", "ok": "be plain", "good": "be warm"}
    )
    return Synthesis.objects.get(external_id="s1")


def test_kept_pairs_export_as_chosen_rejected_with_the_higher_level_chosen(
    source: Synthesis,
) -> None:
    records = list(kept_pairs_records(synthesis=source))
    # Kept: c1's retry 1 (bad vs ok) and c2 (ok vs good); vetoed draws are left out.
    assert [(r["cell"], r["chosen"], r["rejected"], r["task"], r["dimension"]) for r in records] == [
        ("c1", "ok answer 1", "bad answer 1", "a1", "friendliness"),
        ("c2", [{"role": "user", "content": "Return?"}, {"role": "assistant", "content": "Gladly!"}],
         "Fine.", "a2", "friendliness"),
    ]  # fmt: skip
    assert records[0]["prompt"] == "Cancel my flight" and records[0]["confidence"] is None
    out = io.StringIO()
    call_command("synthesis_export", "--project", "acme", "--pairs", "-", stdout=out)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == records


def test_the_release_files_keep_answers_out_of_the_blind_file(
    source: Synthesis, tmp_path: Path
) -> None:
    assert release_export(synthesis=source, directory=tmp_path / "rel") == 2
    blind = json.loads((tmp_path / "rel" / BLIND_FILE).read_text())
    answers = json.loads((tmp_path / "rel" / ANSWERS_FILE).read_text())
    assert [set(item) for item in blind] == [set(BLIND_KEYS)] * 2
    text = json.dumps(blind)
    for secret in ("be curt", "be plain", "m-a", '"bad"', '"ok"'):
        assert secret not in text
    first = {a["id"]: a for a in answers}["c1"]
    assert (first["positive_hint"], first["negative_hint"], first["agent"]) == (
        "be plain", "be curt", "m-a",
    )  # fmt: skip
    c1 = {b["id"]: b for b in blind}["c1"]
    assert c1["prompt"] == "Cancel my flight\n\nDocument 1: Policy\nNo refunds."
    better = c1[f"response_{first['correct_response']}"]
    assert better == "ok answer 1"
    c2 = {b["id"]: b for b in blind}["c2"]
    assert "[Turn 2] assistant" in c2["response_1"] + c2["response_2"]


def test_a_release_imports_back_and_exports_the_same_files(
    source: Synthesis, tmp_path: Path
) -> None:
    release_export(synthesis=source, directory=tmp_path / "a")
    other = Project.objects.create(slug="other", name="Other")
    report = release_import(
        project=other, directory=tmp_path / "a", synthesis_id="s1", judges=["j1", "j2"]
    )
    assert report.created["synthesis_draw"] == 2 and report.created["response"] == 4
    copy = Synthesis.objects.get(project=other)
    release_export(synthesis=copy, directory=tmp_path / "b")
    for name in (BLIND_FILE, ANSWERS_FILE):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    funnel = synthesis_funnel(synthesis=copy)
    assert (funnel.cells, funnel.draws, funnel.kept, funnel.total.retention) == (2, 2, 2, 1.0)
    assert SynthesisCell.objects.get(synthesis=copy, external_id="c1").steering == {
        "bad": "be curt", "ok": "be plain",
    }  # fmt: skip
    # Imported again under its id: refused, nothing added.
    with pytest.raises(ReleaseInvalid, match="synthesis 's1' already exists"):
        release_import(project=other, directory=tmp_path / "a", synthesis_id="s1", judges=["j1"])


def test_a_release_into_its_own_project_reuses_the_held_rows(
    source: Synthesis, project: Project, tmp_path: Path
) -> None:
    release_export(synthesis=source, directory=tmp_path / "a")
    responses = Response.objects.count()
    prompt = project.tasks.get(external_id="a1").prompt
    report = release_import(
        project=project, directory=tmp_path / "a", synthesis_id="s1-release", judges=["release"]
    )
    assert Response.objects.count() == responses and report.created["task"] == 0
    assert project.tasks.get(external_id="a1").prompt == prompt  # never overwritten
    copy = SynthesisDraw.objects.get(
        cell__synthesis__external_id="s1-release", cell__external_id="c1"
    )
    original = SynthesisDraw.objects.get(cell__synthesis=source, cell__external_id="c1", retry=1)
    assert (copy.low_response_id, copy.high_response_id) == (
        original.low_response_id, original.high_response_id,
    )  # fmt: skip


def test_a_bad_release_is_refused_with_its_reason_and_nothing_written(
    source: Synthesis, tmp_path: Path
) -> None:
    release_export(synthesis=source, directory=tmp_path / "a")
    answers = json.loads((tmp_path / "a" / ANSWERS_FILE).read_text())
    answers[0]["correct_response"] = 3
    (tmp_path / "a" / ANSWERS_FILE).write_text(json.dumps(answers))
    other = Project.objects.create(slug="other", name="Other")
    with pytest.raises(
        CommandError, match=r"answers item 1 \(c1\): correct_response: must be 1 or 2"
    ):
        call_command("synthesis_import_release", str(tmp_path / "a"), "--project", "other",
                     "--synthesis", "s1", stdout=io.StringIO())  # fmt: skip
    with pytest.raises(CommandError, match=r"eval_dataset\.json: not found"):
        call_command("synthesis_import_release", str(tmp_path / "none"), "--project", "other",
                     "--synthesis", "s1", stdout=io.StringIO())  # fmt: skip
    assert not other.tasks.exists() and not Synthesis.objects.filter(project=other).exists()


def test_the_commands_write_and_read_a_release(source: Synthesis, tmp_path: Path) -> None:
    err = io.StringIO()
    call_command("synthesis_export", "--project", "acme", "--release", str(tmp_path / "r"),
                 stderr=err)  # fmt: skip
    assert "2 kept pairs written" in err.getvalue()
    Project.objects.create(slug="other", name="Other")
    out = io.StringIO()
    call_command("synthesis_import_release", str(tmp_path / "r"), "--project", "other",
                 "--synthesis", "copy", "--judges", "j1,j2", stdout=out)  # fmt: skip
    assert out.getvalue().startswith("Imported")
    assert Synthesis.objects.get(external_id="copy").judges == ["j1", "j2"]
