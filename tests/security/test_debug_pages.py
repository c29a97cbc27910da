"""Debug pages: DEBUG is off unless set; with it on, the technical pages mask URL passwords and
the URL patterns are shown to staff only; with it off, 404 and 500 are friendly pages."""

import os
import subprocess
import sys
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from django.views.debug import get_default_exception_reporter_filter, technical_500_response
from django.views.defaults import server_error

from tests.conftest import REPO

# Kept far from the test code below: the technical page quotes the source lines around each
# frame of its traceback, and a URL written out there would be shown as source, not a value.
SECRETS = ("cache-pw-1", "broker-pw-2", "nested-pw-3", "environ-pw-4", "frame-pw-5")
CACHE_URL = "redis://:cache-pw-1@127.0.0.1:6379/1"
BROKER_URL = "amqp://workbench:broker-pw-2@127.0.0.1:5672//"
NESTED_URL = "redis://cache:nested-pw-3@10.0.0.5:6379/2"
ENVIRON_URL = "postgres://wb:environ-pw-4@db:5432/wb"
FRAME_URL = "amqp://worker:frame-pw-5@127.0.0.1:5672//"
MASK = "********************"  # SafeExceptionReporterFilter.cleansed_substitute


def test_debug_is_off_unless_set() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    show = "from django.conf import settings; print(settings.DEBUG)"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", show],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env=env | {"DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "k" * 60},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def failing_view(request: Any) -> None:
    broker = FRAME_URL  # a frame variable the page shows
    raise RuntimeError(f"cannot reach {broker.split('@')[1]}")


def test_the_technical_500_page_masks_url_passwords(settings: Any) -> None:
    settings.DEBUG = True
    settings.CACHE_URL = CACHE_URL
    settings.CELERY_BROKER_URL = BROKER_URL
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "shared": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": [NESTED_URL],
        },
    }
    # Under runserver the request's META holds the whole process environment.
    request = RequestFactory().get("/boom/", DATABASE_URL=ENVIRON_URL)
    try:
        failing_view(request)
    except RuntimeError:
        page = technical_500_response(request, *sys.exc_info()).content.decode()
    for secret in SECRETS:
        assert secret not in page, secret
    # The values are there, masked, so the page still says which host each one points at.
    assert f"redis://:{MASK}@127.0.0.1:6379/1" in page
    assert f"amqp://workbench:{MASK}@127.0.0.1:5672//" in page
    assert f"redis://cache:{MASK}@10.0.0.5:6379/2" in page
    assert f"postgres://wb:{MASK}@db:5432/wb" in page
    assert f"amqp://worker:{MASK}@127.0.0.1:5672//" in page


def test_debug_masks_passwords_in_the_databases_setting(settings: Any) -> None:
    databases = {**settings.DATABASES, "replica": {"NAME": "x", "OPTIONS": {"service": NESTED_URL}}}
    safe = get_default_exception_reporter_filter().cleanse_setting("DATABASES", databases)
    assert safe["replica"]["OPTIONS"]["service"] == f"redis://cache:{MASK}@10.0.0.5:6379/2"
    assert safe["default"]["NAME"] == settings.DATABASES["default"]["NAME"]


def test_a_404_is_a_friendly_page_with_debug_off(db: None) -> None:
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "Page not found" in page and 'href="/"' in page
    assert "URLconf" not in page


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_with_debug_on_only_staff_see_the_url_patterns(
    db: None, settings: Any, who: str, admin_user: User
) -> None:
    settings.DEBUG = True
    client = Client()
    if who == "member":
        client.force_login(admin_user)  # a project admin, not staff
    # An unknown URL fails in the resolver; a project one is not a member of, in its view.
    urls = ["/no-such-page/"] + (["/p/no-such-project/"] if who == "member" else [])
    for url in urls:
        response = client.get(url)
        page = response.content.decode()
        assert response.status_code == 404, url
        assert "Page not found" in page and "URLconf" not in page and "api/" not in page, url
    # The trailing-slash redirect still happens before any 404.
    assert client.get("/login").status_code == 301

    staff = Client()
    staff.force_login(User.objects.create_user("root", is_staff=True))
    assert "Using the URLconf defined in" in staff.get("/no-such-page/").content.decode()


def test_the_500_page_renders_without_a_context_or_the_database() -> None:
    # No db fixture: a query would raise here.
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page and 'href="/"' in page
