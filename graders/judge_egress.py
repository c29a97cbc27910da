"""The operator's egress policy for judge calls (graders/engine/egress.py), built from settings
in this one place, and its check of an endpoint as field errors.

Every judge call of the workbench (grading, search proposals, rubric generation, audits, the
reward API) gets its settings from graders.services.endpoint_settings, which attaches this
policy; the judge client then enforces it itself, connection by connection."""

import functools
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured, ValidationError

from graders.engine.egress import EgressPolicy, EgressRefused


def egress_policy() -> EgressPolicy:
    """The policy of the current settings (parsed once per distinct value)."""
    return _policy(
        tuple(settings.JUDGE_BASE_URL_HOSTS),
        tuple(settings.JUDGE_PRIVATE_HOSTS),
        tuple(settings.JUDGE_API_KEY_HOSTS),
        tuple(settings.JUDGE_API_KEY_ENV_ALLOWED),
        settings.JUDGE_API_KEY_ENV_PREFIX,
    )


@functools.lru_cache(maxsize=16)
def _policy(
    public: tuple[str, ...],
    private: tuple[str, ...],
    key_hosts: tuple[str, ...],
    key_names: tuple[str, ...],
    key_prefix: str,
) -> EgressPolicy:
    try:
        return EgressPolicy.parse(
            public_hosts=public,
            private_hosts=private,
            key_hosts=key_hosts,
            key_names=key_names,
            key_prefix=key_prefix,
        )
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None


@checks.register()
def egress_settings_check(**_: Any) -> list[checks.CheckMessage]:
    """A malformed egress setting stops `manage.py check`, migrate and runserver, not the
    first judge call."""
    try:
        egress_policy()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="graders.E001")]
    return []


def endpoint_egress_check(*, base_url: str, api_key_env: str, resolve: bool) -> EgressPolicy:
    """The policy, once it allows this base URL and key variable; else a ValidationError on
    the field at fault. `resolve` also looks the host's addresses up now (saving an endpoint);
    without it the judge client checks them when it connects."""
    policy = egress_policy()
    check = policy.check_resolved if resolve else policy.check
    try:
        check(base_url, api_key_env or None)
    except EgressRefused as exc:
        raise ValidationError({exc.field: f"{exc}."}) from None
    return policy
