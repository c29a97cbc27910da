"""Brute-force protection for logins: the app's login page, the Django admin's, and any other
caller of django.contrib.auth.authenticate, since the check sits in the authentication backend.

After LOGIN_FAILURES_PER_USERNAME wrong passwords for one user name, or LOGIN_FAILURES_PER_IP
from one client address (REMOTE_ADDR), every login for that name or from that address, the
right password included, is refused for LOGIN_LOCKOUT_SECONDS: the backend raises LoginLocked
before any password is checked, and the middleware answers 429 with Retry-After. A failure
count lives LOGIN_LOCKOUT_SECONDS from its first failure; a successful login clears its user
name's count (not its address's, or an attacker could clear theirs with an account of their
own). The counts are in Django's cache (config/cache_counts.py): one count for every web
process when CACHE_URL is set, which gunicorn.conf.py requires for more than one.

Our own rather than django-axes: axes 8.3.1 (the newest) is not declared for Django 6.1, refuses
authenticate() calls without a request (the test client's login, scripts), sends no Retry-After
without a lockout callable of ours anyway, and by default writes a database row per attempt."""

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from config.cache_counts import cache_count


class LoginLocked(Exception):
    """Too many failed logins for this user name or client address; retry_after in seconds."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"Too many failed logins: try again in {self.retry_after} s.")


def _username_key(username: str) -> str:
    return f"login-failures:user:{hashlib.sha256(username.encode()).hexdigest()[:32]}"


def _counters(request: HttpRequest | None, username: str) -> list[tuple[str, int]]:
    """(cache key, limit) of each count a login for `username` from `request` is held to."""
    counters = [(_username_key(username), settings.LOGIN_FAILURES_PER_USERNAME)]
    address = request.META.get("REMOTE_ADDR") if request is not None else None
    if address:
        counters.append((f"login-failures:ip:{address}", settings.LOGIN_FAILURES_PER_IP))
    return [(key, limit) for key, limit in counters if limit > 0]


def login_lockout_check(*, request: HttpRequest | None, username: str) -> None:
    """LoginLocked if the user name or the client address is locked out."""
    locks = cache.get_many([f"{key}:locked-until" for key, _ in _counters(request, username)])
    until = max(locks.values(), default=0.0)
    now = time.time()
    if until > now:
        raise LoginLocked(until - now)


def login_failure_record(*, request: HttpRequest | None, username: str) -> None:
    """Count a wrong password; a count that reaches its limit locks its key out."""
    window = settings.LOGIN_LOCKOUT_SECONDS
    for key, limit in _counters(request, username):
        if cache_count(key, timeout=window) >= limit:
            cache.set(f"{key}:locked-until", time.time() + window, timeout=window)
            cache.delete(key)  # counting starts afresh once the lockout ends


def login_success_record(*, username: str) -> None:
    cache.delete(_username_key(username))


class ThrottledModelBackend(ModelBackend):
    """Django's user-and-password backend behind the lockout check and the failure count."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> AbstractBaseUser | None:
        if username is None or password is None:
            return super().authenticate(request, username, password, **kwargs)
        login_lockout_check(request=request, username=username)
        user = super().authenticate(request, username, password, **kwargs)
        if user is None:
            login_failure_record(request=request, username=username)
        else:
            login_success_record(username=username)
        return user


class LoginLockedMiddleware:
    """A LoginLocked raised while a view logged someone in becomes 429 with Retry-After."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, LoginLocked):
            return None
        minutes = math.ceil(exception.retry_after / 60)
        response = render(request, "registration/locked_out.html", {"minutes": minutes}, status=429)
        response["Retry-After"] = str(exception.retry_after)
        return response
