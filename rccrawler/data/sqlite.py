"""The SQLite dialect: one WAL database in state_dir, one lock, group commit.

The statements and the crawl rules live in ``sql.py`` and ``policy.py``; this
module keeps what only an in-process database can do: hosts and running
counters in memory (statistics never scan a table), ids from a counter, the
front of each site's queue read in batches, and wake-ups aimed at the threads
that have work.

Group commit: the calls of many pages share one transaction, committed every
few milliseconds or calls, whichever comes first; a thread going idle commits a
group that is due and waits no longer than until it is. Each call is a savepoint
inside it, so a call that fails undoes only its own writes. A page is finished
once the transaction holding its writes commits, and a page is requested only
after its lease has committed: a ``kill -9`` fetches again only pages whose
committed state says they were in flight.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
import time
from collections import Counter, defaultdict, deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

from rccrawler.data.sql import (
    HOST_COLUMNS,
    INSERT_VALUES,
    LEASED,
    LEASED_STATES,
    PAGE_COLUMNS,
    Claim,
    Cursor,
    SQLDataManager,
    StorageOptions,
    due_at,
    host_from_row,
    page_from_row,
    state_error,
)
from rccrawler.data.stats import StateCounts, StatsMemo, snapshot
from rccrawler.exceptions import StateError
from rccrawler.policy import breadth_first_allows
from rccrawler.records import (
    CrawlStats,
    DownloadDemand,
    HostData,
    PageData,
    PageId,
    PageState,
    RobotsState,
    SkipReason,
)

if TYPE_CHECKING:
    pass

STATE_FILE = "crawl.sqlite3"
"""The database of a crawl in its state_dir (with its -wal and -shm companions)."""


class _HostCounters:
    """Running totals of one site, kept in memory so statistics() never scans a table."""

    __slots__ = ("admitted", "aliases", "budget_hit", "by_state", "bytes", "duplicates",
                 "errors", "levels")  # fmt: skip

    def __init__(self) -> None:
        self.admitted = 0
        self.by_state: Counter[str] = Counter()
        self.duplicates = 0
        self.aliases = 0
        self.bytes = 0
        self.errors: Counter[str] = Counter()
        self.levels: Counter[int] = Counter()
        """Levels of the pages in progress: the breadth-first barrier."""
        self.budget_hit = False

    def counts(self) -> StateCounts:
        """The counts as they are now, not a copy: read them under the DataManager's lock."""
        return StateCounts(
            self.by_state, self.errors, self.duplicates, self.aliases, self.bytes, self.budget_hit
        )


class _Front:
    """The front of a site's queue: waiting pages read in (level, id) order and leased
    in the database ('running') in one commit, handed out one by one from memory.

    Every waiting page that sorts before ``last`` is in ``pages``; one that becomes
    waiting there later (a retry, a redirect, a link one level up) makes the front
    ``stale``: it is given back and read again before the next page is handed out.
    """

    __slots__ = ("last", "pages", "stale")

    def __init__(self) -> None:
        self.pages: deque[PageData] = deque()
        self.last: tuple[int, int] = (-1, -1)
        self.stale = False


def _table_columns(db: sqlite3.Connection, names: Iterable[str]) -> dict[str, list[str]]:
    """The columns of those of ``names`` that are tables of ``db``, in order."""
    found = {}
    for name in names:
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({name})")]
        if columns:
            found[name] = columns
    return found


class SQLiteDataManager(SQLDataManager):
    """The default DataManager: a SQLite database ``crawl.sqlite3`` in ``state_dir``.

    One connection guarded by one lock; every public method runs inside the lock,
    as a savepoint of the current group transaction (see the module docstring).
    WAL with ``synchronous=NORMAL`` means a committed group survives ``kill -9``
    of the process.

    Args:
        path: the database file.
        limits: the crawl's numbers (budget, attempts, redirects).
        task_tables: tables a crawl task keeps its per-page results in.
        synchronous: SQLite's ``synchronous`` pragma. NORMAL (with WAL) survives a
            killed process; FULL also survives a power cut, at an fsync per call.
        read_only: only read (``status``, ``search`` beside a running crawl, or a
            state on a read-only disk): opened with ``mode=ro``, nothing written.
        max_pending_bytes: downloaded bodies waiting for a parser, at most.
        clock: wall-clock time source (tests may pass their own).
    """

    types: ClassVar[Mapping[str, str]] = {
        "float": "REAL", "id": "INTEGER", "int": "INTEGER", "bool": "INTEGER", "false": "0",
        "text": "TEXT", "bytes": "BLOB", "without_rowid": " WITHOUT ROWID",
    }  # fmt: skip
    group_commit_s: ClassVar[float] = 0.02
    """A group transaction commits after this many seconds...

    A commit writes every B-tree page the group changed to the WAL; pages of one site
    share index pages, so a longer group writes fewer pages in all (the PostgreSQL docs:
    16,100 page writes with 5 ms, 10,200 with 20 ms). A page is requested only once its
    lease committed, so a ``kill -9`` still fetches again only pages in flight."""
    group_commit_calls: ClassVar[int] = 256
    """...or this many calls, whichever comes first; an idle thread commits a group that is
    due, and waits no longer than until it is (:meth:`wait_for_work`)."""
    front_batch: ClassVar[int] = 32
    """Waiting pages of a site leased from the database at once."""

    def __init__(
        self, path: Path, *, synchronous: str = "NORMAL", **options: Unpack[StorageOptions]
    ) -> None:
        super().__init__(**options)
        self.path = Path(path)
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"bad synchronous mode {synchronous!r}")
        self.synchronous = synchronous.upper()
        self._robots_queue: dict[str, None] = {}
        """The hosts whose robots.txt is PENDING, in the order they came (its emptiness is
        read without the lock as a hint)."""
        self._candidates: deque[str] = deque()
        """Hosts that may have a page to lease (robots read, pages waiting), in turn: a
        take looks at these, not at every host of the crawl (thousands of sites)."""
        self._candidate_set: set[str] = set()
        self._resting: list[tuple[float, str]] = []
        """(when due, host) of candidates held back by their politeness, soonest first:
        a take looks at a host again only once it is due (a crawl of 300 polite hosts
        spent a quarter of its interpreter time looking at hosts that were not)."""
        self._db: sqlite3.Connection | None = None
        self._hosts: dict[str, HostData] = {}
        self._counters: dict[str, _HostCounters] = defaultdict(_HostCounters)
        self._stats_memo: StatsMemo = {}
        """Each site's last HostStats (statistics() makes anew only those that changed)."""
        self._next_id = 1
        self._group_open = False
        """Whether a group transaction is open (read without the lock as a hint)."""
        self._group_started = 0.0
        self._group_calls = 0
        self._fronts: dict[str, _Front] = defaultdict(_Front)
        self._leased: dict[PageId, PageData] = {}
        """Pages handed to a downloader, by id: storing the download needs no read."""

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        try:
            if self.read_only:
                # mode=ro: a state of another user can still be read. On a read-only
                # disk SQLite cannot make the WAL's shared-memory file either: nobody can
                # write there, so the file is read as immutable.
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                if not os.access(self.path.parent, os.W_OK):
                    uri += "&immutable=1"
                db = sqlite3.connect(
                    uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30
                )
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None, timeout=30
                )
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the state database {self.path}: {exc}") from exc
        try:
            self.check_task_layout(_table_columns(db, self.task_tables))
            if self.read_only:
                db.execute("PRAGMA query_only=1")
                self._check_readable(db.cursor())
            else:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self.synchronous}")
                db.execute("PRAGMA cache_size=-2000")  # 2 MB: the OS caches the file too
                db.execute("PRAGMA temp_store=MEMORY")
                db.executescript(self.schema_sql())
            self._db = db
            self._load_memory()
        except (sqlite3.DatabaseError, StateError) as exc:
            db.close()
            self._db = None
            if isinstance(exc, StateError):
                raise  # task tables of another layout
            raise StateError(f"{self.path} is not a usable crawl state ({exc})") from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None and not self.read_only:
                with contextlib.suppress(StateError):
                    self._give_back_fronts()
                    self._commit()
            if self._db is not None:
                # A failed checkpoint is harmless: the next open replays the WAL.
                if not self.read_only:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.close()
                self._db = None

    @classmethod
    def files(cls, state_dir: Path) -> list[Path]:
        """The files this backend writes in a state_dir (what ``discard`` removes)."""
        return [state_dir / f"{STATE_FILE}{suffix}" for suffix in ("", "-wal", "-shm")]

    def describe(self) -> str:
        return str(self.path.parent)

    def _transaction(self, *, later: bool = False) -> _Call:
        return _Call(self)

    def _begin_writes(self) -> None:
        """Before a call's first write: the group transaction, and the call's savepoint
        in it (so that a failing call undoes its own writes only)."""
        db = self.db
        try:
            if not self._group_open:
                db.execute("BEGIN IMMEDIATE")
                self._group_open = True
                self._group_started = time.monotonic()
                self._group_calls = 0
            db.execute("SAVEPOINT call")
        except sqlite3.OperationalError as exc:
            raise state_error(str(self.path), exc) from exc

    def _call_failed(self, exc: BaseException, wrote: bool) -> None:
        """Undo what a failing call wrote; a storage error ends the whole group."""
        self._transaction_ended(committed=False)
        if isinstance(exc, sqlite3.OperationalError):
            # The database may have undone more than this call (a full disk):
            # give up the whole group; the crawl stops on the StateError.
            self._rollback()
            raise state_error(str(self.path), exc) from exc
        if not wrote:
            return
        try:
            self.db.execute("ROLLBACK TO call")
            self.db.execute("RELEASE call")
        except sqlite3.Error:
            self._rollback()

    def _call_done(self, wrote: bool) -> None:
        if wrote:
            try:
                self.db.execute("RELEASE call")
            except sqlite3.OperationalError as exc:
                self._call_failed(exc, wrote)
            self._group_calls += 1
        self._transaction_ended(committed=True)
        if self._group_open and (
            self._group_calls >= self.group_commit_calls or self._group_due_in() <= 0
        ):
            self._commit()
        self._wake()

    def _group_due_in(self) -> float:
        """Seconds until the open group transaction is group_commit_s old (<= 0: due)."""
        return self.group_commit_s - (time.monotonic() - self._group_started)

    def _commit(self) -> None:
        """Commit the group transaction, if one is open (lock held)."""
        if not self._group_open:
            return
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback()
            raise state_error(str(self.path), exc) from exc
        self._group_open = False

    def _rollback(self) -> None:
        self._group_open = False
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("ROLLBACK")

    def flush(self) -> None:
        """Commit what the calls so far wrote (a thread going idle, a checkpoint)."""
        if self._group_open:  # a hint read; checked again under the lock
            with self._lock:
                self._commit()

    def wait_for_work(self, timeout: float, kind: str = "") -> None:
        # Nothing else to do: the finished pages become durable when the group is
        # group_commit_s old, as if calls went on; a thread waits no longer than that.
        if self._group_open:  # a hint read, like flush()'s
            left = self._group_due_in()
            if left <= 0:
                self.flush()
            else:
                timeout = min(timeout, left)
        super().wait_for_work(timeout, kind)

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StateError("the DataManager is not open")
        return self._db

    def _load_memory(self) -> None:
        db = self.db
        self._hosts = {}
        for row in db.execute(f"SELECT {HOST_COLUMNS} FROM hosts"):
            host = host_from_row(row)
            host.in_flight = 0
            self._hosts[host.host] = host
        self._counters = defaultdict(_HostCounters)
        for host, state, count in db.execute(
            "SELECT host, state, count(*) FROM pages GROUP BY host, state"
        ):
            counters = self._counters[host]
            counters.by_state[state] = count
            counters.admitted += count
        for host, count in db.execute(
            "SELECT host, count(*) FROM pages WHERE replace_id IS NOT NULL AND error_code = '' "
            "GROUP BY host"
        ):
            self._counters[host].duplicates = count
        for host, count in db.execute(
            "SELECT host, count(*) FROM pages WHERE error_code = 'redirect' GROUP BY host"
        ):
            self._counters[host].aliases = count
        for host, error, count in db.execute(
            "SELECT host, error_code, count(*) FROM pages WHERE state = 'error' "
            "GROUP BY host, error_code"
        ):
            self._counters[host].errors[error] = count
        for host, size in db.execute("SELECT host, sum(bytes) FROM pages GROUP BY host"):
            self._counters[host].bytes = int(size or 0)
        for host, level, count in db.execute(
            f"SELECT host, level, count(*) FROM pages WHERE state IN {LEASED} GROUP BY host, level"
        ):
            self._counters[host].levels[level] = count
        for host, budget_hit in db.execute("SELECT host, budget_hit FROM hosts"):
            self._counters[host].budget_hit = bool(budget_hit)
        row = db.execute("SELECT max(id) FROM pages").fetchone()
        self._next_id = (row[0] or 0) + 1
        self._load_deep_links(db.cursor())
        self._queue_all()

    def recover(self) -> int:
        with self._atomic() as db:
            # Bodies waiting for a parser live in memory only: a page whose links
            # were not stored yet is fetched again, like one that was in flight.
            db.execute(f"UPDATE pages SET state = 'waiting' WHERE state IN {LEASED}")
            moved: int = db.rowcount
            self._fronts.clear()
            self._leased.clear()
            self._held_hashes.clear()
            self._url_pages.clear()
            self._robots_in_flight = 0
            self._load_memory()
            self._wake_downloaders = self._wake_parsers = 1 << 16
            now = self.clock()
            for host in self._hosts.values():
                if host.robots_state is RobotsState.FETCHING:
                    host.robots_state = RobotsState.PENDING
                # The last request before a crash may have been just now.
                host.next_fetch_at = max(host.next_fetch_at, now + host.crawl_delay)
                self._save_host(db, host)
            self._queue_all()
            return moved

    # -- the dialect's hooks ---------------------------------------------------
    def _clock(self, cur: Cursor) -> float:
        return self.clock()

    def _allocate_ids(self, cur: Cursor, count: int) -> list[int]:
        ids = list(range(self._next_id, self._next_id + count))
        self._next_id += count
        return ids

    def _claim(
        self, cur: Cursor, page_id: PageId, states: Sequence[PageState], known: PageData | None
    ) -> Claim:
        # One process owns the database: a page it leased is still its own.
        page = known or self._leased.get(page_id)
        if page is None:
            row = cur.execute(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = ?", (page_id,)
            ).fetchone()
            if row is None:
                raise KeyError(page_id)
            page = page_from_row(row)
        host = self._hosts[page.host]
        return Claim(page, host, self._counters[page.host].admitted, self.clock())

    def _release(self, cur: Cursor, page: PageData) -> None:
        self._leased.pop(page.id, None)
        host = self._hosts[page.host]
        host.in_flight = max(0, host.in_flight - 1)
        self._wake_downloaders += 1  # a slot of the host is free again

    def _find_host(self, cur: Cursor, host: str) -> HostData | None:
        return self._hosts.get(host)

    def _insert_hosts(self, cur: Cursor, hosts: Sequence[HostData]) -> None:
        super()._insert_hosts(cur, hosts)
        for host in hosts:
            self._hosts[host.host] = host
            self._queue_host(host)

    def _save_politeness(self, cur: Cursor, host: HostData) -> None:
        live = self._hosts[host.host]
        live.crawl_delay = host.crawl_delay
        live.retry_after_until = host.retry_after_until
        live.next_fetch_at = max(live.next_fetch_at, host.next_fetch_at)
        self._save_host(cur, live)

    def _on_move(
        self, page: PageData, new: PageState, *, error: str = "", duplicate: bool = False,
        alias: bool = False, size: int = 0,
    ) -> None:  # fmt: skip
        counters = self._counters[page.host]
        old = page.state
        if new is PageState.WAITING:
            self._queued(page.host, page.level, page.id)
            self._add_candidate(page.host)
        counters.by_state[old] -= 1
        counters.by_state[new] += 1
        was_busy, busy = old in LEASED_STATES, new in LEASED_STATES
        if was_busy and not busy:
            counters.levels[page.level] -= 1
        elif busy and not was_busy:
            counters.levels[page.level] += 1
        if new is PageState.ERROR:
            counters.errors[error] += 1
        elif alias:
            counters.aliases += 1  # an alias is done, but not a finished page of its own
        if duplicate:
            counters.duplicates += 1
        counters.bytes += size

    def _insert_pages(
        self, cur: Cursor, rows: Sequence[tuple[str, str, str, int | None, int, str]]
    ) -> list[int]:
        ids = super()._insert_pages(cur, rows)
        first: dict[str, tuple[int, int]] = {}  # each host's (level, id) that sorts first
        for row, page_id in zip(rows, ids, strict=True):
            first[row[0]] = min(first.get(row[0], (row[4], page_id)), (row[4], page_id))
        for host, (level, page_id) in first.items():
            self._queued(host, level, page_id)
        return ids

    def _waiting_in_memory(
        self, cur: Cursor, host: str, rows: Sequence[tuple[str, int, str, int]], level: int
    ) -> Container[int]:
        front = self._fronts.get(host)
        in_front = {page.id for page in front.pages} if front is not None else set()
        if any(page_id in in_front and page_level > level
               for _, page_id, _, page_level in rows):  # fmt: skip
            # A page of the front is waiting, though its row says leased: give the
            # front back, so that the page moves up and is leased at its new level.
            self._give_back(cur, host)
        return in_front

    def _queued(self, host: str, level: int, page_id: int) -> None:
        """A page became waiting: the site's front is stale if it sorts before its end."""
        front = self._fronts.get(host)
        if front is not None and front.pages and (level, page_id) < front.last:
            front.stale = True

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        counters = self._counters[host]
        counters.admitted += count
        counters.by_state[PageState.WAITING] += count
        self._add_candidate(host)

    def _on_budget_hit(self, cur: Cursor, host: str) -> None:
        if not self._counters[host].budget_hit:
            self._counters[host].budget_hit = True
            super()._on_budget_hit(cur, host)

    def _on_budget_cleared(self, cur: Cursor, host: str) -> None:
        if self._counters[host].budget_hit:
            self._counters[host].budget_hit = False
            super()._on_budget_cleared(cur, host)

    def _on_reached(self, cur: Cursor, host: str, pages: Sequence[int], level: int) -> None:
        counters = self._counters[host]
        counters.by_state[PageState.UNREACHED] -= len(pages)
        counters.by_state[PageState.WAITING] += len(pages)
        self._queued(host, level, pages[0])
        self._add_candidate(host)

    def _on_refresh_begun(self, cur: Cursor) -> None:
        # Every page and host changed in the tables: memory is read again from them
        # (this connection sees its own writes).
        self._fronts.clear()
        self._leased.clear()
        self._held_hashes.clear()
        self._url_pages.clear()
        self._load_memory()

    def _end_waiting(self, cur: Cursor, host: str, reason: SkipReason) -> None:
        self._give_back(cur, host)  # leased pages of the front are waiting pages too
        super()._end_waiting(cur, host, reason)

    def _on_waiting_ended(self, host: str, count: int) -> None:
        counters = self._counters[host]
        counters.by_state[PageState.WAITING] -= count
        counters.by_state[PageState.SKIPPED] += count
        if count < 0:
            self._add_candidate(host)  # pages wait again
            self._queued(host, 0, 0)

    def stored_version(self) -> object | None:
        # data_version changes with another connection's commits, total_changes with
        # this one's: a few microseconds, where a count(*) scans a table. Read as every
        # read is (a failure is a StateError); total_changes is a counter the connection
        # keeps, not a query.
        [(version,)] = self._read("PRAGMA data_version", ())
        return version, self.db.total_changes

    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self.db.execute(query, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                raise StateError(f"cannot read the crawl state {self.path}: {exc}") from exc

    # -- claiming work (in memory, under the lock) ------------------------------------
    def _queue_all(self) -> None:
        """Both queues from every host (at open and recovery; lock held or not needed)."""
        self._robots_queue = {}
        self._candidates.clear()
        self._candidate_set.clear()
        self._resting.clear()
        for host in self._hosts.values():
            self._queue_host(host)

    def _queue_host(self, host: HostData) -> None:
        """Queue a host for its robots.txt, or as a candidate for leases."""
        if host.robots_state is RobotsState.PENDING:
            self._robots_queue[host.host] = None
        elif host.robots_state is RobotsState.READY:
            self._add_candidate(host.host)

    def _add_candidate(self, host: str) -> None:
        """A host may have pages to lease now (lock held)."""
        if host not in self._candidate_set:
            self._candidate_set.add(host)
            self._candidates.append(host)

    def take_robots(self) -> HostData | None:
        if not self._robots_queue:
            return None  # every downloader asks on every step: skip the lock
        with self._lock:  # memory only: nothing to commit
            now = self.clock()
            for name in self._robots_queue:
                host = self._hosts[name]
                if host.next_fetch_at <= now:
                    host.robots_state = RobotsState.FETCHING
                    host.next_fetch_at = now + host.crawl_delay
                    del self._robots_queue[name]
                    self._robots_in_flight += 1
                    return replace(host)
            return None

    def store_robots(
        self, host: str, status: int | None, text: str, crawl_delay: float | None, *,
        blocked: bool, error: str = "",
    ) -> None:  # fmt: skip
        super().store_robots(host, status, text, crawl_delay, blocked=blocked, error=error)
        with self._lock:
            self._add_candidate(host)

    def hosts(self) -> list[HostData]:
        with self._lock:
            return [replace(host) for host in self._hosts.values()]

    def host(self, host: str) -> HostData | None:
        with self._lock:
            data = self._hosts.get(host)
            return replace(data) if data is not None else None

    def take_for_download(self) -> PageData | None:
        # Finding nothing is the common case for idle threads: only a lease opens a transaction.
        if self._pending_bytes > self.max_pending_bytes:
            return None  # the parsers are behind: let them catch up first
        with self._lock:
            now = self.clock()
            self._start_due_count()
            self._wake_rested(now)
            candidates = self._candidates
            # Each host in turn, from where the last take stopped: a host that has nothing
            # to lease leaves the queue (a page becoming waiting puts it back), and one
            # held back by its politeness rests until it is due.
            for _ in range(len(candidates)):
                host = self._hosts[candidates[0]]
                counters = self._counters[host.host]
                if (
                    host.robots_state is not RobotsState.READY
                    or counters.by_state[PageState.WAITING] <= 0
                ):
                    self._candidate_set.discard(candidates.popleft())
                    continue
                if self._held_back(host, now):
                    self._candidate_set.discard(candidates.popleft())
                    self._rest(self._resting, host)
                    continue
                candidates.rotate(-1)
                if host.in_flight >= host.max_downloads_at_time:
                    continue
                page = self._front_page(host)
                if page is None:
                    continue
                busy = [level for level, n in counters.levels.items() if n > 0]
                if not breadth_first_allows(page.level, busy):
                    continue
                self._fronts[host.host].pages.popleft()
                self._on_move(page, PageState.RUNNING)
                host.in_flight += 1
                host.next_fetch_at = now + host.crawl_delay
                page.state = PageState.RUNNING
                self._leased[page.id] = page
                self._wake()
                self._took()
                return page
            return None

    def _wake_rested(self, now: float) -> None:
        """Resting hosts that are due are candidates again; the soonest of the others
        counts for :meth:`_due_in` (lock held)."""
        for host in self._due_rested(self._resting, now):
            self._add_candidate(host)

    def download_demand(self, limit: int) -> DownloadDemand:
        with self._lock:
            in_flight = len(self._leased) + self._robots_in_flight
            if self._pending_bytes > self.max_pending_bytes:
                return DownloadDemand(in_flight, in_flight)  # downloads pause meanwhile
            now = self.clock()
            self._wake_rested(now)
            allowed = in_flight
            for name in self._robots_queue:
                if allowed >= limit:
                    break
                allowed += self._hosts[name].next_fetch_at <= now
            for name in self._candidates:
                if allowed >= limit:
                    break
                host = self._hosts[name]
                if (
                    host.robots_state is RobotsState.READY
                    and self._counters[name].by_state[PageState.WAITING] > 0
                    and due_at(host) <= now
                ):
                    allowed += max(0, host.max_downloads_at_time - host.in_flight)
            return DownloadDemand(in_flight, min(allowed, limit))

    def _front_page(self, data: HostData) -> PageData | None:
        """The next page of a site's queue, leased and committed (lock held)."""
        host = data.host
        front = self._fronts[host]
        if front.stale and front.pages:
            with self._transaction() as cur:
                self._give_back(cur, host)
        if not front.pages:
            # A polite site (few downloads at a time) gets a shorter front: many sites
            # of one crawl each keep theirs in memory.
            batch = min(self.front_batch, 4 * max(1, data.max_downloads_at_time))
            with self._transaction() as cur:
                rows = cur.execute(
                    f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = ? AND state = 'waiting' "
                    "ORDER BY level, id LIMIT ?",
                    (host, batch),
                ).fetchall()
                if not rows:
                    return None
                pages = [page_from_row(row) for row in rows]
                marks = ",".join("?" * len(pages))
                cur.execute(
                    f"UPDATE pages SET state = 'running' WHERE id IN ({marks})",
                    [page.id for page in pages],
                )
            # A page is requested only once its lease is committed (kill -9 safety).
            self._commit()
            front.pages.extend(pages)
            front.last = (pages[-1].level, pages[-1].id)
        return front.pages[0]

    def _give_back(self, cur: Cursor, host: str) -> None:
        """Return a site's front to the waiting pages in the database (lock held)."""
        front = self._fronts.get(host)
        if front is None:
            return
        front.stale = False
        if not front.pages:
            return
        ids = [page.id for page in front.pages]
        front.pages.clear()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            cur.execute(
                f"UPDATE pages SET state = 'waiting' WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            )

    def _give_back_fronts(self) -> None:
        """Every front back to waiting, so a stopped crawl's state shows what it holds."""
        if any(front.pages for front in self._fronts.values()):
            with self._transaction() as cur:
                for host in list(self._fronts):
                    self._give_back(cur, host)

    def mark_request_sent(self, host: str) -> None:
        known = self._hosts.get(host)
        if known is not None and known.crawl_delay <= 0:
            return  # no delay to count from: skip the lock (a hint read, like take_robots)
        with self._lock:
            data = self._hosts.get(host)
            if data is not None:
                data.next_fetch_at = max(data.next_fetch_at, self.clock() + data.crawl_delay)

    # -- reading ---------------------------------------------------------
    def statistics(self) -> CrawlStats:
        with self._lock:
            sites = []
            for name, host in self._hosts.items():
                counts = self._counters[name].counts()
                sites.append((host, counts, counts.by_state.get(PageState.PARSING, 0)))
            stats = snapshot(sites, self.clock(), self._stats_memo)
            if not self.read_only:
                return replace(stats, downloading_threads=self._threads_noted[1])
        # ``rccrawler status``: the threads as the running crawl last noted them.
        with self._lock:
            busy, total = self._noted_threads(self.db.cursor())
        return replace(stats, downloading=busy, downloading_threads=total)


_ROWS_A_STATEMENT = 128
"""Rows of one multi-row ``INSERT`` at most (SQLite allows 32,766 parameters)."""


@functools.lru_cache(maxsize=64)
def _insert_shape(query: str) -> tuple[str, str, str] | None:
    """An ``INSERT … VALUES (?, …)`` (:data:`INSERT_VALUES`) as its head, one row's marks
    and its tail; None for any other statement."""
    found = INSERT_VALUES.fullmatch(query)
    if found is None:
        return None
    marks = found.start(3) - 1  # the row's "("
    return query[:marks], query[marks : found.end(3) + 1], found.group(4)


@functools.lru_cache(maxsize=256)
def _insert_rows(shape: tuple[str, str, str], count: int) -> str:
    """The statement of ``shape`` for ``count`` rows."""
    head, marks, tail = shape
    return head + ", ".join([marks] * count) + tail


class _CallCursor:
    """The cursor of one DataManager call. Its savepoint (and the group transaction) is
    opened before its first write, not before its first statement: a call that only
    reads, as storing a download held in memory does, costs no savepoint."""

    __slots__ = ("_cursor", "_manager", "wrote")

    def __init__(self, manager: SQLiteDataManager, cursor: sqlite3.Cursor) -> None:
        self._manager = manager
        self._cursor = cursor
        self.wrote = False

    def execute(self, query: str, params: Any = (), /) -> sqlite3.Cursor:
        if not self.wrote and not query.startswith("SELECT"):
            self._manager._begin_writes()
            self.wrote = True
        return self._cursor.execute(query, params)

    def executemany(self, query: str, params_seq: Any, /) -> sqlite3.Cursor:
        if not self.wrote:
            self._manager._begin_writes()
            self.wrote = True
        # The rows of an INSERT as a few statements of 128, 64, …, 1 rows (few texts to
        # cache), not one a row: sqlite3 steps each row as a statement, letting go of
        # the GIL each time (a page's arcs: a dozen). Paired crawls of the PostgreSQL
        # docs took 0.97x the time.
        rows = params_seq if isinstance(params_seq, list) else list(params_seq)
        if len(rows) < 2 or (shape := _insert_shape(query)) is None:
            return self._cursor.executemany(query, rows)
        start = 0
        while start < len(rows):
            count = min(1 << ((len(rows) - start).bit_length() - 1), _ROWS_A_STATEMENT)
            chunk = rows[start : start + count]
            self._cursor.execute(_insert_rows(shape, count), list(itertools.chain(*chunk)))
            start += count
        return self._cursor

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


class _Call:
    """One call's transaction (lock held): a class, not a generator-based context
    manager, because every call of the crawl goes through it."""

    __slots__ = ("_cursor", "_manager")

    def __init__(self, manager: SQLiteDataManager) -> None:
        self._manager = manager
        self._cursor: _CallCursor | None = None

    def __enter__(self) -> _CallCursor:
        self._cursor = _CallCursor(self._manager, self._manager.db.cursor())
        return self._cursor

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        assert self._cursor is not None
        if exc is None:
            self._manager._call_done(self._cursor.wrote)
        else:
            self._manager._call_failed(exc, self._cursor.wrote)
