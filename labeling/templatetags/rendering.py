"""Rendering untrusted text. Markdown is turned into HTML with raw HTML disabled, then cleaned
by nh3 (Ammonia) to a short allow-list: no images (tracking pixels and broken-image tricks),
no scripts or event handlers, and links only to http, https and mailto, or relative ones that
stay on this site (not "//host", which takes the page's scheme to another host)."""

import json
import re
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
# A browser drops ASCII tabs and newlines anywhere in a URL, and leading spaces and control
# characters, and reads "\" as "/": "\\host", "/\host" and "/<tab>/host" are "//host" too.
# markdown-it percent-encodes those characters, which a browser then keeps as they are, but a
# server or proxy on the way may decode them, so their encoded forms count as well.
_URL_IGNORED = re.compile(r"[\t\n\r]|%0[9ad]", re.IGNORECASE)
_URL_BACKSLASH = re.compile(r"\\|%5c", re.IGNORECASE)
_URL_LEADING = "".join(map(chr, range(0x21)))


def _protocol_relative_dropped(element: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: no href or src that leads to another host without a scheme."""
    if attribute not in {"href", "src"}:
        return value
    read = _URL_BACKSLASH.sub("/", _URL_IGNORED.sub("", value)).lstrip(_URL_LEADING)
    return None if read.startswith("//") else value


@register.filter
def markdown_safe(text: str) -> SafeString:
    html = _markdown.render(text or "")
    cleaned = nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes={"a": {"href", "title"}},
        attribute_filter=_protocol_relative_dropped,
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
