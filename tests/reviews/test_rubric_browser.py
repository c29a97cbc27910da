"""Reviewing a rubric in a real browser: a criterion edited inline with the keyboard and the
mouse, the validation error of an empty text, the re-check run finishing with the rewards and
accuracy before and after, and an earlier version restored.

The re-check runs really: the test stands in for the worker, executing each run the page
started (the message to the broker is caught), so the spinner and the polling are seen too."""

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from graders.grading import grading_run_execute
from labeling.models import Rubric
from reviews.rubric_edit import criterion_save
from reviews.rubric_recheck import recheck_start
from tests.browser import logged_in_page
from tests.fakes.openai_server import FakeJudgeServer
from tests.reviews.conftest import CLAUSE, CLAUSE_FIXED

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_messages() -> Iterator[mock.MagicMock]:
    """The runs and jobs the page enqueues, caught instead of sent to a broker."""
    with (
        mock.patch("graders.tasks.grading_run_task") as runs,
        mock.patch("reviews.rubric_jobs.rubric_generation_task.delay_on_commit"),
    ):
        yield runs


def run_enqueued_last(runs: mock.MagicMock) -> int:
    return int(runs.delay_on_commit.call_args.args[0])


def test_reviewer_edits_a_criterion_inline_sees_the_recheck_and_restores(
    browser: Any,
    live_server: Any,
    worker_messages: mock.MagicMock,
    generated: Rubric,
    reviewer_user: User,
    fake_judge: FakeJudgeServer,
) -> None:
    grading_run_execute(run_id=recheck_start(rubric=generated, key=None, user=reviewer_user).pk)
    page = logged_in_page(browser, live_server, reviewer_user)
    page.goto(f"{live_server.url}/p/acme/rubrics/task/t0/")
    recheck = page.locator("#recheck")
    expect(recheck).to_have_attribute("data-state", "finished")
    c2 = page.locator('#rubric-panel li.criterion-row[data-key="c2"]')
    text = c2.locator("textarea")

    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(c2).to_be_focused()
    page.keyboard.press("Enter")  # edit; Escape leaves it unchanged
    expect(text).to_be_focused()
    expect(text).to_have_value(CLAUSE)
    page.keyboard.press("Escape")
    expect(page.locator("form[data-criterion-form]")).to_have_count(0)
    expect(c2).to_be_focused()

    c2.get_by_role("link", name="Edit").click()
    expect(text).to_be_focused()
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    page.keyboard.press("Enter")
    expect(c2.locator('[data-error="text"]')).to_contain_text("cannot be empty")
    expect(text).to_be_focused()
    expect(c2.locator('input[name="weight"]')).to_have_value("1.0")
    page.keyboard.type(CLAUSE_FIXED)
    page.keyboard.press("Enter")

    expect(c2.locator(".criterion-text")).to_have_text(CLAUSE_FIXED)
    expect(c2.locator("#recheck-spinner")).to_be_visible()
    expect(recheck).to_have_attribute("data-state", "running")
    expect(c2).to_be_focused()
    grading_run_execute(run_id=run_enqueued_last(worker_messages))  # as the worker would
    expect(recheck).to_have_attribute("data-state", "finished")
    expect(page.locator("#recheck-spinner")).to_have_count(0)
    expect(page.locator("[data-accuracy-before]")).to_have_text("0.667")
    expect(page.locator("[data-accuracy-after]")).to_have_text("1.000")
    expect(recheck).to_contain_text("after the edit of c2")
    expect(page.locator('#judgement tr[data-key="c2"]')).to_contain_text(CLAUSE_FIXED)

    page.get_by_role("button", name="Restore version 1").click()
    expect(c2.locator(".criterion-text")).to_have_text(CLAUSE)
    expect(page.locator("#rubric-panel h2")).to_contain_text("version 3")
    expect(page.locator('#history li[data-version="3"]')).to_contain_text(
        f"Reworded c2: “{CLAUSE_FIXED}” → “{CLAUSE}”"
    )
    grading_run_execute(run_id=run_enqueued_last(worker_messages))
    expect(page.locator("[data-accuracy-before]")).to_have_text("1.000")
    expect(page.locator("[data-accuracy-after]")).to_have_text("0.667")

    c2.click()  # the mouse focuses a row; Alt+↑ moves it
    page.keyboard.press("Alt+ArrowUp")
    expect(page.locator("#rubric-panel li.criterion-row").first).to_have_attribute("data-key", "c2")
    expect(c2).to_be_focused()

    page.keyboard.press("j")  # to c1, now the last row
    page.keyboard.press("Delete")
    expect(page.locator('#rubric-panel li.criterion-row[data-key="c1"]')).to_have_count(0)
    expect(c2).to_be_focused()  # the row above it, not the page
    assert page.dialogs_seen == []

    generated.refresh_from_db()
    assert generated.version == 5
    assert list(generated.items.values_list("key", "text")) == [("c2", CLAUSE)]
    assert list(generated.revisions.values_list("editor", flat=True))[1:] == ["rob"] * 4


def test_a_stale_save_shows_the_current_text_in_place_and_keeps_the_typed_one(
    browser: Any,
    live_server: Any,
    worker_messages: mock.MagicMock,
    generated: Rubric,
    reviewer_user: User,
) -> None:
    page = logged_in_page(browser, live_server, reviewer_user)
    page.goto(f"{live_server.url}/p/acme/rubrics/task/t0/")
    c2 = page.locator('#rubric-panel li.criterion-row[data-key="c2"]')
    c2.get_by_role("link", name="Edit").click()
    text = c2.locator("textarea")
    expect(text).to_be_focused()
    # Another reviewer saves the same criterion meanwhile.
    criterion_save(
        rubric=generated, seen_version=1, key="c2", text="Their wording.", weight=1, editor="ann"
    )
    page.keyboard.press("Control+A")
    page.keyboard.type("My wording.")
    page.keyboard.press("Enter")
    conflict = c2.locator(".conflict")
    expect(conflict).to_contain_text("Not saved.")
    expect(conflict.locator("[data-current-text]")).to_contain_text("Their wording.")
    expect(text).to_have_value("My wording.")
    expect(text).to_be_focused()  # the conflict's form is in place, ready to save again
    generated.refresh_from_db()
    assert generated.items.get(key="c2").text == "Their wording."
    page.keyboard.press("Enter")  # saving again, having read theirs, replaces it knowingly
    expect(c2.locator(".criterion-text")).to_have_text("My wording.")
    generated.refresh_from_db()
    assert generated.version == 3 and generated.items.get(key="c2").text == "My wording."
    assert page.dialogs_seen == []
