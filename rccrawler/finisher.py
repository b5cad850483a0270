"""ApplicationFinisher: decides when each site's crawl, and the whole crawl, is over, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rccrawler.manager import ApplicationManager
    from rccrawler.records import CrawlStats, HostStats


class ApplicationFinisher:
    """The default rules of SPEC §5.9: a site ends when nothing of it is queued or in progress.

    Subclass and name it as ``finisher:`` to end crawls on other conditions
    (a time budget, a number of matches...).

    Args:
        manager: the manager of the crawl.
    """

    def __init__(self, manager: ApplicationManager) -> None:
        self.manager = manager

    def site_stop_reason(self, stats: HostStats) -> str | None:
        """Why this site's crawl is over, or None while it goes on."""
        if stats.stop_reason:
            return stats.stop_reason
        if stats.robots_state != "ready" or stats.active:
            return None
        if stats.budget_hit:
            return f"max_pages reached ({self.manager.settings.crawl.max_pages})"
        return "no waiting links left"

    def crawl_finished(self, stats: CrawlStats) -> bool:
        """True when every site has a stop reason."""
        return all(self.site_stop_reason(host) is not None for host in stats.hosts)
