"""What Django's debug pages (DEBUG on) may show.

- UrlPasswordFilter (DEFAULT_EXCEPTION_REPORTER_FILTER): the technical 500 and 404 pages and
  error e-mails list every setting, the request's META (under runserver, the whole process
  environment) and each frame's variables. Django hides values by name (KEY, PASS, TOKEN...)
  but not URLs such as CACHE_URL, CELERY_BROKER_URL or DATABASE_URL, whose passwords sit in
  the userinfo; this masks `scheme://user:password@` in every string it is given, nested ones
  (DATABASES, CACHES) included.
- DebugNotFoundForStaffMiddleware: the technical 404 page lists every URL pattern; with DEBUG
  on only staff get it, everyone else the 404.html page DEBUG off shows.
"""

import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.views.debug import SafeExceptionReporterFilter
from django.views.defaults import page_not_found

# A password in a URL's userinfo: up to the '@' that ends it, never across a '/' (which must be
# percent-encoded there), so `http://host:8000/path@x` is left alone.
URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^\s:@/]*:)[^\s@/]*@", re.IGNORECASE)
MASKED = rf"\g<head>{SafeExceptionReporterFilter.cleansed_substitute}@"


def url_passwords_masked(value: Any) -> Any:
    return URL_PASSWORD.sub(MASKED, value) if isinstance(value, str) else value


class UrlPasswordFilter(SafeExceptionReporterFilter):
    def cleanse_setting(self, key: Any, value: Any) -> Any:
        # Dicts and lists come back through here item by item, so nested strings are masked.
        return url_passwords_masked(super().cleanse_setting(key, value))

    def cleanse_special_types(self, request: HttpRequest | None, value: Any) -> Any:
        return url_passwords_masked(super().cleanse_special_types(request, value))


def _technical_404_hidden(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(settings.DEBUG) and not (user is not None and user.is_staff)


class DebugNotFoundForStaffMiddleware:
    """Unknown URLs fail in the URL resolver, before any view and its process_exception, so
    they are resolved here first; a view's Http404 arrives at process_exception. Either way the
    answer is the page DEBUG off would give. Unknown URLs' 404 still passes back through
    CommonMiddleware, which redirects to the URL with a trailing slash when that one exists."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _technical_404_hidden(request):
            try:
                resolve(request.path_info, getattr(request, "urlconf", None))
            except Resolver404 as exc:
                return page_not_found(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404) and _technical_404_hidden(request):
            return page_not_found(request, exception)
        return None
