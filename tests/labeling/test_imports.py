import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from labeling import records as limits
from labeling.imports import ImportRejected, jsonl_import
from labeling.models import (
    CriterionGrade,
    Preference,
    Project,
    Response,
    RetiredCriterionGrade,
    Rubric,
    Task,
)
from tests.labeling.helpers import basic_records, db_state, write_jsonl


def rejected(project: Project, path: Path) -> ImportRejected:
    with pytest.raises(ImportRejected) as info:
        jsonl_import(project=project, path=path)
    return info.value


def test_valid_file_in_any_order_imports_every_record(project: Project, tmp_path: Path) -> None:
    report = jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    assert report.counts == {
        "dimension": 1, "task": 2, "response": 4, "rubric": 1, "criterion_grade": 1, "score": 2,
        "preference": 2, "judge_score": 3, "synthesis": 0, "synthesis_draw": 0,
    }  # fmt: skip
    trajectory = Response.objects.get(external_id="t1/r2")
    assert trajectory.messages[1]["tool_calls"][0]["name"] == "get_reservation"
    assert trajectory.source_model == "m-2"
    task = Task.objects.get(external_id="t1")
    assert (task.split, task.metadata, task.documents.get().text) == (
        "meta",
        {"k": 1},
        "No refunds after 24h.",
    )
    assert Task.objects.get(external_id="t2").split == "unassigned"
    label = Preference.objects.get(provider="human")
    assert (label.choice, label.confidence, label.dimension.name, label.annotator.name) == (
        "a",
        2,
        "correctness",
        "alice",
    )
    assert list(Rubric.objects.get().items.values_list("key", "weight")) == [
        ("c1", 2.0),
        ("c2", 1.0),
    ]


def test_importing_the_same_file_twice_changes_nothing(project: Project, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", basic_records())
    jsonl_import(project=project, path=path)
    before = db_state(project)
    jsonl_import(project=project, path=path)
    assert db_state(project) == before


def test_a_reimport_of_an_unchanged_file_says_nothing_changed(
    project: Project, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", basic_records())
    first = jsonl_import(project=project, path=path)
    assert first.changed and first.created == first.counts
    assert not any(first.updated.values()) and not any(first.unchanged.values())
    assert first.summary().startswith("Imported 16 lines: ") and "(16 created)" in first.summary()
    again = jsonl_import(project=project, path=path)
    assert not again.changed and again.unchanged == again.counts == first.counts
    assert not any(again.created.values()) and not any(again.updated.values())
    assert again.summary().startswith("Nothing changed: the project already holds every record")
    # The command says so too; --json keeps `lines` and `counts` and adds the split.
    out = io.StringIO()
    call_command("import_jsonl", str(path), project="acme", stdout=out)
    assert "Nothing changed" in out.getvalue() and "Imported" not in out.getvalue()
    out = io.StringIO()
    call_command("import_jsonl", str(path), project="acme", json=True, stdout=out)
    report = json.loads(out.getvalue())
    assert (report["lines"], report["counts"]) == (16, first.counts)
    assert report["changed"] is False and report["unchanged"] == first.counts
    assert not any(report["created"].values()) and not any(report["updated"].values())


def test_a_reimport_counts_what_it_created_updated_and_left_unchanged(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    records = basic_records()
    for record in records:
        if record["type"] == "task" and record["id"] == "t2":
            record["prompt"] = "Review the SPA again"
        if record["type"] == "score" and record["response"] == "t1/r2":
            record["value"] = 0.3
        if record["type"] == "preference" and record["provider"] == "human":
            record["choice"] = "b"
    records.append({"type": "response", "id": "t2/r3", "task": "t2", "content": "Memo C"})
    report = jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", records))
    changed = {kind: n for kind, n in report.updated.items() if n}
    assert changed == {"task": 1, "score": 1, "preference": 1}
    assert {kind: n for kind, n in report.created.items() if n} == {"response": 1}
    assert sum(report.unchanged.values()) == 16 - 3
    assert report.summary().endswith("(1 created, 3 updated, 13 unchanged).")
    # A split the app assigned is kept by a record without one, and is no change.
    Task.objects.filter(external_id="t2").update(split="eval")
    again = jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", records))
    assert not again.changed and Task.objects.get(external_id="t2").split == "eval"


def test_reimport_updates_in_place_and_keeps_label_history(
    project: Project, tmp_path: Path
) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    changed = [
        {"type": "task", "id": "t1", "domain": "airline", "prompt": "Cancel EHGLP3 now",
         "documents": [{"id": "faq", "text": "New doc"}]},
        # Same pair written the other way round, with the other winner: an edit, not a new pair.
        {"type": "preference", "a": "t1/r2", "b": "t1/r1", "choice": "a", "confidence": 1,
         "dimension": "correctness", "annotator": "alice"},
        {"type": "rubric", "task": "t1", "items": [{"id": "c1", "text": "Refuses.", "weight": 2.0}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", changed))
    task = Task.objects.get(external_id="t1")
    assert task.prompt == "Cancel EHGLP3 now"
    assert task.split == "meta"  # no split in the record: the assigned one stays
    assert list(task.documents.values_list("external_id", flat=True)) == ["faq"]
    history = Preference.objects.filter(annotator__name="alice").order_by("pk")
    assert [(p.is_current, p.choice, p.response_a.external_id) for p in history] == [
        (False, "a", "t1/r1"),
        (True, "a", "t1/r2"),
    ]
    rubric = Rubric.objects.get()
    assert rubric.version == 2
    assert [r.items for r in rubric.revisions.all()][-1] == [
        {"id": "c1", "text": "Refuses.", "weight": 2.0}
    ]
    assert rubric.items.get().grades.count() == 1  # c1's grade survives, c2 is gone


def test_a_reimport_that_drops_a_graded_criterion_keeps_the_grade_for_its_return(
    project: Project, tmp_path: Path
) -> None:
    records = basic_records()
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", records))
    rubric_record = next(r for r in records if r["type"] == "rubric")
    without_c1 = {**rubric_record, "items": rubric_record["items"][1:]}

    jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", [without_c1]))

    assert not CriterionGrade.objects.exists()
    retired = RetiredCriterionGrade.objects.get()
    assert (retired.item_key, retired.passed, retired.response.external_id) == ("c1", True, "t1/r1")

    jsonl_import(project=project, path=write_jsonl(tmp_path / "c.jsonl", [rubric_record]))

    grade = CriterionGrade.objects.get()
    assert (grade.item.key, grade.passed, grade.annotator.name) == ("c1", True, "alice")
    assert not RetiredCriterionGrade.objects.exists()


@pytest.mark.parametrize(
    ("head", "named"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "a PNG image"),
        (b"PK\x03\x04" + b"\x00" * 100, "a ZIP archive (as .xlsx and .docx files are)"),
        (b'{"type": "task"}\n\x00\x01\x02', "a binary file (it has NUL bytes)"),
    ],
)
def test_a_file_that_is_not_text_is_refused_in_one_message(
    project: Project, tmp_path: Path, head: bytes, named: str
) -> None:
    path = tmp_path / "upload.jsonl"
    path.write_bytes(head + b"\n" * 50)
    error = rejected(project, path)
    assert [(e.line, e.field, e.message) for e in error.errors] == [
        (1, "(file)", f"this is {named}, not a JSON Lines file (one JSON object per line, UTF-8)")
    ]
    assert Task.objects.count() == 0


def test_a_reference_to_a_record_on_a_bad_line_points_at_that_line(
    project: Project, tmp_path: Path
) -> None:
    records = [
        {"type": "task", "id": "t1", "prompt": ""},  # an empty prompt is not allowed
        {"type": "response", "id": "t1/r1", "task": "t1", "content": "x"},
        {"type": "response", "id": "t2/r1", "task": "t2", "content": "y"},
    ]
    error = rejected(project, write_jsonl(tmp_path / "a.jsonl", records))
    messages = {e.line: e.message for e in error.errors}
    assert messages[2] == "task 't1' is on line 1, which has errors: fix that line first"
    assert messages[3] == "task 't2' not found in this file or the project"


def test_same_label_with_sides_swapped_is_not_a_change(project: Project, tmp_path: Path) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    swapped = [{"type": "preference", "a": "t1/r2", "b": "t1/r1", "choice": "b", "confidence": 2,
                "dimension": "correctness", "annotator": "alice"}]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", swapped))
    assert Preference.objects.filter(annotator__name="alice").count() == 1


TASK = {"type": "task", "id": "t9", "prompt": "p"}
RESPONSE = {"type": "response", "id": "t9/r1", "task": "t9", "content": "x"}
RESPONSE2 = {"type": "response", "id": "t9/r2", "task": "t9", "content": "y"}

BAD_LINES: list[tuple[str, Any, str, str]] = [
    ("malformed JSON", '{"type": "task", "id": ', "(record)", "malformed JSON"),
    ("not an object", "[1, 2]", "(record)", "object"),
    ("unknown type", {"type": "verdict", "id": "x"}, "type", "unknown type 'verdict'"),
    ("missing type", {"id": "x"}, "type", "missing 'type'"),
    ("missing field", {"type": "task", "id": "t3"}, "prompt", "Field required"),
    ("wrong type", {"type": "task", "id": 7, "prompt": "p"}, "id", "valid string"),
    ("bool as number", {"type": "score", "response": "t9/r1", "value": True}, "value", "valid number"),
    ("string as number", {"type": "score", "response": "t9/r1", "value": "0.5"}, "value", "valid number"),
    ("score out of range", {"type": "score", "response": "t9/r1", "value": 1.5}, "value", "less than or equal to 1"),
    ("confidence out of range", {"type": "preference", "a": "t9/r1", "b": "t9/r2", "choice": "a",
                                 "confidence": 3, "annotator": "x"}, "confidence", "0, 1 or 2"),
    ("bad choice", {"type": "preference", "a": "t9/r1", "b": "t9/r2", "choice": "left",
                    "annotator": "x"}, "choice", "'a', 'b' or 'tie'"),
    ("human without annotator", {"type": "preference", "a": "t9/r1", "b": "t9/r2", "choice": "a"},
     "annotator", "needs an annotator"),
    ("self comparison", {"type": "preference", "a": "t9/r1", "b": "t9/r1", "choice": "a",
                         "annotator": "x"}, "b", "itself"),
    ("content and messages", {"type": "response", "id": "t9/r3", "task": "t9", "content": "x",
                              "messages": [{"role": "user", "content": "hi"}]}, "content", "exactly one"),
    ("bad role", {"type": "response", "id": "t9/r3", "task": "t9",
                  "messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role", "Input should be"),
    ("negative weight", {"type": "rubric", "task": "t9", "items": [{"id": "c", "text": "t", "weight": -1}]},
     "items.0.weight", "greater than 0"),
    ("duplicate rubric item ids", {"type": "rubric", "task": "t9", "items": [{"id": "c", "text": "t"},
                                   {"id": "c", "text": "u"}]}, "items", "unique"),
    ("NaN judge score", '{"type": "judge_score", "judge": "j", "response": "t9/r1", "score": NaN}',
     "score", "finite"),
    ("dangling task", {"type": "response", "id": "t9/r3", "task": "nope", "content": "x"}, "task",
     "task 'nope' not found"),
    ("dangling response", {"type": "score", "response": "nope", "value": 0.5}, "response",
     "response 'nope' not found"),
    ("dangling dimension", {"type": "preference", "a": "t9/r1", "b": "t9/r2", "choice": "a",
                            "annotator": "x", "dimension": "tone"}, "dimension", "dimension 'tone' not found"),
    ("unknown rubric item", {"type": "criterion_grade", "response": "t9/r1", "item": "c7",
                             "passed": True}, "item", "not in the task's expert rubric"),
    ("conflicting duplicate id", {"type": "task", "id": "t9", "prompt": "other"}, "id", "conflicts with line 1"),
    ("id over the size limit", {"type": "task", "id": "x" * (limits.MAX_ID + 1), "prompt": "p"}, "id",
     "at most 200 characters"),
    ("prompt over the size limit", {"type": "task", "id": "big", "prompt": "x" * (limits.MAX_PROMPT + 1)},
     "prompt", f"at most {limits.MAX_PROMPT} characters"),
    ("non-UTF-8 bytes", b'{"type": "task", "id": "t\xff", "prompt": "p"}', "(line)", "not UTF-8"),
    ("NaN in metadata", '{"type": "task", "id": "m", "prompt": "p", "metadata": {"x": [1, NaN]}}', "metadata", "NaN"),
    ("infinity in tool arguments", '{"type": "response", "id": "t9/r5", "task": "t9", "messages": [{"role": "assistant", "tool_calls": [{"name": "f", "arguments": {"n": 1e400}}]}]}',
     "messages.0.tool_calls.0.arguments", "infinite"),
    ("NUL character", '{"type": "task", "id": "n", "prompt": "a\\u0000b"}', "(line)", "NUL"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "line", "field", "message"), BAD_LINES, ids=[c[0] for c in BAD_LINES]
)
def test_a_bad_line_rejects_the_whole_file_and_writes_nothing(
    project: Project, tmp_path: Path, case: str, line: Any, field: str, message: str
) -> None:
    jsonl_import(
        project=project, path=write_jsonl(tmp_path / "base.jsonl", [TASK, RESPONSE, RESPONSE2])
    )
    before = db_state(project)
    good = {"type": "task", "id": "fresh", "prompt": "would be new"}
    path = write_jsonl(tmp_path / "bad.jsonl", [TASK, good, line])
    error = rejected(project, path)
    assert db_state(project) == before
    assert [(e.line, e.field) for e in error.errors] == [(3, field)], error.errors
    assert message in error.errors[0].message


def test_every_bad_line_is_reported_with_its_number(project: Project, tmp_path: Path) -> None:
    lines = [TASK, "{oops", RESPONSE, {"type": "score", "response": "t9/r1", "value": 7},
             {"type": "response", "id": "t9/r4", "task": "ghost", "content": "x"}]  # fmt: skip
    error = rejected(project, write_jsonl(tmp_path / "bad.jsonl", lines))
    assert [(e.line, e.field) for e in error.errors] == [(2, "(record)"), (4, "value"), (5, "task")]
    assert error.total == 3
    assert Task.objects.count() == 0


def test_preference_across_tasks_is_rejected(project: Project, tmp_path: Path) -> None:
    lines = [*basic_records(), {"type": "preference", "a": "t1/r1", "b": "t2/r1", "choice": "a",
                                "annotator": "bob"}]  # fmt: skip
    error = rejected(project, write_jsonl(tmp_path / "bad.jsonl", lines))
    assert [(e.line, e.field, e.message) for e in error.errors] == [
        (len(lines), "b", "responses a and b belong to different tasks")
    ]
    assert Task.objects.count() == 0


def test_a_response_cannot_move_to_another_task(project: Project, tmp_path: Path) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    before = db_state(project)
    moved = [{"type": "response", "id": "t1/r1", "task": "t2", "content": "moved"}]
    error = rejected(project, write_jsonl(tmp_path / "b.jsonl", moved))
    assert "already belongs to another task" in error.errors[0].message
    assert db_state(project) == before


def test_exact_repeats_within_a_file_are_harmless(project: Project, tmp_path: Path) -> None:
    report = jsonl_import(
        project=project, path=write_jsonl(tmp_path / "a.jsonl", [TASK, TASK, RESPONSE, RESPONSE])
    )
    assert report.counts["task"] == 1 and report.counts["response"] == 1
    assert report.lines == 4


def test_blank_lines_are_skipped_and_numbering_stays_true(project: Project, tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(TASK) + "\n\n   \n" + '{"type": "score"}\n')
    error = rejected(project, path)
    assert error.errors[0].line == 4


def test_ids_are_scoped_to_the_project(project: Project, tmp_path: Path) -> None:
    other = Project.objects.create(slug="other", name="Other")
    path = write_jsonl(tmp_path / "a.jsonl", basic_records())
    jsonl_import(project=project, path=path)
    jsonl_import(project=other, path=path)
    assert Task.objects.filter(external_id="t1").count() == 2
    assert Response.objects.filter(project=other).count() == 4
