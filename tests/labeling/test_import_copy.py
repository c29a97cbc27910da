"""The import's write pass for tasks and responses, which on PostgreSQL goes by COPY through a
staging table (labeling/import_copy.py) and on SQLite through the ORM: both must give the same
rows, counts and errors, so these tests run on either database; the one that checks the COPY
path ran is PostgreSQL's alone."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.imports import ImportRejected, jsonl_import
from labeling.models import Document, Project, Response, Task
from labeling.records import MAX_RESPONSE_TEXT
from tests.labeling.helpers import db_state, write_jsonl

# What COPY's text format gives a meaning to (tab, newline, carriage return, backslash, "\N"
# for NULL, "\." for the end of data), JSON's escapes, and text beyond ASCII.
AWKWARD = 'a\tb\nc\r\nd \\ e \\N f \\. g \\\\t h "q" {"x": 1} café 日本 🎉 \u2028 end'


def many_records(tasks: int, per_task: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for t in range(tasks):
        records.append(
            {
                "type": "task",
                "id": f"t{t}",
                "prompt": f"Prompt {t}",
                "documents": [{"id": "d", "title": "Doc", "text": f"Text {t}"}],
            }
        )
        records.extend(
            {"type": "response", "id": f"t{t}/r{r}", "task": f"t{t}", "content": f"R {r}"}
            for r in range(per_task)
        )
    return records


def rejected(project: Project, path: Path) -> ImportRejected:
    with pytest.raises(ImportRejected) as info:
        jsonl_import(project=project, path=path)
    return info.value


def test_a_bad_reference_on_the_last_line_of_a_large_file_leaves_nothing(
    project: Project, tmp_path: Path
) -> None:
    records = many_records(1500, 3)
    records.append({"type": "response", "id": "late", "task": "no-such-task", "content": "x"})
    error = rejected(project, write_jsonl(tmp_path / "big.jsonl", records))
    assert [(e.line, e.field) for e in error.errors] == [(len(records), "task")]
    assert error.errors[0].message == "task 'no-such-task' not found in this file or the project"
    assert (Task.objects.count(), Document.objects.count(), Response.objects.count()) == (0, 0, 0)


def test_a_response_held_under_another_task_is_refused_by_line(
    project: Project, tmp_path: Path
) -> None:
    records = many_records(2, 1)
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", records))
    before = db_state(project)
    moved = [*records, {"type": "task", "id": "t9", "prompt": "New"}]
    moved[1] = {**moved[1], "task": "t1", "content": "changed"}  # t0/r0, held under t0
    error = rejected(project, write_jsonl(tmp_path / "b.jsonl", moved))
    assert [(e.line, e.field, e.message) for e in error.errors] == [
        (2, "task", "response 't0/r0' already belongs to another task")
    ]
    assert db_state(project) == before  # not even the new task t9


def test_a_large_reimport_changes_nothing_and_counts_what_changed(
    project: Project, tmp_path: Path
) -> None:
    records = many_records(1200, 10)
    path = write_jsonl(tmp_path / "a.jsonl", records)
    first = jsonl_import(project=project, path=path)
    assert first.counts["task"] == first.created["task"] == 1200
    assert first.counts["response"] == first.created["response"] == 12000
    assert (Task.objects.count(), Document.objects.count(), Response.objects.count()) == (
        1200,
        1200,
        12000,
    )
    before = db_state(project)
    again = jsonl_import(project=project, path=path)
    assert not again.changed and again.unchanged == again.counts == first.counts
    assert db_state(project) == before
    # One task gains a document, one loses its only one, one response changes, one is new.
    records[0] = {**records[0], "documents": [*records[0]["documents"], {"id": "e", "text": "E"}]}
    records[11] = {**records[11], "documents": []}
    records[12] = {**records[12], "content": "R 0, revised"}
    records.append({"type": "response", "id": "t0/new", "task": "t0", "content": "new"})
    report = jsonl_import(project=project, path=write_jsonl(tmp_path / "b.jsonl", records))
    assert (report.created["task"], report.updated["task"], report.unchanged["task"]) == (
        0,
        2,
        1198,
    )
    assert (
        report.created["response"],
        report.updated["response"],
        report.unchanged["response"],
    ) == (1, 1, 11999)
    t0, t1 = Task.objects.get(external_id="t0"), Task.objects.get(external_id="t1")
    assert list(t0.documents.values_list("external_id", "position")) == [("d", 0), ("e", 1)]
    assert not t1.documents.exists()
    assert Response.objects.get(external_id="t1/r0").content == "R 0, revised"


def test_awkward_values_arrive_as_written_and_reimport_unchanged(
    project: Project, tmp_path: Path
) -> None:
    long_text = ("ü\\\t" * (MAX_RESPONSE_TEXT // 3))[:MAX_RESPONSE_TEXT]
    metadata = {"note": AWKWARD, "nested": {"list": [AWKWARD, None, 1.5, True]}, "": "empty key"}
    messages = [
        {"role": "user", "content": AWKWARD},
        {"role": "assistant", "content": None, "tool_calls": [
            {"name": "lookup", "arguments": {"q": AWKWARD, "none": None}}]},
    ]  # fmt: skip
    records = [
        {"type": "task", "id": "t/é 1", "domain": "d\\x", "prompt": AWKWARD,
         "instructions": AWKWARD, "metadata": metadata, "split": "train",
         "documents": [{"id": "d\\1", "title": AWKWARD, "text": long_text}]},
        {"type": "response", "id": "t/é 1/r\\1", "task": "t/é 1", "content": long_text,
         "source": AWKWARD, "metadata": metadata},
        {"type": "response", "id": "r2", "task": "t/é 1", "messages": messages},
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "a.jsonl", records)
    jsonl_import(project=project, path=path)
    task = Task.objects.get(external_id="t/é 1")
    assert (task.domain, task.prompt, task.instructions, task.metadata, task.split) == (
        "d\\x",
        AWKWARD,
        AWKWARD,
        metadata,
        "train",
    )
    document = task.documents.get()
    assert (document.external_id, document.title, document.text) == ("d\\1", AWKWARD, long_text)
    response = Response.objects.get(external_id="t/é 1/r\\1")
    assert (response.content, response.source_model, response.metadata) == (
        long_text,
        AWKWARD,
        metadata,
    )
    assert response.messages is None
    trajectory = Response.objects.get(external_id="r2")
    assert trajectory.content == ""
    # As the ORM path stores messages: unset optional fields left out, free JSON kept whole.
    assert trajectory.messages == [
        {"role": "user", "content": AWKWARD},
        {"role": "assistant", "tool_calls": [
            {"name": "lookup", "arguments": {"q": AWKWARD, "none": None}}]},
    ]  # fmt: skip
    again = jsonl_import(project=project, path=path)
    assert not again.changed and again.unchanged["response"] == 2


@pytest.mark.parametrize("where", ["content", "metadata", "document"])
def test_a_nul_anywhere_is_refused_naming_its_line(
    project: Project, tmp_path: Path, where: str
) -> None:
    bad: dict[str, Any] = {"type": "response", "id": "t0/bad", "task": "t0", "content": "x"}
    if where == "content":
        bad["content"] = "before\u0000after"
    elif where == "metadata":
        bad["metadata"] = {"k": ["\u0000"]}
    else:
        bad = {"type": "task", "id": "t-bad", "prompt": "p",
               "documents": [{"id": "d", "text": "nul \u0000 here"}]}  # fmt: skip
    records = [*many_records(50, 2), bad]
    path = write_jsonl(tmp_path / "nul.jsonl", records)
    assert "\\u0000" in path.read_text()
    error = rejected(project, path)
    assert [(e.line, e.field) for e in error.errors] == [(len(records), "(line)")]
    assert "NUL" in error.errors[0].message
    assert not Task.objects.exists()


def test_a_raw_nul_byte_mid_file_is_refused_naming_its_line(
    project: Project, tmp_path: Path
) -> None:
    # Past the first 8 KiB, which the import sniffs for a binary file as a whole.
    lines: list[Any] = [json.dumps(r) for r in many_records(200, 1)]
    lines.insert(300, b'{"type": "task", "id": "x", "prompt": "a\x00b"}')
    path = write_jsonl(tmp_path / "raw.jsonl", lines)
    assert path.read_bytes().index(b"\x00") > 8192
    error = rejected(project, path)
    assert [(e.line, e.field) for e in error.errors] == [(301, "(line)")]
    assert not Task.objects.exists()


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the COPY path is PostgreSQL's; SQLite uses the ORM"
)
def test_on_postgresql_tasks_and_responses_go_through_staging_tables(
    project: Project, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", many_records(3, 2))
    with CaptureQueriesContext(connection) as queries:
        report = jsonl_import(project=project, path=path)
    statements = [query["sql"] for query in queries.captured_queries]
    assert any("CREATE TEMPORARY TABLE import_task_stage" in sql for sql in statements)
    assert any("CREATE TEMPORARY TABLE import_response_stage" in sql for sql in statements)
    assert not any('INSERT INTO "labeling_response"' in sql for sql in statements)
    assert (report.created["task"], report.created["response"]) == (3, 6)
    # The staging tables are gone once the import is over, so a second one can create them.
    jsonl_import(project=project, path=path)
