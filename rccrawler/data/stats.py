"""Crawl statistics from running counts: the one definition of each number (docs/output.md).

Each backend counts pages by state its own way (SQLite in memory, PostgreSQL in a
``counts`` table); both turn their counts into the frozen snapshot here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rccrawler.records import CrawlStats, HostData, HostStats, PageState


@dataclass(slots=True)
class StateCounts:
    """One site's pages counted by state, as a backend keeps or reads them."""

    by_state: dict[str, int]
    errors: dict[str, int]
    duplicates: int = 0
    aliases: int = 0
    """Redirects to a page known already: done, but not pages of their own."""
    bytes: int = 0
    budget_hit: bool = False


def host_stats(host: HostData, counts: StateCounts, parsing: int = 0) -> HostStats:
    """A site's HostStats from its counts: the one definition of each number (docs/output.md)."""
    by_state = counts.by_state
    return HostStats(
        host=host.host,
        waiting=by_state.get(PageState.WAITING, 0),
        running=by_state.get(PageState.RUNNING, 0) + parsing,
        downloaded=max(0, by_state.get(PageState.DOWNLOADED, 0)),
        parsing=parsing,
        done=by_state.get(PageState.DONE, 0) - counts.duplicates - counts.aliases,
        errors=by_state.get(PageState.ERROR, 0),
        skipped=by_state.get(PageState.SKIPPED, 0),
        duplicates=counts.duplicates,
        bytes=counts.bytes,
        crawl_delay=host.crawl_delay,
        stop_reason=host.stop_reason,
        robots_state=host.robots_state.value,
        errors_by_kind=tuple(sorted((k, v) for k, v in counts.errors.items() if v)),
        started_at=host.started_at,
        finished_at=host.finished_at,
        budget_hit=counts.budget_hit,
    )


def crawl_stats(
    stats: Sequence[HostStats], counts: Sequence[StateCounts], now: float
) -> CrawlStats:
    """The whole crawl's snapshot from its sites' numbers."""
    return CrawlStats(
        hosts=tuple(stats),
        pages_done=sum(c.by_state.get(PageState.DONE, 0) - c.aliases for c in counts),
        downloading=sum(h.running - h.parsing for h in stats),
        parsing=sum(h.parsing for h in stats),
        bytes=sum(c.bytes for c in counts),
        taken_at=now,
    )


def snapshot(sites: Sequence[tuple[HostData, StateCounts, int]], now: float) -> CrawlStats:
    """The crawl's statistics from each site's (host, counts, pages being parsed here)."""
    stats = [host_stats(host, counts, parsing) for host, counts, parsing in sites]
    return crawl_stats(stats, [counts for _host, counts, _parsing in sites], now)
