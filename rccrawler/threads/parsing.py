"""ParsingThread: leases a downloaded page, extracts its links, stores them as pages and arcs."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rccrawler.html import ParsedPage, parse_html
from rccrawler.records import FoundLink, PageData, SkippedLink, SkipReason
from rccrawler.threads.base import CrawlerThread
from rccrawler.urls import link_scope, normalize_url, request_url

if TYPE_CHECKING:
    from rccrawler.data.base import TaskRows
    from rccrawler.manager import ApplicationManager


MAX_DECISIONS = 1_024
"""Link decisions a ParsingThread remembers (all sites together), then starts over: enough
for a site's navigation links, about 0.3 MB; 50,000 cost 30 MB of peak RSS on a 1M-URL
frontier (benchmarks/large_site.py), where every link is new."""


class ParsingThread(CrawlerThread):
    """Turns a page body into links (SPEC §5.2–§5.3); subclasses add work in process_page()."""

    work_kind: ClassVar[str] = "parse"
    full_parse: bool = False
    """Whether parse_html() extracts text fields too (a search index needs them)."""

    def __init__(self, manager: ApplicationManager, index: int) -> None:
        super().__init__(manager, index)
        # Parsers outlive the downloaders at a stop, to finish the pages in memory.
        self.stopping = manager.parsing_stopping
        crawl = manager.settings.crawl
        self.crawl = crawl
        self.options = crawl.normalize_options
        self._decisions: dict[str, dict[str, FoundLink | SkippedLink]] = {}
        self._decided = 0

    def step(self) -> bool:
        item = self.data.take_for_parsing()
        if item is None:
            return False
        page, body = item
        parsed = parse_html(
            body, page.url, page.content_type, parser=self.settings.parser, full=self.full_parse
        )
        links, skipped = self.classify_links(page, parsed)
        rows = self.process_page(page, body, parsed)
        self.data.store_parse(page.id, links, skipped, rows)
        return True

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        """Hook for crawl tasks: the page's rows for the task's tables (see
        ``ApplicationManager.task_tables``), stored with the page in one atomic call.

        Runs in this ParsingThread, outside the DataManager's lock, so slow work
        (indexing) belongs here. None (the default) stores nothing.
        """
        return None

    def classify_links(
        self, page: PageData, parsed: ParsedPage
    ) -> tuple[list[FoundLink], list[SkippedLink]]:
        """Split a page's links into ones to queue and ones skipped with a reason.

        Pages of a site repeat most of their links (navigation, index), so each
        absolute URL is decided once per site and thread (see :meth:`decide_link`).
        """
        if self._decided > MAX_DECISIONS:
            self._decisions.clear()
            self._decided = 0
        decisions = self._decisions.get(page.host)
        if decisions is None:
            decisions = self._decisions[page.host] = {}
        too_deep = page.level + 1 > self.crawl.max_depth
        links: list[FoundLink] = []
        skipped: list[SkippedLink] = []
        for url in parsed.links:
            decision = decisions.get(url)
            if decision is None:
                decision = decisions[url] = self.decide_link(url, page.host)
                self._decided += 1
            if isinstance(decision, SkippedLink):
                skipped.append(decision)
            elif too_deep:
                links.append(FoundLink(decision.url, decision.normalized_url, SkipReason.DEPTH))
            else:
                links.append(decision)
        return links, skipped

    def decide_link(self, url: str, host: str) -> FoundLink | SkippedLink:
        """One absolute link of a page of ``host``: to queue (depth aside), or why not."""
        scope = link_scope(url, host)
        if scope is not None:
            return SkippedLink(normalize_url(url) or url, SkipReason(scope))
        normalized = normalize_url(url, self.options)
        if normalized is None:
            return SkippedLink(url, SkipReason.SCHEME)
        include = self.crawl.include
        if include and not any(token in url for token in include):
            return SkippedLink(normalized, SkipReason.INCLUDE)
        if not self.robots_for(host).allowed(url):
            return SkippedLink(normalized, SkipReason.ROBOTS)
        return FoundLink(request_url(url), normalized)
