"""API tokens: the machine credentials training jobs use for the reward API.

A token reads `wbt_<prefix>_<secret>`: the prefix (8 hex characters) tells tokens apart in
lists and logs; the secret is 32 random bytes. Only sha256 of the whole token is stored. A
salted slow hash (as for passwords) buys nothing here: the secret has 256 bits of entropy, so
no dictionary exists to slow down, and the digest is an exact-match key of a unique index, so
a lookup costs one indexed read and leaks nothing an attacker could use to guess the rest.

Revocation is immediate: every request reads the token row (one indexed read), so a revoked
token fails its next request on every web process. The row's `last_used_at` is written at most
once a minute per token, with a conditional UPDATE, so busy training jobs do not turn every
reward request into a write.

Also here, because they are how the API sees tokens: the DRF authentication class (Bearer),
the permission that matches a token to the URL's project and to a scope, and the per-token
rate limit."""

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import Q
from django.http import Http404
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from config.cache_counts import cache_count
from graders.models import ApiToken, TokenScope
from graders.sql_rows import Columns
from labeling.models import Project

TOKEN_PREFIX = "wbt"
PREFIX_BYTES = 4  # 8 hex characters: enough to tell a project's tokens apart at a glance
SECRET_BYTES = 32
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_RATE_PER_MINUTE = 100_000
BEARER = "Bearer"


class TokenInvalid(ValueError):
    """What was sent is not a usable token; the message is safe to show the caller."""


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_parse(raw: str) -> str:
    """The prefix of a well-formed token; TokenInvalid for anything else."""
    parts = raw.split("_", 2)
    if (
        len(parts) != 3
        or parts[0] != TOKEN_PREFIX
        or len(parts[1]) != PREFIX_BYTES * 2
        or not all(c in "0123456789abcdef" for c in parts[1])
        or len(parts[2]) < 32
    ):
        raise TokenInvalid(
            f"Malformed token: expected {TOKEN_PREFIX}_<prefix>_<secret> as shown when the "
            "token was created."
        )
    return parts[1]


def token_create(
    *,
    project: Project,
    name: str,
    scopes: list[str],
    rate_per_minute: int = 600,
    capture_rate: float | None = None,
    user: Any = None,
) -> tuple[ApiToken, str]:
    """Make a token; returns the row and the full token text, which is never stored and
    cannot be shown again. `capture_rate` overrides the project's (None: the project's)."""
    unknown = sorted(set(scopes) - set(TokenScope.values))
    if unknown or not scopes:
        raise ValueError(f"scopes must be some of {', '.join(TokenScope.values)}; got {scopes}")
    if not 1 <= rate_per_minute <= MAX_RATE_PER_MINUTE:
        raise ValueError(f"rate_per_minute must be between 1 and {MAX_RATE_PER_MINUTE}")
    if capture_rate is not None and not 0.0 <= capture_rate <= 1.0:
        raise ValueError("capture_rate must be between 0 and 1")
    prefix = secrets.token_hex(PREFIX_BYTES)
    raw = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    token = ApiToken.objects.create(
        project=project,
        name=name,
        prefix=prefix,
        secret_hash=token_hash(raw),
        scopes=sorted(set(scopes)),
        rate_per_minute=rate_per_minute,
        capture_rate=capture_rate,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    return token, raw


def token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token at once; revoking twice keeps the first time."""
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db(fields=["revoked_at"])
    return token


def token_authenticate(*, raw: str) -> ApiToken:
    """The active token `raw` stands for, with its project; TokenInvalid otherwise."""
    prefix = token_parse(raw)
    token = _token_by_hash(token_hash(raw))
    if token is None or token.prefix != prefix:
        raise TokenInvalid("Invalid token.")
    if token.revoked_at is not None:
        raise TokenInvalid("This token was revoked.")
    _last_used_touch(token)
    return token


_TOKEN, _PROJECT = Columns(ApiToken, "t"), Columns(Project, "p")


def _token_by_hash(digest: str) -> ApiToken | None:
    """The token with this hash and its project, in one hand-written query: every reward
    request reads it, and the ORM's form of it (select_related) cost 1.3 ms of CPU to 0.3
    for this (graders/sql_rows.py)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_TOKEN.sql}, {_PROJECT.sql} FROM {ApiToken._meta.db_table} t"
            f" JOIN {Project._meta.db_table} p ON p.id = t.project_id WHERE t.secret_hash = %s",
            [digest],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    token = _TOKEN.build(row)
    token.project = _PROJECT.build(row, len(_TOKEN))
    return token


def _last_used_touch(token: ApiToken) -> None:
    now = timezone.now()
    stale = now - LAST_USED_RESOLUTION
    if token.last_used_at is not None and token.last_used_at >= stale:
        return
    # Conditional, so that of the requests arriving together only one writes.
    ApiToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale), pk=token.pk
    ).update(last_used_at=now)
    token.last_used_at = now


# How DRF sees tokens --------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenPrincipal:
    """request.user for a token: authenticated, but no person, so nothing that checks a
    membership (labeling.access) ever lets it through."""

    token: ApiToken
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_active: bool = True
    is_staff: bool = False
    is_superuser: bool = False
    pk: None = None

    def __str__(self) -> str:
        return f"token {self.token.prefix}"


class ApiTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer wbt_...`, or Basic auth with the token as the password (any
    user name): OpenRLHF's remote reward client sends no headers of its own, but `requests`
    turns credentials in the URL (https://token:wbt_...@host/...) into Basic auth.

    No header (or another scheme) authenticates nobody, which the permission turns into 401;
    a malformed, unknown or revoked token is a 401 here."""

    def authenticate(self, request: Request) -> tuple[TokenPrincipal, ApiToken] | None:
        parts = get_authorization_header(request).split()
        scheme = parts[0].lower() if parts else b""
        if scheme not in (b"bearer", b"basic"):
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(
                "Malformed Authorization header: send 'Authorization: Bearer <token>'."
            )
        try:
            raw = parts[1].decode("ascii")
            if scheme == b"basic":
                raw = base64.b64decode(raw, validate=True).decode("ascii").partition(":")[2]
            token = token_authenticate(raw=raw)
        except (UnicodeDecodeError, binascii.Error):
            raise AuthenticationFailed("Malformed token: it must be ASCII.") from None
        except TokenInvalid as exc:
            raise AuthenticationFailed(str(exc)) from None
        return TokenPrincipal(token), token

    def authenticate_header(self, request: Request) -> str:
        return f'{BEARER} realm="api"'


def scope_required(scope: str) -> type[BasePermission]:
    """A permission: the request's token belongs to the URL's project (else 404, as for a
    person who is not a member: a token must not learn which other projects exist) and holds
    `scope` (else 403)."""

    scope = str(scope)  # a TokenScope member reads as its value

    class TokenScopePermission(BasePermission):
        message = f"This token lacks the {scope!r} scope."

        def has_permission(self, request: Request, view: Any) -> bool:
            token = request.auth
            if not isinstance(token, ApiToken):
                return False  # DRF answers 401: nobody authenticated
            if token.project.slug != view.kwargs.get("slug"):
                raise Http404
            return scope in token.scopes

    TokenScopePermission.__name__ = f"TokenScope_{scope}"
    return TokenScopePermission


class TokenRateThrottle(BaseThrottle):
    """At most `token.rate_per_minute` requests per token in each clock minute.

    A fixed window counted atomically in the cache (config/cache_counts.py: shared by every
    web process when CACHE_URL is set), where DRF's SimpleRateThrottle rewrites a history list
    and loses counts to concurrent requests. The price: a client can spend two windows' worth
    across a minute boundary."""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        now = timezone.now().timestamp()
        window = int(now // 60)
        # The prefix too: test databases reuse primary keys, and a new token must not inherit
        # an old one's count.
        key = f"reward-api:rate:{token.pk}:{token.prefix}:{window}"
        # The key outlives its window a little, so a slow request never recreates it.
        count = cache_count(key, timeout=90)
        if count <= token.rate_per_minute:
            return True
        self.retry_after = (window + 1) * 60 - now
        return False

    def wait(self) -> float | None:
        return self.retry_after
