"""The bulk capture endpoint (graders/capture_api.py): production logs as JSON Lines, all or
nothing, behind a token with the capture scope; and the runtime's CaptureTarget posting to it
over real HTTP (a live server)."""

import json
from collections.abc import Sequence
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from graders.engine.capture_client import CaptureTarget, capture_task_id
from graders.engine.programs import DocumentInput, ResponseInput, TaskInput
from graders.models import CapturedGroup, CapturedResponse, CaptureSource
from graders.tokens import token_create, token_revoke
from labeling.models import Project, Response, Split, Task

pytestmark = pytest.mark.django_db

URL = reverse("api-capture", args=["acme"])


@pytest.fixture(autouse=True)
def rate_counts_cleared() -> None:
    cache.clear()


@pytest.fixture
def stored_task(project: Project) -> Task:
    return Task.objects.create(project=project, external_id="t0", prompt="Review contract 0")


def capture_token(project: Project, scopes: Sequence[str] = ("capture",)) -> str:
    return token_create(project=project, name="logs", scopes=list(scopes))[1]


def send(
    client: Client, records: list[Any], raw: str, content_type: str = "application/x-ndjson"
) -> Any:
    body = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    return client.post(
        URL, body, content_type=content_type, headers={"Authorization": f"Bearer {raw}"}
    )


INLINE = {
    "prompt": "Summarise deal 9",
    "instructions": "",
    "documents": [{"id": "spa", "title": "SPA", "text": "Clause 9."}],
}
INLINE_ID = capture_task_id(
    prompt="Summarise deal 9", instructions="", documents=[("spa", "SPA", "Clause 9.")]
)


def test_a_log_is_stored_as_groups_of_task_run_step_and_group(
    client: Client, project: Project, stored_task: Task
) -> None:
    raw = capture_token(project)
    records = [
        {"type": "response", "id": "a", "task": "t0", "content": "first", "run": "r1", "step": 3, "reward": 0.25},
        {"type": "response", "id": "b", "task": "t0", "content": "second", "run": "r1", "step": 3},
        {"type": "response", "id": "c", "task": "t0", "content": "third", "run": "r1", "step": 4},
        {"type": "task", "id": INLINE_ID, **INLINE},
        {"type": "response", "id": "d", "task": INLINE_ID, "messages": [{"role": "assistant", "content": "hi"}]},
    ]  # fmt: skip
    answer = send(client, records, raw)
    assert answer.status_code == 200, answer.content
    assert answer.json() | {} == {
        "groups": 3, "captured_groups": 3, "captured_responses": 4, "duplicate_responses": 0,
        "not_kept": 0, "evicted": 0, "kept_labeled": 0, "tasks_created": 1,
    }  # fmt: skip
    step3 = CapturedGroup.objects.get(task=stored_task, step=3)
    assert (step3.run, step3.source, step3.token.name) == ("r1", CaptureSource.BULK, "logs")
    assert [(m.response.content, m.reward) for m in step3.members.all()] == [
        ("first", 0.25),
        ("second", None),
    ]
    made = Task.objects.get(external_id=INLINE_ID)
    assert made.split == Split.UNASSIGNED and made.prompt == "Summarise deal 9"
    assert made.responses.get().messages == [{"role": "assistant", "content": "hi"}]
    # Sending the same log again stores nothing new.
    again = send(client, records, raw).json()
    assert (again["captured_groups"], again["duplicate_responses"]) == (0, 4)


def test_one_bad_line_rejects_the_whole_log_naming_line_and_field(
    client: Client, project: Project, stored_task: Task
) -> None:
    raw = capture_token(project)
    records = [
        {"type": "response", "id": "a", "task": "t0", "content": "first", "run": "r1", "step": 3},
        {"type": "task", "id": INLINE_ID, **INLINE},
        {"type": "response", "id": "b", "task": "t0", "content": "second", "step": "three"},
        {"type": "task", "id": "my-task", "prompt": "Rewrite a stored task"},
        {"type": "response", "id": "c", "task": "nowhere", "content": "third"},
        {"type": "preference", "a": "a", "b": "b", "choice": "a", "provider": "human", "annotator": "x"},
        "{not json",
        {"type": "response", "id": "d", "task": "t0", "content": "x", "reward": "high"},
    ]  # fmt: skip
    answer = send(client, records, raw)
    assert answer.status_code == 400
    errors = {(e["line"], e["field"]) for e in answer.json()["errors"]}
    # Every bad line with its field: a bad step, a task id that is not its content's hash (a
    # log cannot rewrite a stored task), an unknown task, a record type a log cannot hold,
    # malformed JSON, a reward that is no number.
    assert errors == {
        (3, "step"),
        (4, "id"),
        (5, "task"),
        (6, "type"),
        (7, "(record)"),
        (8, "reward"),
    }
    assert "nothing was imported" in answer.json()["message"]
    assert not CapturedGroup.objects.exists() and not Response.objects.exists()
    assert list(Task.objects.values_list("external_id", flat=True)) == ["t0"]


def test_the_capture_scope_is_needed_and_a_revoked_token_cannot_capture(
    client: Client, project: Project, stored_task: Task
) -> None:
    line = [{"type": "response", "id": "a", "task": "t0", "content": "first"}]
    assert send(client, line, capture_token(project, ["reward"])).status_code == 403
    token, raw = token_create(project=project, name="logs", scopes=["capture"])
    token_revoke(token=token)
    assert send(client, line, raw).status_code == 401
    assert not CapturedGroup.objects.exists()


def test_only_json_lines_are_taken_within_the_size_limit(
    client: Client, project: Project, stored_task: Task, settings: Any
) -> None:
    raw = capture_token(project)
    line = [{"type": "response", "id": "a", "task": "t0", "content": "first"}]
    assert send(client, line, raw, content_type="application/json").status_code == 415
    assert send(client, line, raw, content_type="application/jsonl").status_code == 200
    image = client.post(URL, b"\x89PNG\r\n\x1a\n...", content_type="application/x-ndjson",
                        headers={"Authorization": f"Bearer {raw}"})  # fmt: skip
    assert image.status_code == 400
    assert [(e["line"], e["field"]) for e in image.json()["errors"]] == [(1, "(file)")]
    settings.CAPTURE_MAX_BYTES = 10
    too_big = send(client, line, raw)
    assert too_big.status_code == 413 and "CAPTURE_MAX_BYTES" in too_big.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_the_runtime_capture_target_posts_groups_the_endpoint_stores(live_server: Any) -> None:
    project = Project.objects.create(slug="acme", name="Acme")
    Task.objects.create(project=project, external_id="t0", prompt="Review contract 0")
    raw = capture_token(project)
    target = CaptureTarget(f"{live_server.url}{URL}", token=raw, run="grpo-1")
    stored = TaskInput("t0", "Review contract 0")
    inline = TaskInput(
        "prompt:abc", "Summarise deal 9", "", (DocumentInput("spa", "SPA", "Clause 9."),)
    )
    target.step = 7
    assert target.offer(
        stored, [ResponseInput("0", "good"), ResponseInput("1", "bad")], [0.9, None], stored=True
    )
    assert target.offer(inline, [ResponseInput("0", "fine")], [0.5], stored=False, step=8)
    target.close(timeout=30)
    assert (target.sent, target.failed, target.dropped) == (2, 0, 0)
    rows = CapturedResponse.objects.order_by("group__step", "position")
    assert [(r.group.run, r.group.step, r.response.content, r.reward) for r in rows] == [
        ("grpo-1", 7, "good", 0.9),
        ("grpo-1", 7, "bad", None),
        ("grpo-1", 8, "fine", 0.5),
    ]
    assert rows[2].task.external_id == INLINE_ID
