"""What the SQL storage backends share: page rows, the HTML test, the auto-throttle rule."""

from __future__ import annotations

from typing import Any

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
