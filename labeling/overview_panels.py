"""Alerts other apps show on the project home. Labeling never imports graders, so graders
registers its callable here from its AppConfig.ready(); the home calls every registered one.

A callable takes the viewer's ProjectAccess (so it can show nothing to experts) and returns
alert dicts with at least "text"; an optional "url" links the alert to its page. Callables
must stay cheap: they run on every view of the home."""

from collections.abc import Callable
from typing import Any

from labeling.access import ProjectAccess

OverviewAlerts = Callable[[ProjectAccess], list[dict[str, Any]]]

_REGISTERED: list[OverviewAlerts] = []


def overview_alerts_register(source: OverviewAlerts) -> None:
    """Register an alert source once (a second ready() call adds nothing)."""
    if source not in _REGISTERED:
        _REGISTERED.append(source)


def overview_alerts(access: ProjectAccess) -> list[dict[str, Any]]:
    """Every registered source's alerts for this viewer, in registration order."""
    return [alert for source in _REGISTERED for alert in source(access)]
