"""ApplicationFinisher: decides when each site's crawl, and the whole crawl, is over, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rccrawler.policy import BLOCKED_BY_ROBOTS, error_cause

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.records import CrawlStats, HostStats


class ApplicationFinisher:
    """The default rules of SPEC §5.9: a site ends when nothing of it is queued or in progress.

    Subclass and name it as ``finisher:`` to end crawls on other conditions
    (a time budget, a number of matches...).

    Args:
        context: what it may use of the crawl (settings, storage...).
    """

    def __init__(self, context: CrawlContext) -> None:
        self.context = context
        self.settings = context.settings

    def site_stop_reason(self, stats: HostStats) -> str | None:
        """Why this site's crawl is over, or None while it goes on."""
        if stats.stop_reason:
            return stats.stop_reason
        if stats.robots_state != "ready" or stats.active:
            return None
        if stats.budget_hit:
            return f"max_pages reached ({self.settings.crawl.max_pages})"
        if not self.answered(stats) and stats.errors_by_kind:
            # Every request failed: the cause, not "no waiting links left" (SPEC §3).
            return f"nothing fetched ({self.causes(stats)})"
        return "no waiting links left"

    @staticmethod
    def answered(stats: HostStats) -> bool:
        """Whether some request of the site got an HTTP answer (a 404 is an answer)."""
        answered = any(kind.startswith("http_") for kind, _n in stats.errors_by_kind)
        return bool(stats.done or stats.duplicates or stats.bytes or answered)

    @staticmethod
    def causes(stats: HostStats) -> str:
        """The site's error kinds as a failure line says them (``dns``, ``connection
        refused``, ``HTTP 503``...), the most frequent first, with their counts."""
        kinds = sorted(stats.errors_by_kind, key=lambda item: (-item[1], item[0]))
        return ", ".join(f"{error_cause(kind)} ×{n}" if n > 1 else error_cause(kind)
                         for kind, n in kinds)  # fmt: skip

    def crawl_finished(self, stats: CrawlStats) -> bool:
        """True when every site has a stop reason."""
        return all(self.site_stop_reason(host) is not None for host in stats.hosts)

    def site_failure(self, stats: HostStats) -> str | None:
        """Why this site failed entirely, or None when the server answered something
        (or the site's crawl is not over yet).

        A site fails entirely when no request of it got an HTTP answer: unreachable,
        refused, a name that does not resolve, robots.txt 5xx... Its stop reason or its
        error kinds say why. A site whose pages all answered 404 did answer: its pages
        are errors, and the crawl's outcome is still a success.
        """
        if self.answered(stats):
            return None
        reason = self.site_stop_reason(stats)
        if reason is None:
            return None  # still going: it may fetch something yet
        if reason.startswith(BLOCKED_BY_ROBOTS) or not stats.errors_by_kind:
            return reason
        return self.causes(stats)

    def failed_sites(self, stats: CrawlStats) -> dict[str, str]:
        """The sites that failed entirely, with why (see :meth:`site_failure`)."""
        failed = {}
        for host in stats.hosts:
            reason = self.site_failure(host)
            if reason is not None:
                failed[host.host] = reason
        return failed
