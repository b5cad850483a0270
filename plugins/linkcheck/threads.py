"""LinkCheckParsingThread: notes each page's external links for ``check_external``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.linkcheck.external import check_external_enabled
from rccrawler.data.tables import TaskTable
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.data.base import TaskRows
    from rccrawler.records import PageData
    from rccrawler.web.html import ParsedPage

EXTERNAL_LINKS = TaskTable(
    "linkcheck_external",
    (("host", "text"), ("url", "text"), ("found_on", "text")),
    key=("page_id", "url"),
    indexes=(("host",),),
)
"""One row per external link and page linking to it (``found_on`` is the page's URL)."""


class LinkCheckParsingThread(ParsingThread):
    """Parses as the seed spider does; with ``linkcheck.check_external`` its
    found_external_link hook notes every external link, and process_page() returns
    them as the page's rows, stored with the parse, so the unloader can check each
    once and name every page linking to it."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        self.check_external = check_external_enabled(context.settings)
        self.page_links: list[str] = []

    def found_external_link(self, page: PageData, url: str) -> None:
        if self.check_external:
            self.page_links.append(url)

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        found, self.page_links = self.page_links, []
        if not found or not self.follows_links(page, parsed):
            return None  # a nofollow page's links are not requested, external ones neither
        rows = [(page.host, url, page.normalized_url) for url in dict.fromkeys(found)]
        return {EXTERNAL_LINKS.name: rows}
