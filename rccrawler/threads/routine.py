"""RoutineThread: periodic housekeeping — stop requests, progress for the user, the status view."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, ClassVar

from rccrawler.memory import release_memory
from rccrawler.state import write_activity
from rccrawler.threads.base import CrawlerThread

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext, StatusSink
    from rccrawler.records import CrawlStats

logger = logging.getLogger(__name__)


def error_worth_a_warning(kind: str) -> bool:
    """Transport errors, 5xx and redirect loops are trouble worth a warning; a 4xx is a
    broken link, counted in the errors column but not announced one by one."""
    return not kind.startswith("http_4")


class RoutineThread(CrawlerThread):
    """Watches for `rccrawler stop`, logs progress and new errors, and feeds the status view.

    It paces itself on the crawl's stop Event rather than on the DataManager's work
    signal, so it wakes a few times a second instead of after every stored page.
    Everything it reports comes from ``DataManager.statistics()``, a snapshot of
    running counters: no table is scanned, whatever the crawl's size.
    """

    tick: ClassVar[float] = 0.25
    """Seconds between two rounds (stop-file check, view feed)."""
    view_every: ClassVar[float] = 0.5
    """Seconds between two snapshots fed to the status view."""
    progress_every: ClassVar[float] = 5.0
    trim_every: ClassVar[float] = 1.0
    """Seconds between two returns of freed heap memory to the OS."""
    activity_every: ClassVar[float] = 1.0
    """Seconds between two saves of what the crawl is doing, for ``rccrawler status``."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        now = time.monotonic()
        self._last_progress = now
        self._last_trim = now
        self._last_feed = 0.0
        self._last_activity = 0.0
        self._activity: dict[str, tuple[int, int]] | None = None
        # Shared storage counts its requests in flight itself; a state_dir of one process
        # gets them from here (its rows say "running" for pages leased for later too).
        self._keeps_activity = not context.data.shared
        self._last_done = 0
        self._last_bytes = 0
        self._errors_seen: dict[str, dict[str, int]] | None = None
        """Errors by kind per host at the last look; None until the first snapshot."""

    def step(self) -> bool:
        now = time.monotonic()
        if now - self._last_trim >= self.trim_every:
            release_memory()
            self._last_trim = now
        if self.context.cores is not None:
            self.context.cores.look()  # another process busy on the crawl's core?
        if self.context.stop_file.exists() or self.data.stop_requested():
            logger.info("stop requested (rccrawler stop)")
            self.context.request_stop("stop requested")
            return True
        if self._errors_seen is None:
            self.take_baseline(self.data.statistics())
        now = time.monotonic()
        view: StatusSink | None = self.context.status
        if view is not None:
            if now - self._last_feed >= self.view_every:
                stats = self.data.statistics()
                view.update(stats)
                self.warn_new_errors(stats)
                self._last_feed = now
        elif now - self._last_progress >= self.progress_every:
            stats = self.data.statistics()
            self.log_progress(stats, now)
            self.warn_new_errors(stats)
        if self._keeps_activity and now - self._last_activity >= self.activity_every:
            self.save_activity(self.data.statistics())
            self._last_activity = now
        self.stopping.wait(self.tick)
        return True

    def save_activity(self, stats: CrawlStats) -> None:
        """Save each busy site's requests in flight and pages to parse (when they changed)."""
        activity = {host.host: (host.requests, host.to_parse) for host in stats.hosts
                    if host.requests or host.to_parse}  # fmt: skip
        if activity != self._activity:
            write_activity(self.settings.state_dir, activity)
            self._activity = activity

    def close(self) -> None:
        """Hand the view a last snapshot, so its final frame shows every stop reason;
        nothing is in flight any more."""
        if self._keeps_activity and self._activity:
            write_activity(self.settings.state_dir, {})
        view: StatusSink | None = self.context.status
        if view is not None:
            try:
                view.update(self.data.statistics())
            except Exception:  # the crawl's outcome must not depend on the display
                logger.debug("last status snapshot failed", exc_info=True)

    def take_baseline(self, stats: CrawlStats) -> None:
        """What a resumed crawl did in its earlier runs is neither news (warnings) nor
        speed (pages/s counts this run only)."""
        self.warn_new_errors(stats)
        self._last_done, self._last_bytes = stats.pages_done, stats.bytes

    def log_progress(self, stats: CrawlStats, now: float) -> None:
        """One plain progress line: counts, and rates since the previous line."""
        seconds = max(1e-6, now - self._last_progress)
        rate = (stats.pages_done - self._last_done) / seconds
        mb_rate = (stats.bytes - self._last_bytes) / seconds / 1e6
        crawling = sum(1 for host in stats.hosts if not host.stop_reason)
        logger.info(
            "progress: %d done, %d duplicates, %d queued, %d errors, %d/%d sites crawling, "
            "%.1f pages/s, %.2f MB/s, %.1f MB",
            sum(host.done for host in stats.hosts),
            sum(host.duplicates for host in stats.hosts),
            stats.active,
            sum(host.errors for host in stats.hosts),
            crawling,
            len(stats.hosts),
            rate,
            mb_rate,
            stats.bytes / 1e6,
        )
        self._last_progress, self._last_done, self._last_bytes = now, stats.pages_done, stats.bytes

    def warn_new_errors(self, stats: CrawlStats) -> None:
        """Log a warning for each host and kind of error that grew since the last look.

        Pages that failed before this run (a resumed crawl) are the baseline, not news.
        """
        seen = self._errors_seen
        current = {host.host: dict(host.errors_by_kind) for host in stats.hosts}
        self._errors_seen = current
        if seen is None:
            return
        for host, kinds in current.items():
            before = seen.get(host, {})
            for kind, count in kinds.items():
                new = count - before.get(kind, 0)
                if new > 0 and error_worth_a_warning(kind):
                    logger.warning(
                        "%s: %d page%s failed with %s (%d so far)",
                        host,
                        new,
                        "" if new == 1 else "s",
                        kind,
                        count,
                    )
