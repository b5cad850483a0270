"""The DataManager contract: every public method is atomic and returns copies."""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rccrawler.records import DownloadDemand

if TYPE_CHECKING:
    from rccrawler.records import (
        CrawlRun,
        CrawlStats,
        DownloadResult,
        FoundLink,
        HostData,
        PageArc,
        PageData,
        PageId,
        SkippedLink,
        SkipReason,
    )

SCHEMA_VERSION = 4
"""2: host rows in columns on every backend, and task tables; 3: no max_crawl_level;
4: numbered runs, validators and what the last run knew of each page (refresh, SPEC §10;
a state of version 3 is upgraded when a crawl opens it)."""

TaskRows = Mapping[str, Sequence[tuple[Any, ...]]]
"""A task's rows for one page: task table name → rows (without the page_id column)."""


def state_identity(manager: str, storage: str) -> dict[str, str]:
    """The ``meta`` rows that identify a state: what its first run writes, and what
    :func:`check_state_identity` compares. A state with none of these keys is new (a
    shared crawl's workers add keys of their own)."""
    return {"schema_version": str(SCHEMA_VERSION), "manager": manager, "storage": storage}


def check_state_identity(
    meta: dict[str, str], manager: str, storage: str, where: str, *, shared: bool = False
) -> None:
    """Compare a saved state's identity with the settings' (shared by the backends).

    Args:
        meta: the state's identity as saved by its first run.
        manager: the dotted path of this run's manager.
        storage: what identifies the storage (never a password).
        where: the state, for the message.
        shared: other workers may be running on this state: never suggest ``--fresh``,
            which would drop their crawl.

    Raises:
        StateError: another schema version, manager or storage, with a way out.
    """
    from rccrawler.exceptions import StateError

    whats = {"schema_version": "was written by schema version",
             "manager": "belongs to manager", "storage": "was kept in storage"}  # fmt: skip
    for key, expected in state_identity(manager, storage).items():
        what = whats[key]
        found = meta.get(key)
        if found != expected:
            shown = found if key == "schema_version" else repr(found)
            wanted = (
                f"this rccrawler uses {expected}"
                if key == "schema_version"
                else f"this run has {expected!r}"
            )
            hint = (
                "give this crawl another name: in the settings, or use the settings of the "
                "crawl that is there"
                if shared
                else "run with --fresh to start over"
            )
            raise StateError(f"the state in {where} {what} {shown}, {wanted}; {hint}")


class DataManager(ABC):
    """The only channel between threads. Every public method is atomic.

    Threads never talk to each other: a DownloadingThread leases a page with
    take_for_download() and hands the response back with store_download(); a
    ParsingThread leases it with take_for_parsing() and hands the links back
    with store_parse(). Politeness (crawl delay, per-host concurrency, the
    breadth-first level barrier) is enforced inside the take methods, so no
    thread can break it.
    """

    read_only: bool = False
    """Opened only to read (``status``, ``export``, ``search``, beside a running crawl or
    after it): a task's unloader derives nothing into it then, and writes only files."""

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        """Create or check the storage. No-op by default."""

    def close(self) -> None:
        """Flush and release the storage. No-op by default."""

    @abstractmethod
    def check_identity(self, manager: str) -> None:
        """Record (first run) or compare (resume) what crawl this state belongs to.

        Raises:
            StateError: the state was written by another schema version,
                manager or storage.
        """

    @abstractmethod
    def recover(self) -> int:
        """Put pages leased by a process that died back in their queue.

        Returns:
            How many pages were put back.
        """

    # -- sites and robots -------------------------------------------------
    @abstractmethod
    def add_site(self, host: HostData, start_url: str, normalized_url: str) -> bool:
        """Register a site and queue its start page, unless it is known already. A known
        site takes this run's politeness: ``host``'s crawl delay (its floor,
        ``min_crawl_delay``, counts the robots.txt Crawl-delay) and downloads at a time.

        Returns:
            True when the site is new to this state.
        """

    def add_sites(self, sites: Sequence[tuple[HostData, str, str]]) -> list[bool]:
        """:meth:`add_site` for each (host, start URL, normalized URL), in order; a storage
        may add them all in one transaction (300 sites, one each, took 0.6 s on
        PostgreSQL before the first request).

        Returns:
            For each site, True when it is new to this state.
        """
        return [self.add_site(host, start_url, normalized) for host, start_url, normalized in sites]

    @abstractmethod
    def add_links(
        self,
        host: str,
        links: Sequence[FoundLink],
        skipped: Sequence[SkippedLink] = (),
        *,
        level: int = 1,
        referer: str = "",
    ) -> int:
        """Queue URLs found outside any page (a sitemap) as new pages of ``host`` at
        ``level``, with no source page and ``referer`` (the sitemap) as how they were
        found; URLs known already are left as they are, the site's page budget applies,
        and ``skipped`` are recorded with no page they were found on.

        Returns:
            How many new pages were queued.
        """

    @abstractmethod
    def apply_limits(self, host: str, max_depth: int) -> int:
        """Apply this run's page budget (``max_pages``) and ``max_depth`` to a site of a
        saved crawl, whose last run had others.

        A larger budget or depth queues what the last run held back: the pages a lower
        budget skipped, then the links found too deep or over the budget, the URLs
        nearest the start first, up to the budget, each at its finder's level + 1, with
        the arcs of every page that linked to it; a site that had ended gets work again,
        and one whose budget now has room is no longer at its budget. A smaller budget
        skips the last-queued waiting pages beyond it (reason ``budget``).

        Returns:
            How many pages were queued.
        """

    @abstractmethod
    def take_robots(self) -> HostData | None:
        """Lease a host whose robots.txt is not fetched yet (it is then FETCHING)."""

    @abstractmethod
    def store_robots(
        self, host: str, status: int | None, text: str, crawl_delay: float | None, *,
        blocked: bool, error: str = "",
    ) -> None:  # fmt: skip
        """Store a host's robots.txt; ``blocked`` means nothing of it may be crawled.
        ``error`` is the request's error kind when no answer came (``dns``...): a
        blocked site's stop reason says it."""

    @abstractmethod
    def hosts(self) -> list[HostData]:
        """Copies of every site's HostData."""

    @abstractmethod
    def host(self, host: str) -> HostData | None:
        """A copy of one site's HostData."""

    # -- downloading -------------------------------------------------------
    @abstractmethod
    def take_for_download(self) -> PageData | None:
        """Lease the next due page (RUNNING) and return a copy.

        None means "nothing due now", not "crawl over": the host may be
        waiting for its crawl delay, at its concurrency limit, or behind the
        breadth-first barrier.
        """

    @abstractmethod
    def mark_request_sent(self, host: str) -> None:
        """Note that a request to ``host`` starts now (the crawl delay counts from here)."""

    @abstractmethod
    def store_download(
        self,
        page_id: PageId,
        result: DownloadResult,
        content_hash: str,
        rows: TaskRows | None = None,
        *,
        follow_links: bool = True,
    ) -> None:
        """Store the outcome of a download and release the lease.

        A 200 HTML body waits for parsing unless its hash is known (a
        duplicate); anything else ends the page, or puts it back in the queue
        for another attempt. ``rows`` (from a task's download hook) are stored
        in the same transaction, replacing the page's earlier rows.

        On a refresh (SPEC §10) a page the last run parsed that answers ``304`` or
        the same body is unchanged: done at once, its links and rows as they were;
        its links reach the pages they link to unless ``follow_links`` is False (the
        page is as deep as the crawl goes). Any other answer first drops what its
        last parse stored.
        """

    @abstractmethod
    def store_redirect(
        self, page_id: PageId, target_url: str, target_normalized: str, skip: SkipReason | None
    ) -> None:
        """Move a page to its redirect target, or end it (loop, off-site, robots)."""

    @abstractmethod
    def skip_page(self, page_id: PageId, reason: SkipReason) -> None:
        """End a leased page without fetching it (e.g. robots disallow found late)."""

    # -- parsing ------------------------------------------------------------
    @abstractmethod
    def take_for_parsing(self) -> tuple[PageData, bytes] | None:
        """Lease a downloaded page (PARSING) with its body."""

    @abstractmethod
    def store_parse(
        self,
        page_id: PageId,
        links: Sequence[FoundLink],
        skipped: Sequence[SkippedLink],
        rows: TaskRows | None = None,
    ) -> None:
        """Queue the new internal links, add arcs, record skipped links, end the page.

        ``rows`` are the task's results for the page (see ``rccrawler.data.tables``),
        stored in the same transaction, replacing what an earlier parse stored.
        """

    # -- runs (SPEC §10) -----------------------------------------------------------
    @abstractmethod
    def begin_refresh(self) -> int | None:
        """Start a new run of a finished crawl (``--refresh``): every page found before is
        known but not reached, until a link of this run (or the settings' start pages,
        queued by :meth:`add_site`, or a sitemap) reaches it again, breadth first; what
        the last run knew of each page is kept in its ``prev_`` fields.

        Returns:
            The new run's number; None when the last run is not over (it resumes).
        """

    @abstractmethod
    def forget_unreached(self) -> None:
        """At the end of a run: the pages no link of it reached (removed, SPEC §10) lose
        their links and their rows in the task's per-page tables, as a page the run
        found gone does at once. Idempotent."""

    @abstractmethod
    def finish_run(
        self, changes: Mapping[str, Mapping[str, int]], rows: Mapping[int, TaskRows] | None = None
    ) -> None:
        """Record that the current run is over and what changed in it (host → change →
        pages), storing ``rows`` (page id → a task's rows for a page removed in this
        run). A run finished already keeps what it recorded (idempotent)."""

    @abstractmethod
    def runs(self) -> list[CrawlRun]:
        """Every run of the crawl, the first first (the last is the current one)."""

    @abstractmethod
    def iter_last_arcs(self, host: str) -> Iterator[PageArc]:
        """The arcs of a site's graph as the last run left it (what :meth:`iter_arcs` gave
        then), by (from, to); none before a refresh."""

    def download_demand(self, limit: int) -> DownloadDemand:
        """How many requests this process's politeness allows right now: those in flight,
        plus, for every host that is due (its crawl delay and Retry-After passed, pages
        waiting or its robots.txt to fetch), its free slots up to its
        ``max_downloads_at_time``; none while the parsers are behind (downloads pause).
        On shared storage, this worker's share: its own hosts, and its part of those no
        worker holds yet. Counted from memory, up to ``limit``: an automatic pool of
        DownloadingThreads asks a few times a second.

        The default says nothing is allowed beyond what is in flight (an automatic
        pool then stays at its floor)."""
        return DownloadDemand(0, 0)

    def note_download_threads(self, busy: int, total: int) -> None:
        """This process runs ``total`` DownloadingThreads, ``busy`` of them on a request:
        :meth:`statistics` reports the total (all workers' on shared storage), and
        ``rccrawler status`` shows both. No-op by default."""

    # -- stopping from outside ----------------------------------------------------
    def request_stop(self) -> None:
        """Ask every process of this crawl to stop (``rccrawler stop``).

        No-op by default: a single-process crawl is stopped through its stop file.
        """

    def stop_requested(self) -> bool:
        """Whether a stop was requested after this DataManager was opened."""
        return False

    def bodies_waiting(self) -> int:
        """Downloaded bodies of this process not parsed and stored yet (a stop lets the
        parsers finish them, so nothing downloaded is fetched again). 0 by default."""
        return 0

    def live_workers(self) -> int:
        """Processes working on this crawl right now, as the storage can tell (0 when it
        cannot: a SQLite crawl is known to run by its state lock, not its storage)."""
        return 0

    @contextlib.contextmanager
    def elected(self, role: str) -> Iterator[bool]:
        """Whether this process is the one to do ``role`` (writing the output files) among
        all the processes of the crawl, for the body of the ``with``; a body that ends
        without an exception has done it. True by default: a crawl of one process."""
        yield True

    # -- waiting ---------------------------------------------------------------
    def wait_for_work(self, timeout: float, kind: str = "") -> None:
        """Block until there may be work of ``kind`` (``download`` or ``parse``), or ``timeout``.

        Idle threads call this instead of sleeping, so new work is picked up at
        once. The default just waits out the timeout.
        """
        threading.Event().wait(timeout)

    def wake_all(self) -> None:
        """Wake every thread waiting in wait_for_work() now (the crawl is stopping), so
        that joining them does not wait out their timeouts. No-op by default."""

    def a_site_may_have_ended(self) -> bool:
        """Whether a site may have ended since the last call, as this DataManager saw it
        happen (a shared crawl's worker gave a host back): the manager then asks the
        finisher at once, instead of at the end of a tick that grows with the snapshots'
        cost. False by default: the finisher finds it at its next tick."""
        return False

    # -- reading -------------------------------------------------------------
    def prepare_output(self) -> None:
        """The unloaders are about to read the whole crawl (its end, ``export``): a
        storage whose query planner keeps statistics of the tables brings them up to
        date here, since they were taken as the crawl grew. Nothing by default."""

    @abstractmethod
    def statistics(self) -> CrawlStats:
        """A frozen snapshot of running counters; never a table scan."""

    @abstractmethod
    def set_stop_reason(self, host: str, reason: str) -> None:
        """Record why a site's crawl ended (shown in status and report.json)."""

    def set_stop_reasons(self, reasons: Mapping[str, str]) -> None:
        """Record why each of these sites' crawl ended (host → reason), together where the
        storage can: the sites of a polite crawl end within a second of each other. By
        default, one :meth:`set_stop_reason` each."""
        for host, reason in reasons.items():
            self.set_stop_reason(host, reason)

    @abstractmethod
    def iter_pages(self, host: str) -> Iterator[PageData]:
        """Every page of a site, by id, read in batches (for the unloaders)."""

    @abstractmethod
    def iter_arcs(self, host: str) -> Iterator[PageArc]:
        """Every arc between the nodes of a site's graph, each once, by (from, to): an arc
        to a duplicate or a redirect alias points to the page it stands for."""

    @abstractmethod
    def iter_raw_arcs(self, host: str) -> Iterator[PageArc]:
        """Every arc of a site as stored, by (from, to): the target unresolved, so arcs
        to error pages and redirect aliases are there too (a link checker needs them)."""

    @abstractmethod
    def iter_skipped(self, host: str) -> Iterator[tuple[str, str, str]]:
        """(url, reason, found_on url) of links of a site that never became pages."""

    # Several small sites read at once, each whole (the unloaders share what they read
    # of small sites: rccrawler.unloaders.site_pages): a storage with round trips reads
    # them together. These defaults read one site after the other.
    def pages_of_sites(self, hosts: Sequence[str]) -> dict[str, list[PageData]]:
        """Every page of each of ``hosts``, by id (what :meth:`iter_pages` yields)."""
        return {host: list(self.iter_pages(host)) for host in hosts}

    def arcs_of_sites(self, hosts: Sequence[str]) -> dict[str, list[PageArc]]:
        """The arcs of each of ``hosts`` (what :meth:`iter_arcs` yields)."""
        return {host: list(self.iter_arcs(host)) for host in hosts}

    def skipped_of_sites(self, hosts: Sequence[str]) -> dict[str, list[tuple[str, str, str]]]:
        """The skipped links of each of ``hosts`` (what :meth:`iter_skipped` yields)."""
        return {host: list(self.iter_skipped(host)) for host in hosts}

    # -- a task's own tables (rccrawler.data.tables) -------------------------------
    @abstractmethod
    def task_rows(
        self,
        table: str,
        *,
        columns: Sequence[str] | None = None,
        equals: Mapping[str, Any] | None = None,
        prefix: tuple[str, str] | None = None,
        any_of: tuple[str, Sequence[Any]] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Rows of a task table (``page_id`` first unless ``columns`` says otherwise).

        Args:
            table: a table the task declared.
            columns: the columns to return, in order (default: all).
            equals: column → value the rows must have.
            prefix: (text column, prefix) the rows must start with.
            any_of: (column, values): the rows whose column is one of the values.
        """

    @abstractmethod
    def task_row_counts(
        self, table: str, column: str, *, prefix: str = ""
    ) -> list[tuple[Any, int]]:
        """(value, number of rows) of a task table's column, by value (``words``)."""

    @abstractmethod
    def task_row_total(self, table: str) -> int:
        """How many rows a task table holds."""

    def stored_version(self) -> object | None:
        """A token that changes whenever what is stored may have changed, by this
        process or another (a reader keeps what it derived while it stays the same);
        None when the storage cannot tell cheaply: read again to know."""
        return None

    @abstractmethod
    def add_task_rows(self, table: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """Add rows to a task table declared with ``per_page=False``, in one transaction
        (what a task derives from its per-page rows when the crawl is over).

        Raises:
            KeyError: no such table, or it is kept per page (a page's rows are stored
                with its parse, by ``store_parse``).
        """

    @abstractmethod
    def clear_task_table(self, table: str) -> None:
        """Delete every row of a task table declared with ``per_page=False`` (before
        a task derives it again).

        Raises:
            KeyError: no such table, or it is kept per page.
        """
