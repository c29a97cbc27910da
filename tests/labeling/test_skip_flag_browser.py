"""Skipping and flagging pairs in a real browser, by keyboard and by mouse, and an admin
resolving the flag."""

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from labeling.models import Membership, PairFlag, QueueAssignment, Role
from tests.browser import logged_in_page
from tests.labeling.test_label_browser import expert, labeling_project

pytestmark = pytest.mark.django_db(transaction=True)


def test_skip_and_flag_by_keyboard(browser: Any, live_server: Any, tmp_path: Path) -> None:
    user = expert(labeling_project(tmp_path, tasks=4))
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.keyboard.press("Enter")  # past the introduction
    card = page.locator("#pair-card")
    skipped = card.get_attribute("data-assignment")
    page.keyboard.press("s")
    expect(card).not_to_have_attribute("data-assignment", skipped)
    flagged = card.get_attribute("data-assignment")

    page.keyboard.press("f")
    dialog = page.locator("#flag-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("input[value=identical]")).to_be_focused()
    page.keyboard.press("ArrowDown")  # the next reason, chosen as focus moves onto it
    expect(dialog.locator("input[value=unclear]")).to_be_checked()
    page.keyboard.press("Tab")
    expect(dialog.locator("textarea")).to_be_focused()
    note = "asks two things; s d x ? are just letters here"
    page.keyboard.type(note)
    expect(card).to_have_attribute("data-assignment", flagged)  # typing skipped nothing
    expect(page.locator("#shortcuts")).to_be_hidden()
    page.keyboard.press("Tab")
    expect(dialog.get_by_role("button", name="Flag and skip")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(card).not_to_have_attribute("data-assignment", flagged)
    assert page.dialogs_seen == []

    mine = QueueAssignment.objects.filter(annotator__user=user)
    assert mine.get(pk=skipped).skipped_at is not None
    assert mine.get(pk=flagged).skipped_at is not None
    flag = PairFlag.objects.get()
    assert flag.pair_id == mine.get(pk=flagged).pair_id
    assert (flag.reason, flag.note) == ("unclear", note)
    # Neither pair comes back to this annotator.
    page.reload()
    expect(page.locator("#pair-card")).to_have_attribute("data-assignment", str(mine.last().pk))
    assert str(mine.last().pk) not in {skipped, flagged}


def test_skip_and_flag_by_mouse_and_an_admin_resolves_the_flag(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    project = labeling_project(tmp_path, tasks=4)
    user = expert(project)
    page = logged_in_page(browser, live_server, user)
    page.goto(f"{live_server.url}/p/lab/label/")
    page.get_by_role("button", name="Start").click()
    card = page.locator("#pair-card")
    skipped = card.get_attribute("data-assignment")
    page.get_by_role("button", name="Skip").click()
    expect(card).not_to_have_attribute("data-assignment", skipped)
    flagged = card.get_attribute("data-assignment")
    page.get_by_role("button", name="Flag…").click()
    dialog = page.locator("#flag-dialog")
    page.get_by_role("button", name="Flag and skip").click()  # no reason yet: not sent
    expect(dialog).to_be_visible()
    assert not PairFlag.objects.exists()
    dialog.get_by_text("Cancel").click()  # Cancel sends nothing and keeps the pair
    expect(dialog).to_be_hidden()
    expect(card).to_have_attribute("data-assignment", flagged)
    page.get_by_role("button", name="Flag…").click()
    dialog.get_by_label("Offensive").click()
    dialog.get_by_label("Note (optional)").fill("an insult in response 2")
    page.get_by_role("button", name="Flag and skip").click()
    expect(dialog).to_be_hidden()
    expect(card).not_to_have_attribute("data-assignment", flagged)
    assert QueueAssignment.objects.get(pk=skipped).skipped_at is not None
    flag = PairFlag.objects.get()
    assert (flag.reason, flag.note) == ("offensive", "an insult in response 2")

    admin = User.objects.create_user(username="ada", password="pw-for-tests-1")
    Membership.objects.create(user=admin, project=project, role=Role.ADMIN)
    page = logged_in_page(browser, live_server, admin)
    page.goto(f"{live_server.url}/p/lab/queue/")
    page.get_by_role("link", name="Flagged pairs").click()
    row = page.locator(f'tr[data-flag="{flag.pk}"]')
    expect(row).to_contain_text("Offensive")
    expect(row).to_contain_text("an insult in response 2")
    expect(row).to_contain_text("lena")
    row.get_by_role("button", name="Resolve").click()
    expect(page.get_by_text("No open flags.")).to_be_visible()
    flag.refresh_from_db()
    assert flag.resolved_by == admin
