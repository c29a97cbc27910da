"""Deeply nested JSON from outside is a clear error naming the problem, never a RecursionError
(a 500) and never half-written: import lines (service, web page, API, manage.py import_jsonl),
the reward API body, any other JSON API body, and bundle uploads."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from graders.engine.baseline import baseline_program
from graders.models import Metagrader
from graders.services import metagrader_register
from graders.tokens import token_create
from labeling.imports import ImportRejected, jsonl_import
from labeling.json_input import MAX_JSON_DEPTH, JsonTooDeep, json_parse
from labeling.models import Project, Response, Task

pytestmark = pytest.mark.django_db

DEEP = 100_000
TOO_DEEP = f"nesting deeper than {MAX_JSON_DEPTH} levels"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_import_file(tmp_path: Path, depth: int = DEEP) -> bytes:
    """Two good lines, then a task whose metadata nests `depth` levels."""
    lines = [
        json.dumps({"type": "task", "id": "t1", "prompt": "p"}),
        json.dumps({"type": "response", "id": "r1", "task": "t1", "content": "x"}),
        '{"type": "task", "id": "t2", "prompt": "p", "metadata": {"a": ' + nested(depth) + "}}",
    ]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture
def admin(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def assert_nothing_written() -> None:
    assert Task.objects.count() == 0 and Response.objects.count() == 0


# The helper -----------------------------------------------------------------------------------


def test_the_bound_counts_levels_not_brackets_in_strings() -> None:
    assert json_parse(nested(MAX_JSON_DEPTH)) is not None
    assert json_parse(json.dumps(["[" * 10_000, [[{"a": "{" * 10_000}]] * 200])) is not None
    for deep in (nested(MAX_JSON_DEPTH + 1), nested(DEEP), '{"a":' * DEEP + "1" + "}" * DEEP):
        with pytest.raises(JsonTooDeep, match=TOO_DEEP):
            json_parse(deep)
        with pytest.raises(JsonTooDeep, match=TOO_DEEP):
            json_parse(deep.encode())


# Imports --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("depth", "field"),
    # Over pydantic's own limit (201 levels) the line is refused whole; under it, by field.
    [(DEEP, "(record)"), (300, "(record)"), (150, "metadata"), (MAX_JSON_DEPTH, "metadata")],
)
def test_a_deep_import_line_is_a_line_error_and_nothing_is_written(
    project: Project, tmp_path: Path, depth: int, field: str
) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(deep_import_file(tmp_path, depth))

    with pytest.raises(ImportRejected) as rejected:
        jsonl_import(project=project, path=path)

    assert [(e.line, e.field, e.message) for e in rejected.value.errors] == [(3, field, TOO_DEEP)]
    assert_nothing_written()


def test_deep_tool_arguments_are_a_field_error(project: Project, tmp_path: Path) -> None:
    call = '{"name": "f", "arguments": {"a": ' + nested(MAX_JSON_DEPTH) + "}}"
    line = '{"type": "response", "id": "r", "task": "t", "messages": [{"role": "assistant", '
    path = tmp_path / "deep.jsonl"
    path.write_text(line + '"tool_calls": [' + call + "]}]}\n")

    with pytest.raises(ImportRejected) as rejected:
        jsonl_import(project=project, path=path)

    field = "messages.0.tool_calls.0.arguments"
    assert [(e.line, e.field, e.message) for e in rejected.value.errors] == [(1, field, TOO_DEEP)]


def test_the_import_page_shows_the_line_error(
    project: Project, admin: Client, tmp_path: Path
) -> None:
    upload = SimpleUploadedFile("deep.jsonl", deep_import_file(tmp_path))

    page = admin.post(reverse("import", args=["acme"]), {"file": upload})

    assert page.status_code == 400
    assert TOO_DEEP in page.content.decode()
    assert_nothing_written()


def test_the_import_api_answers_400_with_the_line_error(
    project: Project, admin: Client, tmp_path: Path
) -> None:
    upload = SimpleUploadedFile("deep.jsonl", deep_import_file(tmp_path))

    answer = admin.post(reverse("api-import", args=["acme"]), {"file": upload})

    assert answer.status_code == 400
    assert answer.json()["errors"] == [{"line": 3, "field": "(record)", "message": TOO_DEEP}]
    assert_nothing_written()


def test_the_import_command_reports_the_line(project: Project, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(deep_import_file(tmp_path))

    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("import_jsonl", str(path), project="acme")

    assert f"{path}:line 3, (record): {TOO_DEEP}" in capsys.readouterr().err
    assert_nothing_written()


# JSON API bodies ------------------------------------------------------------------------------


@pytest.fixture
def scalar(project: Project) -> Metagrader:
    return metagrader_register(
        project=project, program=baseline_program("scalar").to_json(), origin="baseline"
    )


def deep_reward_bodies() -> list[str]:
    arguments = '{"a": ' + nested(MAX_JSON_DEPTH) + "}"
    message = '{"role": "assistant", "tool_calls": [{"name": "f", "arguments": ' + arguments + "}]}"
    return [
        nested(DEEP),
        '{"task": {"prompt": "p"}, "responses": ' + nested(DEEP) + "}",
        # Deep inside a field that takes free JSON: a tool call's arguments.
        '{"task": {"prompt": "p"}, "responses": [{"messages": [' + message + "]}]}",
    ]


@pytest.mark.parametrize("body", deep_reward_bodies(), ids=["array", "responses", "arguments"])
def test_a_deep_reward_api_body_is_a_400_naming_the_problem(
    client: Client, scalar: Metagrader, body: str
) -> None:
    token = token_create(project=scalar.project, name="trainer", scopes=["reward"])[1]

    answer = client.post(
        reverse("api-reward", args=["acme", scalar.pk]),
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert answer.status_code == 400
    assert TOO_DEEP in answer.json()["detail"]


def test_a_deep_body_to_any_json_api_is_a_400(project: Project, admin: Client) -> None:
    answer = admin.post(
        reverse("api-splits", args=["acme"]),
        '{"meta": ' + nested(DEEP) + "}",
        content_type="application/json",
    )

    assert answer.status_code == 400
    assert answer.json() == {"detail": f"JSON parse error - {TOO_DEEP}"}


# Bundles --------------------------------------------------------------------------------------


def test_a_deep_bundle_upload_is_refused_with_the_reason(project: Project, admin: Client) -> None:
    bundle = '{"format": "workbench-grader-bundle", "program": ' + nested(DEEP) + "}"
    upload = SimpleUploadedFile("bundle.json", bundle.encode())

    page = admin.post(reverse("bundle-import", args=["acme"]), {"bundle": upload}, follow=True)

    assert page.status_code == 200
    assert f"Not imported: {TOO_DEEP}" in [str(m) for m in page.context["messages"]]
    assert Metagrader.objects.count() == 0
