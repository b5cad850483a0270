"""LinkCheckParsingThread: notes each page's external links for ``check_external``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.journal import journal_of
from plugins.linkcheck.external import check_external_enabled
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from rccrawler.html import ParsedPage
    from rccrawler.manager import ApplicationManager
    from rccrawler.records import PageData

EXTERNAL = "external"
"""The journal's kind for an external link (value: the URL as written)."""


class LinkCheckParsingThread(ParsingThread):
    """Parses as the seed spider does; with ``linkcheck.check_external`` its
    found_external_link hook journals every external link with the page it is on,
    so the unloader can check each once and name every page linking to it."""

    def __init__(self, manager: ApplicationManager, index: int) -> None:
        super().__init__(manager, index)
        self.journal = journal_of(manager, "parsing_thread")
        self.check_external = check_external_enabled(manager.settings)
        self.page_links: list[tuple[str, str]] = []

    def found_external_link(self, page: PageData, url: str) -> None:
        if self.check_external:
            self.page_links.append((EXTERNAL, url))

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> None:
        super().process_page(page, body, parsed)
        found, self.page_links = self.page_links, []
        self.journal.add_page(page.host, page.normalized_url, found)
