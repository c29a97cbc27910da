"""`{% pager page %}` or `{% pager page "runs_page" %}`: Previous / Next links for a Paginator
page, the page number kept in the given query parameter ("page" by default) so that two lists on
one page page apart, and the request's other query parameters kept as they are."""

from typing import Any

from django import template
from django.core.paginator import Page

register = template.Library()


@register.inclusion_tag("_pager.html", takes_context=True)
def pager(context: dict[str, Any], page: Page, param: str = "page") -> dict[str, Any]:
    query = context["request"].GET

    def url(number: int) -> str:
        changed = query.copy()
        changed[param] = str(number)
        return f"?{changed.urlencode()}"

    return {
        "page": page,
        "previous": url(page.previous_page_number()) if page.has_previous() else None,
        "next": url(page.next_page_number()) if page.has_next() else None,
    }
