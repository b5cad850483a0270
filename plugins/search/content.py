"""Content filters of the search task, registered by content type (SPEC §7)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from rccrawler.policy import media_type
from rccrawler.web.html import HTML_MEDIA_TYPES, ParsedPage, parse_html

SUMMARY_CHARS = 200
"""Length of a summary cut from the text when a page has no description."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """What a content filter finds in a document, by location."""

    url: str
    title: str = ""
    keywords: str = ""
    """Meta keywords as written (comma or space separated)."""
    summary: str = ""
    headings: tuple[str, ...] = ()
    text: str = ""
    """Body text."""


ContentFilter = Callable[[str, bytes, str], Content]
"""filter(url, body, content_type) -> Content."""

CONTENT_FILTERS: dict[str, ContentFilter] = {}
"""Media type (lowercase, no parameters) → its filter; other types get other_content()."""


def content_filter(*media_types: str) -> Callable[[ContentFilter], ContentFilter]:
    """Register a content filter for these media types (a task may add its own)."""

    def register(function: ContentFilter) -> ContentFilter:
        for kind in media_types:
            CONTENT_FILTERS[kind] = function
        return function

    return register


def file_name(url: str) -> str:
    """The last segment of a URL's path, unquoted ("" for a folder)."""
    return unquote(posixpath.basename(urlsplit(url).path))


def summarize(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    cut = text[:SUMMARY_CHARS].rsplit(" ", 1)[0]
    return cut + "…"


def html_content(url: str, parsed: ParsedPage) -> Content:
    """A parsed HTML page (``parse_html(full=True)``) as Content."""
    return Content(
        url=url,
        title=parsed.title or file_name(url) or url,
        keywords=parsed.meta_keywords,
        summary=parsed.meta_description or summarize(parsed.text),
        headings=parsed.headings,
        text=parsed.text,
    )


@content_filter(*HTML_MEDIA_TYPES)
def html_filter(url: str, body: bytes, content_type: str) -> Content:
    return html_content(url, parse_html(body, url, content_type, full=True))


@content_filter("text/plain")
def text_filter(url: str, body: bytes, content_type: str) -> Content:
    charset = "utf-8"
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    try:
        text = body.decode(charset, "replace")
    except LookupError:
        text = body.decode("utf-8", "replace")
    text = " ".join(text.split())
    return Content(url=url, title=file_name(url) or url, summary=summarize(text), text=text)


def other_content(url: str, body: bytes, content_type: str) -> Content:
    """Any other type: only the file name is known, and it is the title."""
    return Content(url=url, title=file_name(url) or url)


def extract_content(url: str, body: bytes, content_type: str) -> Content:
    """Run the content filter registered for this document's type."""
    return CONTENT_FILTERS.get(media_type(content_type), other_content)(url, body, content_type)
