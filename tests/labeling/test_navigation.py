"""The project menu: sections by role, every entry a page the role may open, the current
section and page marked, and the menus operable with the keyboard alone."""

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import Project
from tests.browser import logged_in_page

pytestmark = pytest.mark.django_db
FOCUSED = "document.activeElement.tagName + ' ' + document.activeElement.textContent"


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _menu(html: str) -> dict[str, list[tuple[str, str]]]:
    """{section: [(entry label, href)]} of the page's project menu."""
    nav = html[html.index('<nav class="project-nav"') : html.index("</nav>")]
    sections: dict[str, list[tuple[str, str]]] = {}
    for block in nav.split("<summary>")[1:]:
        name = block[: block.index("</summary>")]
        links = re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', block)
        sections[name] = [(label, href) for href, label in links]
    return sections


def test_each_role_sees_only_the_sections_and_pages_it_may_open(
    project: Project, admin_user: User, expert_user: User, reviewer_user: User
) -> None:
    overview = reverse("project-overview", args=[project.slug])
    seen = {}
    for user in (admin_user, expert_user, reviewer_user):
        client = _client(user)
        menu = _menu(client.get(overview).content.decode())
        seen[user.username] = {
            name: [label for label, _ in entries] for name, entries in menu.items()
        }
        for entries in menu.values():
            for label, href in entries:
                status = client.get(href).status_code
                assert status == 200, f"{user.username}: {label} ({href}) answers {status}"
    assert seen["eve"] == {
        "Label": ["Label pairs", "Grade criteria", "My labels", "Queue"],
        "Review": ["Agreement"],
        "Data": ["Tasks", "Splits", "Jobs"],
    }
    assert seen["rob"] == {
        "Label": ["Queue"],
        "Review": ["Rubrics", "Audits", "Agreement"],
        "Graders": ["Graders", "Search", "Synthesis", "Judges", "Judge accuracy"],
        "Data": ["Tasks", "Splits", "Export (JSONL)", "Lineage", "Jobs"],
    }
    assert list(seen["ada"]) == ["Label", "Review", "Graders", "Data", "Settings"]
    assert seen["ada"]["Label"] == [
        "Label pairs",
        "Grade criteria",
        "My labels",
        "Queue",
        "Flagged pairs",
    ]
    assert seen["ada"]["Data"] == ["Tasks", "Import", "Splits", "Export (JSONL)", "Lineage", "Jobs"]
    # Not staff: no Django admin.
    assert seen["ada"]["Settings"] == ["Project settings", "API tokens", "Annotators"]
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    staff_menu = _menu(_client(admin_user).get(overview).content.decode())
    assert staff_menu["Settings"][-1] == ("Django admin", reverse("admin:index"))


def test_the_current_section_and_page_are_marked(project: Project, admin_user: User) -> None:
    client = _client(admin_user)
    html = client.get(reverse("searches", args=[project.slug])).content.decode()
    assert '<details class="menu current">\n            <summary>Graders</summary>' in html
    assert html.count("menu current") == 1
    searches = reverse("searches", args=[project.slug])
    assert f'<a href="{searches}" aria-current="page">Search</a>' in html
    html = client.get(reverse("lineage", args=[project.slug])).content.decode()
    assert '<details class="menu current">\n            <summary>Data</summary>' in html
    overview = client.get(reverse("project-overview", args=[project.slug])).content.decode()
    assert "menu current" not in overview and 'class="project-home" href' in overview
    assert 'aria-current="page">Acme</a>' in overview


@pytest.mark.django_db(transaction=True)
def test_menus_open_with_enter_and_close_with_escape(
    browser: Any, live_server: Any, project: Project, admin_user: User
) -> None:
    page = logged_in_page(browser, live_server, admin_user)
    page.goto(live_server.url + reverse("task-list", args=[project.slug]))
    graders = page.locator("details.menu", has=page.locator("summary", has_text="Graders"))
    summary = graders.locator("summary")
    summary.focus()
    page.keyboard.press("Enter")
    assert graders.get_attribute("open") is not None
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "A Graders"  # the open menu's first entry is next
    page.keyboard.press("Escape")
    assert graders.get_attribute("open") is None
    assert page.evaluate(FOCUSED) == "SUMMARY Graders"  # back on the menu's summary
    # Opening one menu closes another; a click elsewhere closes it too.
    page.keyboard.press("Enter")
    data = page.locator("details.menu", has=page.locator("summary", has_text="Data"))
    data.locator("summary").click()
    assert data.get_attribute("open") is not None and graders.get_attribute("open") is None
    page.mouse.click(1300, 900)  # below the open menu, on nothing
    assert data.get_attribute("open") is None
    # The current section (Data, on the task list) is marked, and so is its page.
    assert "current" in (data.get_attribute("class") or "")
    assert data.locator('a[aria-current="page"]').text_content() == "Tasks"
    # On a phone the last menu's panel stays on screen: inside the width, no sideways scroll.
    page.set_viewport_size({"width": 420, "height": 800})
    settings = page.locator("details.menu", has=page.locator("summary", has_text="Settings"))
    settings.locator("summary").click()
    box = settings.locator("ul").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 420
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    assert page.dialogs_seen == []
    page.context.close()
