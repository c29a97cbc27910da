"""Labels kept in the browser for a retry belong to the user and project that made them
(issue 13 item 10): on a browser shared by two experts, one's kept label is never sent under
the other's session, and it is sent when its owner is back."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from labeling.models import Preference
from tests.labeling.test_label_browser import expert, labeling_project

pytestmark = pytest.mark.django_db(transaction=True)

SHARED_KEY = "workbench-pending-labels"  # the one key every user shared before


def log_in(page: Any, live_server: Any, user: User) -> None:
    page.goto(f"{live_server.url}/login/?next=/p/lab/label/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill("pw-for-tests-1")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#label-app")).to_be_attached()
    page.wait_for_load_state()  # label.js (deferred) is running


def log_out(page: Any) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()


def start(page: Any) -> str:
    page.keyboard.press("Enter")  # past the guidelines
    assignment = page.locator("#pair-card").get_attribute("data-assignment")
    assert assignment
    return assignment


def label(page: Any, key: str, confidence: str) -> None:
    page.keyboard.press(key)
    page.keyboard.press(confidence)
    page.keyboard.press("Enter")


def stored(page: Any) -> dict[str, Any]:
    return page.evaluate(
        "() => Object.fromEntries(Object.keys(localStorage).map((k) => [k, JSON.parse(localStorage.getItem(k))]))"
    )


@pytest.fixture
def shared_browser(browser: Any, live_server: Any, tmp_path: Path) -> Any:
    """One browser context (so one localStorage) that two experts of one project use in turn,
    recording every label POST with the user logged in when it was sent."""
    project = labeling_project(tmp_path)
    ann, ben = expert(project, "ann"), expert(project, "ben")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.session_user = None
    page.posts = []
    page.on(
        "request",
        lambda request: (
            page.posts.append((page.session_user, request.url))
            if request.method == "POST" and request.url.endswith("/submit/")
            else None
        ),
    )
    yield page, ann, ben
    context.close()


def test_a_kept_label_waits_for_its_owner_on_a_shared_browser(
    shared_browser: Any, live_server: Any
) -> None:
    page, ann, ben = shared_browser
    page.session_user = "ann"
    log_in(page, live_server, ann)
    ann_assignment = start(page)
    page.route("**/label/*/submit/", lambda route: route.fulfill(status=503, body="down"))
    label(page, "ArrowLeft", "2")
    expect(page.locator("[data-status]")).to_contain_text("Not saved yet")
    keys = [key for key in stored(page) if key.startswith(SHARED_KEY)]
    assert keys == [f"{SHARED_KEY}:{ann.pk}:lab"]
    log_out(page)
    page.unroute("**/label/*/submit/")

    page.session_user = "ben"
    log_in(page, live_server, ben)
    start(page)
    label(page, "ArrowRight", "3")
    expect(page.locator("[data-status]")).to_have_text("")
    page.wait_for_timeout(1500)  # time for any retry of what the browser keeps
    ann_url = f"/label/{ann_assignment}/submit/"
    assert [url for user, url in page.posts if user == "ben" and url.endswith(ann_url)] == []
    assert Preference.objects.filter(annotator__user=ben).count() == 1
    assert not Preference.objects.filter(annotator__user=ann).exists()
    assert stored(page)[f"{SHARED_KEY}:{ann.pk}:lab"][0]["assignment"] == ann_assignment
    log_out(page)

    page.session_user = "ann"
    with page.expect_response(lambda r: r.url.endswith(ann_url)) as sent:
        log_in(page, live_server, ann)
    assert sent.value.status == 200
    assert Preference.objects.filter(annotator__user=ann, confidence=1).count() == 1
    assert f"{SHARED_KEY}:{ann.pk}:lab" not in stored(page)


def test_labels_under_the_old_shared_key_go_to_their_owner_only(
    shared_browser: Any, live_server: Any
) -> None:
    """A label left under the shared key by an earlier version is adopted by its owner's
    label page (the server shows the pair's card only to its annotator) and sent from there;
    another user's page leaves it alone."""
    page, ann, ben = shared_browser
    page.session_user = "ann"
    log_in(page, live_server, ann)
    ann_assignment = start(page)
    ann_url = f"/p/lab/label/{ann_assignment}/submit/"
    entry = {"url": ann_url, "assignment": ann_assignment,
             "data": {"side": "right", "confidence": "2", "seconds": "4.00"}}  # fmt: skip
    page.evaluate(f"localStorage.setItem({SHARED_KEY!r}, {json.dumps(json.dumps([entry]))})")
    log_out(page)

    page.session_user = "ben"
    log_in(page, live_server, ben)
    start(page)
    label(page, "ArrowRight", "3")
    expect(page.locator("[data-status]")).to_have_text("")
    page.wait_for_timeout(1500)
    assert [url for user, url in page.posts if user == "ben" and url.endswith(ann_url)] == []
    assert stored(page)[SHARED_KEY] == [entry]
    log_out(page)

    page.session_user = "ann"
    with page.expect_response(lambda r: r.url.endswith(ann_url)) as sent:
        log_in(page, live_server, ann)
    assert sent.value.status == 200
    assert Preference.objects.filter(annotator__user=ann, confidence=2).count() == 1
    expect(page.locator("#pair-card")).to_be_attached()
    assert not [key for key in stored(page) if key.startswith(SHARED_KEY)]


def test_a_tab_left_open_keeps_its_label_when_another_user_logs_in(
    shared_browser: Any, live_server: Any
) -> None:
    """A tab of ann's still retrying after ben logged in in another tab sends with ann's CSRF
    token and ben's session cookie: the server refuses it (403) and the tab used to drop the
    label as refused. It now keeps it for ann, whose next label page sends it."""
    page, ann, ben = shared_browser
    page.session_user = "ann"
    log_in(page, live_server, ann)
    ann_assignment = start(page)
    ann_url = f"/label/{ann_assignment}/submit/"
    page.route("**/label/*/submit/", lambda route: route.fulfill(status=503, body="down"))
    label(page, "ArrowLeft", "3")
    expect(page.locator("[data-status]")).to_contain_text("Not saved yet")
    other = page.context.new_page()
    other.set_default_timeout(15_000)
    overview = other.goto(f"{live_server.url}/p/lab/")
    assert overview is not None and overview.ok
    log_out(other)
    page.session_user = "ben"
    log_in(other, live_server, ben)
    with page.expect_response(lambda r: r.url.endswith(ann_url), timeout=40_000) as refused:
        page.unroute("**/label/*/submit/")
    assert refused.value.status == 403
    expect(page.locator("[data-status]")).to_contain_text("session has ended or changed")
    assert stored(page)[f"{SHARED_KEY}:{ann.pk}:lab"][0]["assignment"] == ann_assignment
    assert not Preference.objects.exists()
    log_out(other)

    page.session_user = "ann"
    with other.expect_response(lambda r: r.url.endswith(ann_url)) as sent:
        log_in(other, live_server, ann)
    assert sent.value.status == 200
    assert Preference.objects.filter(annotator__user=ann, confidence=2).count() == 1
