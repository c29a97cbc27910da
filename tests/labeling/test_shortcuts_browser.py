"""The view keys and the "?" overlay in a real browser, on the label and criterion-grading
pages: D opens or closes the documents, X expands or collapses every tool call, "?" lists the
keys in a dialog that holds focus and gives it back; keys stay quiet while typing."""

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from labeling.imports import jsonl_import
from labeling.models import CriterionGrade, Project
from tests.browser import logged_in_page
from tests.labeling.helpers import write_jsonl
from tests.labeling.test_label_browser import expert, labeling_project, trajectory

pytestmark = pytest.mark.django_db(transaction=True)


def test_label_page_keys_buttons_and_the_overlay(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    user = expert(labeling_project(tmp_path, tasks=2, trajectories=True))
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")
    docs = page.locator("#pair-card aside.docs")
    docs_button = page.locator("[data-docs-toggle]")
    tools = page.locator("#pair-card .trajectory details")
    tools_button = page.locator("[data-tools-toggle]")
    expect(tools).to_have_count(4)  # a call and its result on each side

    # D closes and opens the documents panel; the button does the same with the mouse.
    page.keyboard.press("d")
    expect(docs).to_be_hidden()
    expect(docs_button).to_have_attribute("aria-expanded", "false")
    docs_button.click()
    expect(docs).to_be_visible()
    page.keyboard.press("d")
    expect(docs).to_be_hidden()
    page.keyboard.press("d")
    expect(docs).to_be_visible()

    # X expands every tool call, X again collapses them; one opened by hand counts.
    tools.first.locator("summary").click()
    page.keyboard.press("x")
    for n in range(4):
        expect(tools.nth(n)).to_have_attribute("open", "")
    expect(tools_button).to_contain_text("Collapse all tool calls")
    page.keyboard.press("x")
    for n in range(4):
        expect(tools.nth(n)).not_to_have_attribute("open", "")
    tools_button.click()
    for n in range(4):
        expect(tools.nth(n)).to_have_attribute("open", "")
    tools_button.click()
    expect(tools_button).to_contain_text("Expand all tool calls")

    # "?" from the keyboard: the list opens with focus inside, Tab stays inside, Esc closes
    # and focus goes back where it was.
    overlay = page.locator("#shortcuts")
    docs_button.focus()
    page.keyboard.press("?")
    expect(overlay).to_be_visible()
    expect(overlay).to_contain_text("open or close the documents panel")
    expect(overlay).to_contain_text("skip this pair")
    close = overlay.get_by_role("button", name="Close")
    expect(close).to_be_focused()
    page.keyboard.press("Tab")
    expect(close).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(close).to_be_focused()
    card = page.locator("#pair-card")
    assignment = card.get_attribute("data-assignment")
    page.keyboard.press("ArrowLeft")  # keys of the page stay quiet under the overlay
    page.keyboard.press("s")
    page.keyboard.press("Escape")
    expect(overlay).to_be_hidden()
    expect(docs_button).to_be_focused()
    expect(card).to_have_attribute("data-assignment", assignment)
    expect(page.locator('#pair-card button[data-pick="left"]')).to_have_attribute(
        "aria-pressed", "false"
    )

    # With the mouse: the Shortcuts button opens it, Close closes it, focus returns.
    opener = page.get_by_role("button", name="Shortcuts")
    opener.click()
    expect(overlay).to_be_visible()
    close.click()
    expect(overlay).to_be_hidden()
    expect(opener).to_be_focused()
    assert page.dialogs_seen == []


def test_grading_page_has_the_same_keys_and_its_own_list(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = Project.objects.create(slug="lab", name="Lab")
    records = [
        {"type": "task", "id": "t", "prompt": "Review", "split": "meta",
         "documents": [{"id": "d", "title": "Policy", "text": "Refunds within 30 days."}]},
        {"type": "response", "id": "t/r1", "task": "t", "messages": trajectory(0, 1)},
        {"type": "rubric", "task": "t", "items": [{"id": "c1", "text": "Names the cap."}, {"id": "c2", "text": "Cites clause 4."}]},
    ]  # fmt: skip
    jsonl_import(project=project, path=write_jsonl(tmp_path / "g.jsonl", records))
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/grade/")
    first = page.locator("#grading-card [data-item]").first
    expect(first).to_be_focused()
    docs = page.locator("#grading-card aside.docs")
    tools = page.locator("#grading-card .trajectory details")

    page.keyboard.press("n")  # into the first criterion's note: keys there are text
    page.keyboard.type("dx?")
    expect(docs).to_be_visible()
    expect(page.locator("#shortcuts")).to_be_hidden()
    expect(tools.first).not_to_have_attribute("open", "")
    page.keyboard.press("Escape")  # out of the note, to the first unmarked criterion
    expect(first).to_be_focused()

    page.keyboard.press("d")
    expect(docs).to_be_hidden()
    page.keyboard.press("D")
    expect(docs).to_be_visible()
    page.keyboard.press("x")
    expect(tools.first).to_have_attribute("open", "")
    expect(tools.last).to_have_attribute("open", "")

    overlay = page.locator("#shortcuts")
    page.keyboard.press("?")
    expect(overlay).to_be_visible()
    expect(overlay).to_contain_text("pass the focused criterion")
    expect(overlay).not_to_contain_text("skip this pair")
    page.keyboard.press("p")  # under the overlay nothing is marked
    page.keyboard.press("Enter")  # Enter presses Close, it does not submit the grades
    expect(overlay).to_be_hidden()
    expect(first).to_be_focused()
    assert page.locator("#grading-card input[type=radio]:checked").count() == 0
    page.keyboard.press("p")
    page.keyboard.press("p")
    page.keyboard.press("Enter")
    expect(page.locator("#grading-card .empty")).to_be_visible()
    assert CriterionGrade.objects.filter(annotator__user=user, passed=True).count() == 2
    note = CriterionGrade.objects.get(annotator__user=user, item__key="c1").note
    assert note == "dx?"

    # The mouse opens and closes the same list; the buttons work without keys too.
    page.goto(f"{live_server.url}/p/lab/grade/")  # nothing left: the page still has the list
    page.get_by_role("button", name="Shortcuts").click()
    expect(overlay).to_be_visible()
    overlay.get_by_role("button", name="Close").click()
    expect(overlay).to_be_hidden()
    assert page.dialogs_seen == []
