"""Revising an earlier label from My labels in a real browser: the pair opens with the earlier
choice shown, and saving replaces that label."""

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from labeling.models import Preference, QueueAssignment
from tests.browser import logged_in_page
from tests.labeling.test_label_browser import expert, label_current, labeling_project

pytestmark = pytest.mark.django_db(transaction=True)


def test_revise_the_oldest_label_from_my_labels(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    user = expert(labeling_project(tmp_path, tasks=4))
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")
    oldest = label_current(page, "ArrowLeft", "3")
    label_current(page, "ArrowRight", "2")
    newest = label_current(page, "t", "1")

    page.get_by_role("link", name="My labels").click()
    rows = page.locator("tr[data-my-label]")
    expect(rows).to_have_count(3)
    expect(rows.first).to_have_attribute("data-my-label", newest)
    expect(rows.first).to_contain_text("Tie")
    expect(rows.last).to_have_attribute("data-my-label", oldest)
    expect(rows.last).to_contain_text("Response 1")
    expect(rows.last).to_contain_text("certain")
    rows.last.get_by_role("link", name="Revise").click()

    card = page.locator("#pair-card")
    expect(card).to_have_attribute("data-assignment", oldest)
    expect(page.locator('#pair-card button[data-pick="left"]')).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(page.locator('#pair-card button[data-confidence="2"]')).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(page.locator("#pair-card [data-skip]")).to_have_count(0)  # revised, not skipped
    page.get_by_role("button", name="Response 2 →").click()  # the mouse changes the side
    page.keyboard.press("1")  # and the keyboard the confidence
    page.keyboard.press("Enter")
    expect(card).not_to_have_attribute("data-assignment", oldest)

    pair = QueueAssignment.objects.get(pk=oldest).pair
    labels = Preference.objects.filter(
        annotator__user=user, response_a=pair.response_a, response_b=pair.response_b
    )
    assert labels.count() == 2  # the earlier one kept as history, no longer current
    current = labels.get(is_current=True)
    assert current.confidence == 0
    assert Preference.objects.filter(annotator__user=user, is_current=True).count() == 3

    page.get_by_role("link", name="My labels").click()
    expect(rows.first).to_have_attribute("data-my-label", oldest)
    expect(rows.first).to_contain_text("Response 2")
    expect(rows.first).to_contain_text("a guess")
    # The task filter, typed and sent with Enter.
    task = pair.task.external_id
    page.get_by_label("Task id contains").fill(task)
    page.keyboard.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(task)
    assert page.dialogs_seen == []
