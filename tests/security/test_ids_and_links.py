"""Ids and links that would lead a browser somewhere else.

Task ids go into links as path segments (/p/<project>/tasks/<id>/, slashes kept), and a browser
resolves "." and ".." segments before it asks: an id ".." or "a/../../admin" is refused at
import, every other id (dots, percent signs, backslashes) links to its own task. Markdown links
that take the page's scheme to another host ("//host", "\\host", "/\\host") lose their href."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.imports import ImportRejected, jsonl_import
from labeling.models import Project, Response, Task
from tests.labeling.helpers import write_jsonl

pytestmark = pytest.mark.django_db

REFUSED_IDS = [".", "..", "a/../../admin", "../admin", "./x", "x/.", "a/./b", "x/.."]
# Valid today and kept: none of these has a "." or ".." segment once a browser reads the link.
KEPT_IDS = [
    "task-1.2", "airline/12", "...", "a..b", ".hidden", "v1./x", "%2e%2e", "..%2f..", ".%2E",
    "..\\..\\admin", "a\\..", " ..", "x/ ../y", "a b?c#d", "/lead", "trail/",
]  # fmt: skip
DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}", re.IGNORECASE)
# A link target in a tag (not in text, where "<" is escaped).
HREF = re.compile(r'<[a-z][^<>]*?\s(?:href|src)="([^"]*)"')


@pytest.fixture
def admin(admin_user: User) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def imported(project: Project, tmp_path: Path, records: list[dict[str, Any]]) -> None:
    jsonl_import(project=project, path=write_jsonl(tmp_path / "ids.jsonl", records))


def browser_segments(href: str) -> list[str]:
    """The path segments of `href` as the WHATWG URL parser sees them before it resolves dot
    segments: tabs and newlines dropped, "\\" read as "/", query and fragment cut."""
    path = re.split(r"[?#]", href.replace("\t", "").replace("\n", "").replace("\\", "/"))[0]
    return path.split("/")


# Ids ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", REFUSED_IDS)
def test_an_id_with_a_dot_segment_is_refused_at_import(
    project: Project, tmp_path: Path, task_id: str
) -> None:
    records = [
        {"type": "task", "id": "fine", "prompt": "p"},
        {"type": "task", "id": task_id, "prompt": "p"},
        {"type": "response", "id": task_id, "task": "fine", "content": "x"},
    ]

    with pytest.raises(ImportRejected) as rejected:
        imported(project, tmp_path, records)

    message = 'a "." or ".." between slashes is not allowed in an id: a link to it would lead to another page'
    assert [(e.line, e.field, e.message) for e in rejected.value.errors] == [
        (2, "id", message), (3, "id", message)
    ]  # fmt: skip
    assert Task.objects.count() == 0 and Response.objects.count() == 0


def test_an_id_with_a_line_break_is_refused_at_import(project: Project, tmp_path: Path) -> None:
    # A line break cannot go into a link at all: the task list would fail to render.
    with pytest.raises(ImportRejected) as rejected:
        imported(project, tmp_path, [{"type": "task", "id": "a\nb", "prompt": "p"}])

    assert [(e.field, e.message) for e in rejected.value.errors] == [
        ("id", "a line break is not allowed in an id")
    ]


def test_every_other_id_links_to_its_own_task(
    project: Project, tmp_path: Path, admin: Client
) -> None:
    imported(project, tmp_path, [
        {"type": "task", "id": task_id, "prompt": f"prompt of {json.dumps(task_id)}"}
        for task_id in KEPT_IDS
    ])  # fmt: skip

    listing = admin.get(reverse("task-list", args=["acme"]), {"per_page": 100}).content.decode()
    links = [
        h for h in HREF.findall(listing) if h.startswith("/p/acme/tasks/") and h != "/p/acme/tasks/"
    ]
    assert len(links) == len(KEPT_IDS)
    for href in links:
        assert not any(DOT_SEGMENT.fullmatch(s) for s in browser_segments(href)), href
    for task_id in KEPT_IDS:
        href = reverse("task-detail", args=["acme", task_id])
        assert href in links
        page = admin.get(href)
        assert page.status_code == 200, task_id
        assert page.context["task"].external_id == task_id


# Markdown links -------------------------------------------------------------------------------

DOCUMENT = "\n\n".join(
    [
        "[relative protocol](//evil.example/a)",
        "[backslashes](\\\\\\\\evil.example/b)",
        "[slash and backslash](/\\evil.example/c)",
        "[pointy](</\t/evil.example/d>)",
        "[spaced]( //evil.example/e)",
        "[by reference][ref]",
        "[ref]: //evil.example/f",
        "![image](//evil.example/g.png)",
        '<a href="//evil.example/h">raw html</a>',
        "[kept https](https://example.org/ok) [kept path](/p/acme/tasks/) [kept anchor](#top)",
    ]
)


def test_markdown_links_to_another_host_without_a_scheme_lose_their_href(
    project: Project, tmp_path: Path, admin: Client
) -> None:
    imported(project, tmp_path, [{"type": "task", "id": "doc", "prompt": "p",
                                  "documents": [{"id": "d", "text": DOCUMENT}]}])  # fmt: skip

    html = admin.get(reverse("task-detail", args=["acme", "doc"])).content.decode()

    targets = HREF.findall(html)
    assert not [t for t in targets if "/".join(browser_segments(t)).lstrip(" ").startswith("//")]
    assert not [t for t in targets if "evil.example" in t]
    for text in ("relative protocol", "backslashes", "slash and backslash", "by reference"):
        assert text in html  # the link text stays, as text
    assert 'href="https://example.org/ok"' in html
    assert 'href="/p/acme/tasks/" rel=' in html and 'href="#top"' in html
