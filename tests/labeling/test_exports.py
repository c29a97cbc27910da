import io
from pathlib import Path

from django.contrib.auth.models import User
from django.core.management import call_command

from labeling.exports import labels_records, pairs_records
from labeling.imports import jsonl_import
from labeling.jsonl import jsonl_write
from labeling.models import Project
from tests.labeling.helpers import basic_records, db_state, write_jsonl


def test_export_then_import_round_trips_to_the_same_state(project: Project, tmp_path: Path) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    exported = tmp_path / "export.jsonl"
    call_command("export_jsonl", project=project.slug, output=exported, stderr=io.StringIO())
    copy = Project.objects.create(slug="copy", name="Copy")
    jsonl_import(project=copy, path=exported)
    assert list(labels_records(project=copy)) == list(labels_records(project=project))
    # And re-importing the export into the original changes nothing.
    before = db_state(project)
    jsonl_import(project=project, path=exported)
    assert db_state(project) == before


def test_export_command_streams_to_stdout(project: Project, tmp_path: Path) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    out = io.StringIO()
    call_command("export_jsonl", project=project.slug, stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == sum(1 for _ in labels_records(project=project))
    assert lines[0].startswith('{"type":"dimension"')


def pref(
    a: str, b: str, choice: str, annotator: str, confidence: int | None = None
) -> dict[str, object]:
    record: dict[str, object] = {
        "type": "preference",
        "a": a,
        "b": b,
        "choice": choice,
        "annotator": annotator,
    }
    if confidence is not None:
        record["confidence"] = confidence
    return record


def test_pairs_export_keeps_strict_non_tie_majorities(project: Project, tmp_path: Path) -> None:
    task = {"type": "task", "id": "t", "prompt": "Which is better?"}
    responses = [
        {"type": "response", "id": f"r{i}", "task": "t", "content": f"answer {i}"} for i in range(4)
    ]
    labels = [
        # r0 vs r1: 2 of 3 for r1 (written once from each side) -> r1 chosen, confidence (2+1)/2.
        pref("r0", "r1", "b", "ann1", 2), pref("r1", "r0", "a", "ann2", 1), pref("r0", "r1", "a", "ann3", 0),
        # r0 vs r2: one each -> no majority, left out.
        pref("r0", "r2", "a", "ann1"), pref("r0", "r2", "b", "ann2"),
        # r0 vs r3: a tie and a pick -> the pick has 1 of 2 votes, not a majority.
        pref("r0", "r3", "tie", "ann1"), pref("r0", "r3", "a", "ann2"),
        # r2 vs r3: a single label without confidence is a majority of one.
        pref("r2", "r3", "b", "ann1"),
    ]  # fmt: skip
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "a.jsonl", [task, *responses, *labels])
    )
    pairs = list(pairs_records(project=project))
    assert [(p["chosen"], p["rejected"], p["confidence"]) for p in pairs] == [
        ("answer 1", "answer 0", 1.5),
        ("answer 3", "answer 2", None),
    ]
    assert {p["prompt"] for p in pairs} == {"Which is better?"} and {p["task"] for p in pairs} == {
        "t"
    }
    out = io.StringIO()
    assert jsonl_write(pairs, out) == 2


def test_pairs_export_ignores_judge_and_synthetic_votes(project: Project, tmp_path: Path) -> None:
    task = {"type": "task", "id": "t", "prompt": "p"}
    responses = [
        {"type": "response", "id": f"r{i}", "task": "t", "content": f"answer {i}"} for i in range(2)
    ]
    labels = [
        pref("r0", "r1", "a", "ann1"),
        {
            "type": "preference",
            "a": "r0",
            "b": "r1",
            "choice": "b",
            "provider": "judge",
            "annotator": "j1",
        },
        {
            "type": "preference",
            "a": "r0",
            "b": "r1",
            "choice": "b",
            "provider": "synthetic",
            "annotator": "g",
        },
    ]
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "a.jsonl", [task, *responses, *labels])
    )
    assert [p["chosen"] for p in pairs_records(project=project)] == ["answer 0"]


def test_a_label_snapshot_names_the_labels_and_changes_when_they_do(
    project: Project, tmp_path: Path
) -> None:
    from labeling.models import LabelSnapshot, Score
    from labeling.snapshots import label_snapshot_take

    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", basic_records()))
    first = label_snapshot_take(project=project)
    assert label_snapshot_take(project=project) == first  # unchanged labels, same snapshot
    assert first.counts["scores"] == Score.objects.count() > 0
    score = Score.objects.first()
    Score.objects.filter(pk=score.pk).update(value=1.0 - score.value)
    changed = label_snapshot_take(project=project)
    assert changed != first and changed.content_hash != first.content_hash
    Score.objects.filter(pk=score.pk).update(value=score.value)
    assert label_snapshot_take(project=project) == first
    assert LabelSnapshot.objects.count() == 2


def test_a_pairs_export_records_its_label_snapshot_on_the_page_the_api_and_the_command(
    project: Project, tmp_path: Path, admin_user: User
) -> None:
    from django.test import Client
    from django.urls import reverse

    from labeling.models import LabelExport

    jsonl_import(project=project, path=write_jsonl(tmp_path / "s.jsonl", basic_records()))
    client = Client()
    client.force_login(admin_user)
    page = client.get(reverse("export", args=[project.slug]) + "?kind=pairs")
    api = client.get(reverse("api-export", args=[project.slug]) + "?kind=pairs")
    err = io.StringIO()
    call_command(
        "export_jsonl",
        "--project",
        project.slug,
        "--kind",
        "pairs",
        stdout=io.StringIO(),
        stderr=err,
    )
    exports = list(LabelExport.objects.order_by("pk"))
    assert [e.kind for e in exports] == ["pairs"] * 3
    snapshot = exports[0].snapshot
    assert {e.snapshot_id for e in exports} == {snapshot.pk}  # no label changed in between
    header = f"{snapshot.pk}; sha256={snapshot.content_hash}"
    assert page["X-Label-Snapshot"] == api["X-Label-Snapshot"] == header
    assert f"snapshot-{snapshot.pk}.jsonl" in page["Content-Disposition"]
    assert header in err.getvalue()
    bogus = client.get(reverse("export", args=[project.slug]) + "?kind=bogus")
    assert bogus.status_code == 400
    assert bogus.content.decode() == "Unknown export kind 'bogus'; use one of: labels, pairs."
    assert LabelExport.objects.count() == 3  # nothing recorded for it
    assert exports[0].user == admin_user and exports[2].user is None
