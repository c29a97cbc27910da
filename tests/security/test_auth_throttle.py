"""Brute force on the login pages: after a few wrong passwords for a user name, or many from one
address, every login for it is refused with 429 and Retry-After, the right password included,
on the app's login page and the Django admin's; the counts are shared by every process through
CACHE_URL's cache."""

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client, RequestFactory

from config.login_throttle import login_failure_record
from labeling.models import Project
from tests.conftest import REDIS_CACHE, REPO, redis_cache_use

PASSWORD = "pw-for-tests-1"  # tests/conftest.py's member()


@pytest.fixture(autouse=True)
def fresh_counts() -> Iterator[None]:
    """The counts live in the cache, which outlives a test's database."""
    cache.clear()
    yield
    cache.clear()


def attempt(client: Client, url: str, username: str, password: str) -> Any:
    return client.post(url, {"username": username, "password": password})


def locked_out(response: Any) -> bool:
    return response.status_code == 429 and 0 < int(response["Retry-After"]) <= 15 * 60


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_wrong_passwords_lock_the_user_name_out_even_for_the_right_password(
    project: Project, url: str
) -> None:
    User.objects.create_user("root", password=PASSWORD, is_staff=True, is_superuser=True)
    client = Client()
    for n in range(5):
        response = attempt(client, url, "root", f"guess-{n}")
        assert response.status_code == 200, n  # the form again, with its error
    refused = attempt(client, url, "root", "guess-5")
    assert locked_out(refused)
    assert "Too many failed logins" in refused.content.decode()

    right = attempt(client, url, "root", PASSWORD)
    assert locked_out(right)
    assert "_auth_user_id" not in client.session
    # From another address too: the user name is locked, not the client.
    elsewhere = Client(REMOTE_ADDR="192.0.2.7")
    assert locked_out(attempt(elsewhere, url, "root", PASSWORD))


def test_one_address_spraying_many_user_names_is_locked_out(project: Project) -> None:
    User.objects.create_user("victim", password=PASSWORD)
    sprayer = Client(REMOTE_ADDR="198.51.100.9")
    for n in range(20):
        assert attempt(sprayer, "/login/", f"user-{n}", "123456").status_code == 200, n
    assert locked_out(attempt(sprayer, "/login/", "victim", PASSWORD))
    # Another address logs the same user in: only the address was locked.
    assert attempt(Client(), "/login/", "victim", PASSWORD).status_code == 302


def test_a_flood_of_new_user_names_does_not_evict_a_lockout(project: Project) -> None:
    User.objects.create_user("root", password=PASSWORD)
    for n in range(5):
        attempt(Client(), "/login/", "root", f"guess-{n}")
    for n in range(400):  # from as many addresses, so none of them is locked out
        request = RequestFactory().post("/login/", REMOTE_ADDR=f"10.0.{n // 250}.{n % 250}")
        login_failure_record(request=request, username=f"flood-{n}")
    assert locked_out(attempt(Client(), "/login/", "root", PASSWORD))


def test_the_lockout_ends_after_its_window(project: Project, settings: Any) -> None:
    settings.LOGIN_LOCKOUT_SECONDS = 1
    User.objects.create_user("ann", password=PASSWORD)
    client = Client()
    for n in range(5):
        attempt(client, "/login/", "ann", f"guess-{n}")
    assert attempt(client, "/login/", "ann", PASSWORD).status_code == 429
    time.sleep(1.1)
    assert attempt(client, "/login/", "ann", PASSWORD).status_code == 302


def test_a_successful_login_clears_the_user_names_count(project: Project) -> None:
    User.objects.create_user("typo", password=PASSWORD)
    for n in range(4):
        attempt(Client(), "/login/", "typo", f"guess-{n}")
    assert attempt(Client(), "/login/", "typo", PASSWORD).status_code == 302
    for n in range(4):
        attempt(Client(), "/login/", "typo", f"again-{n}")
    assert attempt(Client(), "/login/", "typo", PASSWORD).status_code == 302


def test_failures_in_another_process_count_through_the_shared_cache(
    project: Project, settings: Any
) -> None:
    """A second web process (here a manage.py process) records the failures; this one refuses."""
    redis_cache_use(settings)
    # A name of its own: Redis outlives the test (its lockout expires on its own).
    username = f"shared-{uuid.uuid4().hex[:8]}"
    User.objects.create_user(username, password=PASSWORD)
    record = (
        "from config.login_throttle import login_failure_record\n"
        f"for _ in range(5): login_failure_record(request=None, username={username!r})"
    )
    other = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", record],
        cwd=REPO, env={**os.environ, "CACHE_URL": REDIS_CACHE}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert locked_out(attempt(Client(), "/login/", username, PASSWORD))
