"""`{% pager page %}`: Previous / Next links and "Page 2 of 5 · 120 tasks" for a Paginator
page, built with Django's own {% querystring %} so the request's other query parameters stay.

    {% pager page param="runs_page" %}                 the page number in another parameter,
                                                       so two lists on one page page apart
    {% pager page target="#task-table" noun="task" %}  links that htmx swaps into `target`
                                                       (and pushes to the address bar)
"""

from typing import Any

from django import template
from django.core.paginator import Page
from django.template.defaulttags import querystring

register = template.Library()


@register.inclusion_tag("_pager.html", takes_context=True)
def pager(
    context: template.Context,
    page: Page,
    param: str = "page",
    target: str = "",
    noun: str = "item",
    nouns: str = "",
) -> dict[str, Any]:
    def url(number: int) -> str:
        return str(querystring(context, **{param: number}))

    count = page.paginator.count
    return {
        "page": page,
        "previous": url(page.previous_page_number()) if page.has_previous() else None,
        "next": url(page.next_page_number()) if page.has_next() else None,
        "target": target,
        "counted": f"{count} {noun if count == 1 else nouns or noun + 's'}",
    }
