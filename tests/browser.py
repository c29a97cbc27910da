"""Headless Chromium (Debian's package) driven by Playwright, for tests that use the real UI."""

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium tries to reach Google hosts at start.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module. Not longer: Playwright's sync API keeps an event loop
    running in this thread, and later tests call asyncio.run() themselves."""
    if not os.path.exists(CHROMIUM):
        message = f"needs Chromium at {CHROMIUM} (Debian package 'chromium')"
        if os.environ.get("WORKBENCH_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    playwright_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an event loop in this thread; Django's ORM calls in the test
    # body are still synchronous and safe, but its async guard cannot tell.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with playwright_api.sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


def logged_in_page(browser: Any, live_server: Any, user: User) -> Any:
    """A fresh browser context with the user's session cookie set, failing on any dialog."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    page.set_default_timeout(15_000)

    def dialog_is_a_failure(dialog: Any) -> None:
        page.dialogs_seen.append(dialog.message)
        dialog.dismiss()

    page.dialogs_seen = []
    page.on("dialog", dialog_is_a_failure)
    return page
