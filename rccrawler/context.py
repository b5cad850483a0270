"""CrawlContext: what a crawl's threads, finisher and unloaders may use of it.

They get this narrow, typed object instead of the ApplicationManager: the settings, the
storage, the fetcher, the stop events and the status sink. So the manager depends on
them and never the other way round, and a task sees in one place what it may reach.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.records import CrawlStats
    from rccrawler.web.fetch import Fetcher
    from rccrawler.web.traps import QueryVariantLimit


class StatusSink(Protocol):
    """What the RoutineThread needs of a status view: somewhere to put snapshots. The
    view renders on its own schedule; the thread only feeds it."""

    def update(self, stats: CrawlStats) -> None: ...


@dataclass(eq=False)
class CrawlContext:
    """One crawl as its threads, finisher and unloaders see it.

    A task that hands its threads more (an open archive, a model...) subclasses it and
    returns its subclass from ``ApplicationManager.create_context()``.
    """

    settings: Settings
    data: SQLDataManager
    """The crawl's storage (the DataManager contract)."""
    fetcher: Fetcher
    """The one HTTP client of the crawl: its connection pools, cookies and throttles."""
    query_variants: QueryVariantLimit
    """Shared by the parsing threads: the query-string trap limit."""
    stop_file: Path
    """Where ``rccrawler stop`` asks a crawl on this machine to stop."""
    status: StatusSink | None = None
    """The live status view when one is shown (set by the command line)."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set to stop: downloaders take no new page, the crawl winds down."""
    parsing_stopping: threading.Event = field(default_factory=threading.Event)
    """Set after ``stopping``, once the downloaded pages are parsed (nothing is lost)."""
    stop_reason: str = ""
    """Why the crawl stopped or ended ("finished", "stopped by SIGINT"...)."""
    finished: bool = False
    """The crawl is over (every site has a stop reason), not just stopped."""

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the crawl to stop and save its state (signal handlers call only this: it
        takes no lock)."""
        if not self.stop_reason:
            self.stop_reason = reason
        self.stopping.set()

    def abort(self) -> None:
        """Stop every thread at once (a thread crashed)."""
        self.stopping.set()
        self.parsing_stopping.set()
