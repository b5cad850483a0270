"""Crawl statistics from running counts: the one definition of each number (docs/output.md).

Each backend counts pages by state its own way (SQLite in memory, PostgreSQL in a
``counts`` table); both turn their counts into the frozen snapshot here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rccrawler.records import CrawlStats, HostData, HostStats, PageState

StatsMemo = dict[str, tuple[tuple[Any, ...], HostStats]]
"""Each site's last HostStats and the values it was made of (see :func:`host_stats`)."""


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


_HOST_STATS_FIELDS = (
    "host", "waiting", "running", "downloaded", "parsing", "done", "errors", "skipped",
    "duplicates", "bytes", "crawl_delay", "stop_reason", "robots_state", "errors_by_kind",
    "started_at", "finished_at", "budget_hit",
)  # fmt: skip
"""HostStats' fields, in the order :func:`host_stats` reads their values."""


def host_stats(
    host: HostData, counts: StateCounts, parsing: int = 0, known: StatsMemo | None = None
) -> HostStats:
    """A site's HostStats from its counts: the one definition of each number (docs/output.md).

    ``known`` keeps each site's last HostStats: a site whose numbers did not change since
    gets the same object back. A HostStats is frozen, and making one costs more than the
    rest of a snapshot (300 sites, a snapshot every few ticks of the manager)."""
    by_state = counts.by_state
    values = (
        host.host,
        by_state.get(PageState.WAITING, 0),
        by_state.get(PageState.RUNNING, 0) + parsing,  # running
        max(0, by_state.get(PageState.DOWNLOADED, 0)),  # downloaded
        parsing,
        by_state.get(PageState.DONE, 0) - counts.duplicates - counts.aliases,  # done
        by_state.get(PageState.ERROR, 0),  # errors
        by_state.get(PageState.SKIPPED, 0),  # skipped
        counts.duplicates,
        counts.bytes,
        host.crawl_delay,
        host.stop_reason,
        host.robots_state.value,
        tuple(sorted((k, v) for k, v in counts.errors.items() if v)),  # errors_by_kind
        host.started_at,
        host.finished_at,
        counts.budget_hit,
    )
    last = known.get(host.host) if known is not None else None
    if last is not None and last[0] == values:
        return last[1]
    fields: dict[str, Any] = dict(zip(_HOST_STATS_FIELDS, values, strict=True))
    stats = HostStats(**fields)
    if known is not None:
        known[host.host] = (values, stats)
    return stats


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


def snapshot(
    sites: Sequence[tuple[HostData, StateCounts, int]], now: float, known: StatsMemo | None = None
) -> CrawlStats:
    """The crawl's statistics from each site's (host, counts, pages being parsed here);
    ``known``: see :func:`host_stats`."""
    stats = [host_stats(host, counts, parsing, known) for host, counts, parsing in sites]
    return crawl_stats(stats, [counts for _host, counts, _parsing in sites], now)
