"""Rendering untrusted text. Markdown is turned into HTML with raw HTML disabled, then cleaned
by nh3 (Ammonia) to a short allow-list: no images (tracking pixels and broken-image tricks),
no scripts or event handlers, and links only to http, https and mailto."""

import json
from typing import Any

import nh3
from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
_ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip


@register.filter
def markdown_safe(text: str) -> SafeString:
    html = _markdown.render(text or "")
    cleaned = nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes={"a": {"href", "title"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(cleaned)


@register.filter
def pretty_json(value: Any) -> str:
    """Tool arguments and results, indented when they are JSON; escaped by autoescape."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False)
