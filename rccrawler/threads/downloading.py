"""DownloadingThread: leases a due page, fetches it, stores the response."""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from typing import TYPE_CHECKING

from rccrawler.policy import conditional_headers, is_unchanged, scope_skip
from rccrawler.records import DownloadResult, FoundLink, PageData, SkippedLink, SkipReason
from rccrawler.threads.base import CrawlerThread
from rccrawler.web.robots import RobotsRules, cut_robots_body
from rccrawler.web.sitemaps import parse_sitemap, sitemap_seeds
from rccrawler.web.urls import (
    link_scope,
    normalize_url,
    own_request_block,
    request_url,
    resolve_link,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rccrawler.context import CrawlContext
    from rccrawler.data.base import TaskRows
    from rccrawler.records import HostData

logger = logging.getLogger(__name__)

ROBOTS_MAX_REDIRECTS = 5
SITEMAP_MAX_BYTES = 50 * 1024 * 1024
"""The sitemaps.org limit on one (uncompressed) sitemap file; ``crawl.max_body_bytes``
lowers it."""


def content_hash(body: bytes) -> str:
    """The duplicate-detection key of a body (SPEC §5.7)."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()


class DownloadingThread(CrawlerThread):
    """Fetches robots.txt files and pages; politeness is the DataManager's take."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        self.fetcher = context.fetcher
        self.crawl = context.settings.crawl
        self.named = context.named_authorities
        """Hosts the settings name: the only non-public ones robots redirects may reach."""

    def step(self) -> bool:
        host = self.data.take_robots()
        if host is not None:
            self.fetch_robots(host)
            return True
        page = self.data.take_for_download()
        if page is None:
            return False
        self.download(page)
        return True

    def fetch(
        self,
        url: str,
        host: str,
        *,
        referer: str = "",
        max_bytes: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> DownloadResult:
        """Every request of this thread: the site's headers (and ``headers``, a refresh's
        conditional ones), the host's politeness clock, then process_response() with the
        outcome."""
        site_headers = self.settings.crawl_for(host).headers
        result = self.fetcher.download(
            url,
            referer=referer,
            on_send=lambda: self.data.mark_request_sent(host),
            headers={**site_headers, **headers} if headers else site_headers,
            max_bytes=max_bytes,
        )
        self.process_response(url, result)
        return result

    def process_response(self, url: str, result: DownloadResult) -> None:
        """Hook for crawl tasks: every outcome of a request this thread made (robots.txt,
        sitemaps, redirects, pages, errors), in the order made. ``result.exchange``
        holds the heads when a response came. Runs in this DownloadingThread, outside
        the DataManager's lock; several threads call it at once. No-op by default.
        """

    # -- robots ------------------------------------------------------------
    def fetch_robots(self, host: HostData) -> None:
        """Fetch robots.txt (following up to 5 redirects) and store the rules."""
        if not self.crawl.obey_robots:
            self.read_sitemaps(host, RobotsRules.allow_all(), None)
            self.data.store_robots(host.host, None, "", None, blocked=False)
            return
        url = f"{host.scheme}://{host.host}/robots.txt"
        status: int | None = None
        body = b""
        error = ""
        for _ in range(ROBOTS_MAX_REDIRECTS + 1):
            result = self.fetch(url, host.host)
            status, body = result.status, result.body
            if result.error == "tls":
                # The handshake that failed here fails for every page of the host
                # too, so nothing is fetched either way; letting the pages fail
                # puts "tls" in the report instead of "robots.txt unreachable".
                self.data.store_robots(host.host, None, "", None, blocked=False)
                return
            if result.error:
                status, error = None, result.error
                break
            if status is not None and 300 <= status < 400 and result.location:
                target = resolve_link(url, result.location)
                refused = "bad_url" if target is None else own_request_block(target, self.named)
                if target is None or refused is not None:
                    # Left as an unfollowed 3xx: robots.txt unavailable, RFC 9309 §2.3.1.2.
                    logger.warning("%s: robots.txt redirects to %s, not followed (%s)",
                                   host.host, target or result.location, refused)  # fmt: skip
                    break
                url = target
                continue
            break
        rules = RobotsRules.from_response(status, body, self.crawl.user_agent)
        ok = status is not None and 200 <= status < 300
        text = cut_robots_body(body).decode("utf-8", "replace") if ok else ""
        blocked = rules.disallows_everything and (status is None or status >= 500)
        if blocked:
            answer = f"answered {status}" if status is not None else f"failed ({error})"
            logger.warning("%s: robots.txt %s; the host is not crawled", host.host, answer)
        delay = self.capped_crawl_delay(host.host, rules)
        if not blocked:
            # Before the rules are stored: no page of the host is fetched meanwhile, so
            # these requests keep the host's politeness on their own.
            self.read_sitemaps(host, rules, delay)
        self.data.store_robots(host.host, status, text, delay, blocked=blocked, error=error)

    # -- sitemaps ------------------------------------------------------------
    def read_sitemaps(self, host: HostData, rules: RobotsRules, delay: float | None) -> None:
        """Queue the site's sitemap URLs as level-1 pages (``crawl.sitemaps``).

        Reads robots.txt's ``Sitemap:`` files and ``/sitemap.xml`` (indexes followed,
        gzip and text files too), at most ``crawl.max_sitemap_files`` files and
        ``crawl.max_sitemap_urls`` URLs. Each file is requested like a page: on the
        site's own host only, allowed by robots.txt, past the own-request guard, one
        at a time and the host's crawl delay apart. A stop ends the reading.
        """
        crawl = self.settings.crawl_for(host.host)
        if not crawl.sitemaps:
            return
        wait = max(host.crawl_delay, delay or 0.0)
        queue = deque(sitemap_seeds(rules.sitemaps, host.scheme, host.host))
        seen: set[str] = set()
        files = urls = 0
        max_bytes = min(crawl.max_body_bytes, SITEMAP_MAX_BYTES)
        while queue and files < crawl.max_sitemap_files and urls < crawl.max_sitemap_urls:
            url = queue.popleft()
            if url in seen:
                continue
            seen.add(url)
            refused = link_scope(url, host.host) or own_request_block(url, self.named)
            if refused is None and not rules.allowed(url):
                refused = "robots"
            if refused is not None:
                logger.info("%s: sitemap %s not read (%s)", host.host, url, refused)
                continue
            if self.stopping.wait(wait):
                return
            files += 1
            result = self.fetch(url, host.host, max_bytes=max_bytes)
            if result.status is not None and 300 <= result.status < 400 and result.location:
                target = resolve_link(url, result.location)
                if target is not None:
                    queue.appendleft(target)
                continue
            if result.status != 200:
                logger.debug("%s: sitemap %s: %s", host.host, url, result.status or result.error)
                continue
            content = parse_sitemap(
                result.body, max_urls=crawl.max_sitemap_urls - urls, max_bytes=max_bytes
            )
            if content.error:
                logger.warning("%s: sitemap %s: %s", host.host, url, content.error)
            # Never more waiting than may still be read: an index cannot grow memory.
            room = crawl.max_sitemap_files - files - len(queue)
            queue.extend(content.sitemaps[: max(0, room)])
            urls += len(content.urls)
            links, skipped = self.classify_sitemap_urls(host.host, content.urls, rules)
            added = self.data.add_links(host.host, links, skipped, level=1, referer=url)
            logger.info("%s: sitemap %s: %d URLs, %d new pages", host.host, url,
                        len(content.urls), added)  # fmt: skip
        if queue and (files >= crawl.max_sitemap_files or urls >= crawl.max_sitemap_urls):
            logger.warning("%s: sitemaps cut at %d files and %d URLs (crawl.max_sitemap_files, "
                           "crawl.max_sitemap_urls)", host.host, files, urls)  # fmt: skip

    def classify_sitemap_urls(
        self, host: str, urls: list[str], rules: RobotsRules
    ) -> tuple[list[FoundLink], list[SkippedLink]]:
        """A sitemap's URLs as level-1 links of ``host``, or skipped with a reason: the
        same rules as a page's links, but another host is ``sitemap_outside``."""
        crawl = self.settings.crawl_for(host)
        scope_rules = self.scope_for(host)
        links: list[FoundLink] = []
        skipped: list[SkippedLink] = []
        for url in urls:
            normalized = normalize_url(url, crawl.normalize_options)
            if link_scope(url, host) is not None or normalized is None:
                skipped.append(SkippedLink(normalized or url[: crawl.max_url_length],
                                           SkipReason.SITEMAP_OUTSIDE))  # fmt: skip
                continue
            if len(normalized) > crawl.max_url_length:
                skipped.append(SkippedLink(normalized[: crawl.max_url_length],
                                           SkipReason.TOO_LONG))  # fmt: skip
                continue
            reason = scope_skip(url, scope_rules)
            if reason is None and not rules.allowed(url):
                reason = SkipReason.ROBOTS
            if reason is not None:
                skipped.append(SkippedLink(normalized, reason))
                continue
            too_deep = SkipReason.DEPTH if crawl.max_depth < 1 else None
            links.append(FoundLink(request_url(url), normalized, too_deep))
        return links, skipped

    def capped_crawl_delay(self, host: str, rules: RobotsRules) -> float | None:
        """robots.txt's Crawl-delay in seconds, at most ``crawl.max_crawl_delay_ms``.

        A site asking for more is still crawled, at the cap, with a warning: a huge
        delay would otherwise keep the crawl from ever finishing (SPEC §5.8).
        """
        delay = rules.crawl_delay
        cap = self.crawl.max_crawl_delay_ms / 1000.0
        if delay is not None and delay > cap:
            logger.warning("%s: robots.txt Crawl-delay %g s is capped to %g s "
                           "(crawl.max_crawl_delay_ms)", host, delay, cap)  # fmt: skip
            return cap
        return delay

    # -- pages -----------------------------------------------------------
    def download(self, page: PageData) -> None:
        """Fetch one leased page and hand the outcome to the DataManager.

        The rules are asked again first: a page queued by an earlier run of the crawl
        may be out of this run's scope (``include``/``exclude``) or depth.
        """
        rules = self.robots_for(page.host)
        if not rules.allowed(page.url):
            self.data.skip_page(page.id, SkipReason.ROBOTS)
            return
        out_of_scope = scope_skip(page.url, self.scope_for(page.host))
        if out_of_scope is None and page.level > self.settings.crawl_for(page.host).max_depth:
            out_of_scope = SkipReason.DEPTH
        if out_of_scope is not None and page.level > 0:  # a start page is crawled whatever
            self.data.skip_page(page.id, out_of_scope)
            return
        conditional = conditional_headers(page)
        result = self.fetch(page.url, page.host, referer=page.referer, headers=conditional)
        # One line per fetch with -v: what came back, for which URL, how fast.
        logger.debug(
            "fetched %s %s %.0f ms", result.status or result.error, page.url, result.elapsed * 1000
        )
        if result.status is not None and 300 <= result.status < 400 and result.location:
            self.follow_redirect(page, result, rules)
            return
        digest = content_hash(result.body) if result.status == 200 else ""
        if is_unchanged(page, result, digest):  # not parsed again: its links stand
            rows = self.process_unchanged(page, result)
        else:
            rows = self.process_download(page, result)
        follow = page.level + 1 <= self.settings.crawl_for(page.host).max_depth
        self.data.store_download(page.id, result, digest, rows, follow_links=follow)

    def process_download(self, page: PageData, result: DownloadResult) -> TaskRows | None:
        """Hook for crawl tasks: rows for the task's tables from a final answer (any
        status or type; HTML is parsed later by a ParsingThread), stored with the
        download in one atomic call. Runs in this DownloadingThread, outside the
        DataManager's lock. None (the default) stores nothing.

        On a refresh a page that was a node before and is no more (a 404, another type)
        comes here too: ``page.prev_*`` say what it was (see :meth:`process_unchanged`).
        """
        return None

    def process_unchanged(self, page: PageData, result: DownloadResult) -> TaskRows | None:
        """Hook for crawl tasks, on a refresh (SPEC §10): a page the last run parsed that
        answered ``304 Not Modified`` or the same body. It is not parsed again, and its
        rows in the task's tables stand as its last parse stored them; rows returned
        here replace them (per table), stored with the download in one atomic call.
        Runs in this DownloadingThread, outside the DataManager's lock. None (the
        default) keeps the rows as they are.

        Args:
            page: the page, with what the last run knew of it in its ``prev_`` fields
                (``prev_hash`` is its body's hash, which this answer did not change).
            result: the answer: a 304 without a body, or a 200 with the same one.
        """
        return None

    def follow_redirect(self, page: PageData, result: DownloadResult, rules: RobotsRules) -> None:
        """Turn a 3xx into the page's next URL, or end the page with a reason (SPEC §5.5)."""
        target = resolve_link(page.url, result.location)
        if target is not None and link_scope(target, page.host) == SkipReason.SCHEME:
            # javascript:, data:, mailto:... are not fetched, like such links (SPEC §5.3).
            self.data.store_redirect(page.id, target, target, SkipReason.SCHEME)
            return
        normalized = normalize_url(target, self.crawl.normalize_options) if target else None
        if target is None or normalized is None:
            self.data.store_download(
                page.id, DownloadResult(error="bad_redirect", retryable=False), ""
            )
            return
        scope = link_scope(target, page.host)
        skip: SkipReason | None = SkipReason(scope) if scope is not None else None
        if skip is None and not rules.allowed(target):
            skip = SkipReason.ROBOTS
        if skip is None:
            skip = scope_skip(target, self.scope_for(page.host))
        if skip in (SkipReason.EXTERNAL, SkipReason.SUBDOMAIN) and page.id_from is None:
            logger.warning(
                "%s: the start page %s redirects to %s, another host, which is not followed; "
                "list that URL in sites: to crawl it",
                page.host, page.url, target,
            )  # fmt: skip
        self.data.store_redirect(page.id, request_url(target), normalized, skip)
