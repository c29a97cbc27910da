import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from labeling.demo import demo_load
from labeling.imports import jsonl_import
from labeling.models import Project, Task
from tests.labeling.helpers import basic_records, write_jsonl

HOSTILE = (
    '<script>alert(1)</script> <img src=x onerror="alert(2)"> [click](javascript:alert(3)) '
    "![pixel](http://evil.example/p.png)"
)


@pytest.fixture
def loaded(project: Project, tmp_path: Path) -> Project:
    records = [
        *basic_records(),
        {"type": "task", "id": "evil", "prompt": HOSTILE, "documents": [{"id": "d", "text": HOSTILE}]},
        {"type": "response", "id": "evil/r1", "task": "evil", "content": HOSTILE, "source": "secret-model-x"},
        {"type": "response", "id": "evil/r2", "task": "evil", "source": "secret-model-y", "messages": [
            {"role": "assistant", "content": HOSTILE, "tool_calls": [{"name": "lookup", "arguments": {"q": HOSTILE}}]},
            {"role": "tool", "name": "lookup", "content": HOSTILE}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", records))
    return project


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_untrusted_text_is_inert_on_the_task_page(loaded: Project, admin_user: User) -> None:
    html = logged_in(admin_user).get(reverse("task-detail", args=["acme", "evil"])).content.decode()
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert re.search(r"<img[^>]*onerror", html) is None
    assert 'href="javascript:' not in html


def test_markdown_documents_are_sanitized(loaded: Project, admin_user: User) -> None:
    html = logged_in(admin_user).get(reverse("task-detail", args=["acme", "evil"])).content.decode()
    document = html[
        html.index('class="markdown"') : html.index("</details>", html.index('class="markdown"'))
    ]
    assert "<img" not in document and "<script" not in document
    assert "href=" not in document  # the javascript: link stays literal text, never a link
    assert "&lt;script&gt;" in document


def test_experts_do_not_see_source_models(
    loaded: Project, expert_user: User, reviewer_user: User
) -> None:
    url = reverse("task-detail", args=["acme", "evil"])
    assert b"secret-model-x" not in logged_in(expert_user).get(url).content
    assert b"secret-model-x" in logged_in(reviewer_user).get(url).content
    api = reverse("api-task", args=["acme", "evil"])
    assert b"secret-model" not in logged_in(expert_user).get(api).content


def test_trajectory_renders_numbered_turns_with_collapsed_tools(
    loaded: Project, admin_user: User
) -> None:
    html = logged_in(admin_user).get(reverse("task-detail", args=["acme", "t1"])).content.decode()
    assert "1 · user" in html and "3 · tool · get_reservation" in html
    assert "<summary>Calls <code>get_reservation</code></summary>" in html
    assert "<summary>Tool result" in html


def test_task_browser_filters_paginates_and_serves_the_fragment(
    project: Project, admin_user: User, tmp_path: Path
) -> None:
    tasks = [{"type": "task", "id": f"t{i:02}", "domain": "legal" if i % 2 else "finance", "prompt": f"prompt {i}"}
             for i in range(60)]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "t.jsonl", tasks))
    client = logged_in(admin_user)
    url = reverse("task-list", args=["acme"])
    page = client.get(url, {"domain": "legal"}).content.decode()
    assert "Page 1 of 2 · 30 tasks" in page and "<html" in page
    fragment = client.get(
        url, {"domain": "legal", "page": 2}, headers={"HX-Request": "true"}
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="task-table">') and "<html" not in fragment
    assert "Page 2 of 2" in fragment and "t59" in fragment and "t58" not in fragment
    assert "prompt 7" in client.get(url, {"q": "prompt 7"}).content.decode()
    assert "No tasks match" in client.get(url, {"q": "nothing like this"}).content.decode()


def test_import_page_shows_every_bad_line_and_writes_nothing(
    project: Project, admin_user: User
) -> None:
    bad = b'{"type": "task", "id": "a", "prompt": "p"}\n{broken\n{"type": "score", "response": "x", "value": 2}\n'
    response = logged_in(admin_user).post(
        reverse("import", args=["acme"]), {"file": SimpleUploadedFile("f.jsonl", bad)}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        "Nothing was imported" in html
        and "malformed JSON" in html
        and "less than or equal to 1" in html
    )
    assert Task.objects.count() == 0


def test_import_page_imports_a_small_file_inline(project: Project, admin_user: User) -> None:
    good = b'{"type": "task", "id": "a", "prompt": "p"}\n'
    response = logged_in(admin_user).post(
        reverse("import", args=["acme"]), {"file": SimpleUploadedFile("f.jsonl", good)}, follow=True
    )
    page = response.content.decode()
    assert "Imported 1 line: 1 task (1 created)." in page
    again = logged_in(admin_user).post(
        reverse("import", args=["acme"]), {"file": SimpleUploadedFile("f.jsonl", good)}, follow=True
    )
    assert (
        "Nothing changed: the project already holds every record of the file (1 task)."
        in again.content.decode()
    )
    assert (
        'accept=".jsonl,.ndjson,.json,.txt,application/x-ndjson,application/json"'
        in logged_in(admin_user).get(reverse("import", args=["acme"])).content.decode()
    )
    assert Task.objects.filter(project=project).count() == 1


def test_overview_counts_and_empty_state(
    project: Project, admin_user: User, tmp_path: Path
) -> None:
    client = logged_in(admin_user)
    assert "No tasks yet" in client.get(reverse("project-overview", args=["acme"])).content.decode()
    jsonl_import(project=project, path=write_jsonl(tmp_path / "a.jsonl", basic_records()))
    data = client.get(reverse("api-project", args=["acme"])).json()
    assert (data["tasks"], data["responses"], data["trajectories"]) == (2, 4, 1)
    assert data["preferences"] == {"human": 1, "synthetic": 1, "judge": 0}
    assert data["splits"]["meta"] == 1 and data["splits"]["unassigned"] == 1


def test_pages_send_a_strict_content_security_policy(project: Project, admin_user: User) -> None:
    response = logged_in(admin_user).get(reverse("project-overview", args=["acme"]))
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self' 'nonce-" in policy and "unsafe-inline" not in policy


def test_demo_loads_once_with_three_domains_and_logins(db: None, settings: Any) -> None:
    settings.DEBUG = True  # the demo loads only on a development checkout
    project, created = demo_load()
    assert created
    assert set(Task.objects.filter(project=project).values_list("domain", flat=True)) == {
        "legal",
        "airline",
        "finance",
    }
    assert Task.objects.filter(project=project).count() == 15
    roles = dict(project.memberships.values_list("user__username", "role"))
    assert roles == {"admin": "admin", "expert": "expert", "reviewer": "reviewer"}
    again, created_again = demo_load()
    assert (again.pk, created_again) == (project.pk, False)
    client = Client()
    assert client.login(username="expert", password="workbench-demo")
    assert client.get(reverse("task-detail", args=["demo", "air-01"])).status_code == 200
