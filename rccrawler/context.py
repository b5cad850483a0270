"""CrawlContext: what a crawl's threads, finisher and unloaders may use of it.

They get this narrow, typed object instead of the ApplicationManager: the settings, the
storage, the fetcher, the stop events and the status sink. So the manager depends on
them and never the other way round, and a task sees in one place what it may reach.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from rccrawler.cpus import CrawlCores, crawl_cores
from rccrawler.web.urls import named_authorities
from rccrawler.workers import LargePageParser

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.policy import ScopeRules
    from rccrawler.records import CrawlStats, FoundLink, SkippedLink
    from rccrawler.web.fetch import Fetcher
    from rccrawler.web.robots import RobotsRules
    from rccrawler.web.traps import QueryVariantLimit


logger = logging.getLogger(__name__)

PROGRESS_LOG_S = 5.0
"""Seconds between two progress lines of work after the crawl, without the live view."""

LINK_DECISIONS = 1_024
"""Link decisions kept per generation (all sites together): enough for a site's
navigation links, about 0.3 MB; 50,000 cost 30 MB of peak RSS on a 1M-URL frontier
(benchmarks/large_site.py), where every link is new."""

LinkDecision = tuple["str | None", "FoundLink | SkippedLink"]
"""A link's scope (None: the page's own site) and what the parsing thread decided."""

K = TypeVar("K")
V = TypeVar("V")


class RecentMemo(Generic[K, V]):
    """A memo bounded to ``2 × size`` entries that keeps what is used again: a hit in the
    older generation moves to the newer one, and a full newer generation replaces the
    older. Several threads may share it without a lock: a lost race only costs a
    recomputation."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.newer: dict[K, V] = {}
        self.older: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        value = self.newer.get(key)
        if value is None:
            value = self.older.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        newer = self.newer
        newer[key] = value
        if len(newer) >= self.size:
            self.older, self.newer = newer, {}


class StatusSink(Protocol):
    """What the RoutineThread needs of a status view: somewhere to put snapshots. The
    view renders on its own schedule; the thread only feeds it."""

    def update(self, stats: CrawlStats) -> None: ...

    def progress(self, what: str, done: int, total: int) -> None:
        """Work after the crawl (a task's unloader): ``done`` of ``total`` ``what``."""


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
    link_decisions: RecentMemo[tuple[str, str], LinkDecision] = field(
        default_factory=lambda: RecentMemo(LINK_DECISIONS)
    )
    """Shared by the parsing threads: what was decided for a (site, link) pair, as sites
    repeat their navigation links on every page."""
    robots_rules: dict[str, RobotsRules] = field(default_factory=dict)
    """Each site's robots rules, parsed once for all threads: a site's cost, like its
    HostData (per thread, 200 threads kept 200 copies of every site's)."""
    scope_rules: dict[str, ScopeRules] = field(default_factory=dict)
    """Each site's include/exclude rules, compiled once for all threads (the same)."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set to stop: downloaders take no new page, the crawl winds down."""
    parsing_stopping: threading.Event = field(default_factory=threading.Event)
    """Set after ``stopping``, once the downloaded pages are parsed (nothing is lost)."""
    stop_reason: str = ""
    """Why the crawl stopped or ended ("finished", "stopped by SIGINT"...)."""
    finished: bool = False
    """The crawl is over (every site has a stop reason), not just stopped."""

    signalled: str = ""
    """Why a signal asked the crawl to stop, until the manager acts on it."""
    cores: CrawlCores | None = None
    """The one core the crawl's threads share (``threads.one_core``); None to let them
    run anywhere (set from the settings when not given)."""
    large_pages: LargePageParser | None = None
    """Where the parsing threads may have a large page parsed (``threads.parse_worker``;
    set from the settings when not given). The manager closes it."""
    _progress_logged: dict[str, float] = field(default_factory=dict, repr=False)
    """When each kind of progress was last logged (plain-log mode)."""

    def __post_init__(self) -> None:
        if self.cores is None and self.settings.one_core:
            self.cores = crawl_cores()
        if self.large_pages is None:
            self.large_pages = LargePageParser(enabled=self.settings.parse_worker)

    @functools.cached_property
    def named_authorities(self) -> frozenset[str]:
        """The ``host:port`` keys the settings name (sites and ``crawl.resolve``): the only
        non-public hosts robots.txt redirects may reach. Made once a crawl, not once a
        thread (an automatic pool starts hundreds; each took 1.5 ms for 300 sites)."""
        return named_authorities(self.settings.sites, self.settings.crawl.resolve)

    def show_progress(self, what: str, done: int, total: int) -> None:
        """Tell the user how far work after the crawl has come (a task's unloader: the
        link checker's external links): on the live view, else a log line every
        :data:`PROGRESS_LOG_S` seconds and one at the end. Any thread may call it."""
        if self.status is not None:
            self.status.progress(what, done, total)
            return
        now = time.monotonic()
        last = self._progress_logged.get(what)
        if done >= total or last is None or now - last >= PROGRESS_LOG_S:
            self._progress_logged[what] = now
            logger.info("%s: %d of %d", what, done, total)

    def note_signal(self, reason: str) -> None:
        """Ask for a stop from a signal handler. The handler runs on the main thread
        between two bytecodes, maybe while that thread holds the lock of the very Event
        :meth:`request_stop` sets (inside ``Event.wait``): taking it there deadlocks. So
        this takes no lock; the manager's loop turns it into a stop within a tick."""
        self.signalled = self.signalled or reason

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the crawl to stop and save its state (from any thread; a signal handler
        calls :meth:`note_signal` instead)."""
        if not self.stop_reason:
            self.stop_reason = reason
        self.stopping.set()

    def abort(self) -> None:
        """Stop every thread at once (a thread crashed)."""
        self.stopping.set()
        self.parsing_stopping.set()
