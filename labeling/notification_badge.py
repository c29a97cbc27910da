"""The top bar's count of unread notifications, for every page (a context processor): a
callable the template calls only where it shows the badge, so a page without the top bar (an
htmx partial) makes no query, and the badge's one indexed count runs once."""

from functools import partial
from typing import Any

from django.http import HttpRequest

from labeling.notifications import unread_count


def unread_notifications(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {}
    return {"unread_notifications": partial(unread_count, user=request.user)}
