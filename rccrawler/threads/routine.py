"""RoutineThread: periodic housekeeping — stop requests, checkpoints, progress for the user."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, ClassVar

from rccrawler.threads.base import CrawlerThread

if TYPE_CHECKING:
    from rccrawler.manager import ApplicationManager

logger = logging.getLogger(__name__)


class RoutineThread(CrawlerThread):
    """Watches for `rccrawler stop`, logs progress and feeds the status view."""

    idle_wait: ClassVar[float] = 0.25
    progress_every: ClassVar[float] = 5.0
    """Seconds between two progress lines in plain-log mode."""

    def __init__(self, manager: ApplicationManager, index: int) -> None:
        super().__init__(manager, index)
        self._last_progress = time.monotonic()
        self._last_done = 0

    def step(self) -> bool:
        if self.manager.stop_file.exists():
            logger.info("stop requested by %s", self.manager.stop_file)
            self.manager.request_stop("stop requested")
            return False
        now = time.monotonic()
        if self.manager.view is None and now - self._last_progress >= self.progress_every:
            stats = self.data.statistics()
            rate = (stats.pages_done - self._last_done) / (now - self._last_progress)
            logger.info(
                "progress: %d pages done, %d queued, %.1f pages/s, %.1f MB",
                stats.pages_done,
                stats.active,
                rate,
                stats.bytes / 1e6,
            )
            self._last_progress, self._last_done = now, stats.pages_done
        return False
