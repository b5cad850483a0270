"""ParsingThread: leases a downloaded page, extracts its links, stores them as pages and arcs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from rccrawler.policy import scope_skip
from rccrawler.records import FoundLink, PageData, SkippedLink, SkipReason
from rccrawler.threads.base import CrawlerThread
from rccrawler.web.html import ParsedPage, parse_html
from rccrawler.web.robots import meta_directives, robots_tag_directives
from rccrawler.web.urls import link_scope, normalize_url, request_url

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.data.base import TaskRows

logger = logging.getLogger(__name__)


class ParsingThread(CrawlerThread):
    """Turns a page body into links (SPEC §5.2–§5.3); subclasses add work in process_page()."""

    work_kind: ClassVar[str] = "parse"
    full_parse: bool = False
    """Whether parse_html() extracts text fields too (a search index needs them)."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        # Parsers outlive the downloaders at a stop, to finish the pages in memory.
        self.stopping = context.parsing_stopping
        crawl = context.settings.crawl
        self.crawl = crawl
        self.options = crawl.normalize_options
        self.query_variants = context.query_variants
        self.decisions = context.link_decisions

    def step(self) -> bool:
        item = self.data.take_for_parsing()
        if item is None:
            return False
        page, body = item
        self.finish_page(page, body, self.parse_page(page, body))
        return True

    def finish_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> None:
        """The rest of a step once a leased page is parsed: its links classified, its
        task rows (:meth:`process_page`) and both stored in one atomic call.

        A task that overrides :meth:`step` (to keep pages in flight elsewhere, say)
        calls it once for each page it took with ``take_for_parsing``.
        """
        links, skipped = self.classify_links(page, parsed)
        if parsed.truncated:
            # The crawl goes on with what was kept; skipped.csv names where the cut began.
            logger.warning("%s: parse budget: %s", page.url, parsed.truncated)
            if parsed.first_cut_link:
                cut = parsed.first_cut_link
                skipped.append(SkippedLink(normalize_url(cut) or cut, SkipReason.TRUNCATED))
        rows = self.process_page(page, body, parsed)
        self.data.store_parse(page.id, links, skipped, rows)

    def parse_options(self) -> dict[str, Any]:
        """The keyword arguments of ``parse_html`` for this crawl's pages (parser,
        ``full``, the parse budgets): a task that parses elsewhere passes them on."""
        crawl = self.crawl
        return {"parser": self.settings.parser, "full": self.full_parse,
                "max_links": crawl.max_links_per_page, "max_depth": crawl.max_html_depth,
                "max_tags": crawl.max_html_tags, "robots_name": self.robots_token}  # fmt: skip

    def parse_page(self, page: PageData, body: bytes) -> ParsedPage:
        """Hook for crawl tasks: the page's :func:`parse_html` with :meth:`parse_options`.

        A large page is parsed in the crawl's worker process when it is free
        (``CrawlContext.large_pages``), else here: on any core for a large page, on the
        crawl's for a small one (``threads.one_core``). A task may get the same
        ParsedPage another way (in a worker process of its own, with its own work on the
        page done there too); it runs on this ParsingThread, before the links are
        classified and :meth:`process_page` is called.
        """
        options = self.parse_options()
        large_pages = self.context.large_pages
        if large_pages is not None:
            parsed = large_pages.parse(body, page.url, page.content_type, options)
            if parsed is not None:
                return parsed
        if self.cores is not None:
            self.cores.place_parse(len(body))
        return parse_html(body, page.url, page.content_type, **options)

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        """Hook for crawl tasks: the page's rows for the task's tables (see
        ``ApplicationManager.task_tables``), stored with the page in one atomic call.

        Runs in this ParsingThread, outside the DataManager's lock, so slow work
        (indexing) belongs here. None (the default) stores nothing.
        """
        return None

    # -- link hooks ----------------------------------------------------------
    # classify_links() calls one of these for every link of a page, once each (a
    # page's links are unique, fragments dropped), in document order, before the
    # page's links are stored. They run on this ParsingThread, and several
    # ParsingThreads run at once: state shared between them (e.g. on the context)
    # needs a lock. They may read ``page`` and ``self.data``'s read methods, but
    # not change the crawl: what a page links to is decided by classify_links().
    # A page parsed again after a crash (its parse was never stored) calls them
    # again: keep what they find on the thread and return it from process_page()
    # as task rows, stored with the parse. No-ops by default.

    def found_internal_link(self, page: PageData, url: str) -> None:
        """A link to the page's own site (followed or not: robots, depth, include).

        Args:
            page: the page the link was found on.
            url: the link, absolute, fragment dropped, as written (not normalized).
        """

    def found_external_link(self, page: PageData, url: str) -> None:
        """An http(s) link to another host (a subdomain is another host)."""

    def found_other_link(self, page: PageData, url: str) -> None:
        """A link that is not http(s): mailto:, tel:, ftp:, javascript:, data:..."""

    def classify_links(
        self, page: PageData, parsed: ParsedPage
    ) -> tuple[list[FoundLink], list[SkippedLink]]:
        """Split a page's links into ones to queue and ones skipped with a reason.

        Pages of a site repeat most of their links (navigation, index), so each
        absolute URL is decided once per site, for all parsing threads, while it keeps
        coming up (see :meth:`decide_link` and ``CrawlContext.link_decisions``).
        """
        decisions = self.decisions
        host = page.host
        held: SkipReason | None = None  # why no new page comes from this page's links
        if not self.follows_links(page, parsed):
            held = SkipReason.NOFOLLOW
        elif page.level + 1 > self.settings.crawl_for(page.host).max_depth:
            held = SkipReason.DEPTH
        links: list[FoundLink] = []
        skipped: list[SkippedLink] = []
        for url in parsed.links:
            known = decisions.get((host, url))
            if known is None:
                known = (link_scope(url, host), self.decide_link(url, host))
                decisions.put((host, url), known)
            scope, decision = known
            # The seed spider's hooks, once per link of the page.
            if scope is None:
                self.found_internal_link(page, url)
            elif scope == SkipReason.SCHEME:
                self.found_other_link(page, url)
            else:
                self.found_external_link(page, url)
            if isinstance(decision, SkippedLink):
                skipped.append(decision)
            elif held is not None:
                links.append(FoundLink(decision.url, decision.normalized_url, held))
            else:
                links.append(decision)
        return links, skipped

    def robots_directives(self, page: PageData, parsed: ParsedPage) -> frozenset[str]:
        """What the page asks of robots (``noindex``, ``nofollow``...): its ``<meta
        name="robots">`` tags and its response's ``X-Robots-Tag`` headers, those for
        every crawler and those naming this one (the User-Agent's product token)."""
        meta = meta_directives(parsed.meta_robots)
        if not page.robots_tags:
            return meta
        return meta | robots_tag_directives(page.robots_tags, self.robots_token)

    def follows_links(self, page: PageData, parsed: ParsedPage) -> bool:
        """Whether the page's links may bring new pages: not when it says ``nofollow``
        (or ``none``, see :meth:`robots_directives`) and the site obeys robots
        (``crawl.obey_robots``). Its links stay arcs to pages found by other paths.
        A task that fetches what pages link to (a link checker) asks this too."""
        if not self.settings.crawl_for(page.host).obey_robots:
            return True
        return "nofollow" not in self.robots_directives(page, parsed)

    def decide_link(self, url: str, host: str) -> FoundLink | SkippedLink:
        """One absolute link of a page of ``host``: to queue (depth aside), or why not."""
        scope = link_scope(url, host)
        if scope is not None:
            return SkippedLink(normalize_url(url) or url, SkipReason(scope))
        normalized = normalize_url(url, self.options)
        if normalized is None:
            return SkippedLink(url, SkipReason.SCHEME)
        max_length = self.crawl.max_url_length
        if len(normalized) > max_length:
            return SkippedLink(normalized[:max_length], SkipReason.TOO_LONG)
        path, _, query = normalized.partition("?")
        if not self.query_variants.admit(host, path, query):
            return SkippedLink(normalized, SkipReason.TOO_MANY_QUERIES)
        out_of_scope = scope_skip(url, self.scope_for(host))
        if out_of_scope is not None:
            return SkippedLink(normalized, out_of_scope)
        if not self.robots_for(host).allowed(url):
            return SkippedLink(normalized, SkipReason.ROBOTS)
        return FoundLink(request_url(url), normalized)
