"""What the SQL storage backends share: page rows, paged reads, the HTML test, the throttle."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from rccrawler.records import HostData, PageData, PageId, PageState

PAGE_COLUMNS = (
    "id, host, url, normalized_url, id_from, level, out_degree, state, downloaded, parsed, "
    "http_status, content_type, content_hash, error_code, replace_id, download_attempts, "
    "redirect_target, redirect_hops, bytes, truncated, referer"
)

BLOCKED_BY_ROBOTS = "robots.txt"
"""How the stop reason of a host whose robots.txt forbids everything starts."""


def page_from_row(row: tuple[Any, ...]) -> PageData:
    """A PageData from a row of PAGE_COLUMNS."""
    (pid, host, url, norm, id_from, level, out_degree, state, downloaded, parsed, status,
     ctype, chash, error, replace_id, attempts, target, hops, size, truncated,
     referer) = row  # fmt: skip
    return PageData(
        id=PageId(pid),
        host=host,
        url=url,
        normalized_url=norm,
        id_from=PageId(id_from) if id_from is not None else None,
        level=level,
        out_degree=out_degree,
        state=PageState(state),
        downloaded=bool(downloaded),
        parsed=bool(parsed),
        http_status=status,
        content_type=ctype,
        content_hash=chash,
        error_code=error,
        replace_id=PageId(replace_id) if replace_id is not None else None,
        download_attempts=attempts,
        redirect_target=target,
        redirect_hops=hops,
        bytes=size,
        truncated=bool(truncated),
        referer=referer,
    )


AUTO_THROTTLE_TARGET_CONCURRENCY = 1.0
"""Requests a host should have in flight on average under ``crawl.auto_throttle``."""
AUTO_THROTTLE_MAX_DELAY = 60.0
"""The longest delay auto-throttle sets (a slower robots Crawl-delay still wins)."""


def throttled_delay(host: HostData, latency: float, *, ok: bool) -> float:
    """The host's next crawl delay under ``crawl.auto_throttle`` (Scrapy's AutoThrottle).

    A server that needs ``latency`` seconds per answer gets one request every
    ``latency / concurrency`` seconds: the delay moves halfway there, or all the way
    up when the server got slower. An error answer never lowers it (error pages are
    small and fast, and say nothing about load). Never below ``min_crawl_delay``.
    """
    target = latency / AUTO_THROTTLE_TARGET_CONCURRENCY
    delay = max(target, (host.crawl_delay + target) / 2)
    ceiling = max(AUTO_THROTTLE_MAX_DELAY, host.min_crawl_delay)
    delay = min(max(host.min_crawl_delay, delay), ceiling)
    if not ok and delay < host.crawl_delay:
        return host.crawl_delay
    return delay


def is_html(content_type: str) -> bool:
    """Whether a Content-Type makes a graph node (SPEC §5.4)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime in ("text/html", "application/xhtml+xml")


class PagedReads:
    """The unloaders' reads (pages, resolved and raw arcs, skipped links), in batches, for both
    SQL backends: a backend supplies ``_read`` and writes its placeholders as ``?``."""

    text_order: ClassVar[str] = ""
    """A collation clause that sorts text by bytes (SQLite's default already does)."""

    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one read-only query and return all its rows."""
        raise NotImplementedError

    def iter_pages(self, host: str) -> Iterator[PageData]:
        last = 0
        while True:
            rows = self._read(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = ? AND id > ? "
                "ORDER BY id LIMIT 2000",
                (host, last),
            )
            if not rows:
                return
            for row in rows:
                yield page_from_row(row)
            last = int(rows[-1][0])

    def iter_arcs(self, host: str) -> Iterator[tuple[PageId, PageId]]:
        # An arc to a duplicate or to a redirect alias points to the page it
        # stands for (two hops: an alias of a duplicate); only arcs between
        # nodes (200 HTML, not duplicates) are part of the graph.
        query = """
            SELECT DISTINCT a.from_id, f.id FROM arcs a
            JOIN pages t ON t.id = a.to_id
            LEFT JOIN pages u ON u.id = t.replace_id
            JOIN pages f ON f.id = coalesce(u.replace_id, t.replace_id, t.id)
            WHERE a.host = ? AND a.from_id > ? AND a.from_id <= ? AND f.state = 'done'
              AND f.http_status = 200 AND f.replace_id IS NULL
            ORDER BY a.from_id, f.id
        """
        last_from = 0
        while True:
            # Page through whole source pages so DISTINCT stays exact.
            bound = self._read(
                "SELECT max(from_id) FROM (SELECT DISTINCT from_id FROM arcs "
                "WHERE host = ? AND from_id > ? ORDER BY from_id LIMIT 200) AS chunk",
                (host, last_from),
            )[0][0]
            if bound is None:
                return
            for from_id, to_id in self._read(query, (host, last_from, bound)):
                yield PageId(from_id), PageId(to_id)
            last_from = bound

    def iter_raw_arcs(self, host: str) -> Iterator[tuple[PageId, PageId]]:
        last = (0, 0)
        while True:
            rows = self._read(
                "SELECT from_id, to_id FROM arcs WHERE host = ? "
                "AND (from_id > ? OR (from_id = ? AND to_id > ?)) "
                "ORDER BY from_id, to_id LIMIT 2000",
                (host, last[0], last[0], last[1]),
            )
            if not rows:
                return
            for from_id, to_id in rows:
                yield PageId(from_id), PageId(to_id)
            last = (int(rows[-1][0]), int(rows[-1][1]))

    def iter_skipped(self, host: str) -> Iterator[tuple[str, str, str]]:
        last = ""
        while True:
            rows = self._read(
                "SELECT s.url, s.reason, coalesce(p.normalized_url, '') FROM skipped s "
                "LEFT JOIN pages p ON p.id = s.found_on WHERE s.host = ? "
                f"AND s.url{self.text_order} > ? "
                "AND NOT EXISTS (SELECT 1 FROM urls WHERE urls.normalized_url = s.url) "
                f"ORDER BY s.url{self.text_order} LIMIT 2000",
                (host, last),
            )
            if not rows:
                return
            yield from rows
            last = rows[-1][0]
