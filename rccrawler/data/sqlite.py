"""The SQLite DataManager: one WAL database in state_dir, one lock, one transaction a call."""

from __future__ import annotations

import contextlib
import heapq
import json
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rccrawler.data.base import SCHEMA_VERSION, DataManager, check_state_identity
from rccrawler.data.rows import (
    BLOCKED_BY_ROBOTS,
    PAGE_COLUMNS,
    PagedReads,
    is_html,
    page_from_row,
    throttled_delay,
)
from rccrawler.exceptions import StateError
from rccrawler.records import (
    CrawlStats,
    DownloadResult,
    FoundLink,
    HostData,
    HostStats,
    PageData,
    PageId,
    PageState,
    RobotsState,
    SkippedLink,
    SkipReason,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY, data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pages (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    normalized_url TEXT NOT NULL,
    id_from INTEGER,
    level INTEGER NOT NULL,
    out_degree INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    downloaded INTEGER NOT NULL DEFAULT 0,
    parsed INTEGER NOT NULL DEFAULT 0,
    http_status INTEGER,
    content_type TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL DEFAULT '',
    error_code TEXT NOT NULL DEFAULT '',
    replace_id INTEGER,
    download_attempts INTEGER NOT NULL DEFAULT 0,
    redirect_target TEXT NOT NULL DEFAULT '',
    redirect_hops INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0,
    referer TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS pages_queue ON pages (host, state, level, id);
CREATE INDEX IF NOT EXISTS pages_parse ON pages (state, level, id);
CREATE INDEX IF NOT EXISTS pages_hash ON pages (host, content_hash);
CREATE TABLE IF NOT EXISTS urls (
    normalized_url TEXT PRIMARY KEY, page_id INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS arcs (
    from_id INTEGER NOT NULL, to_id INTEGER NOT NULL, host TEXT NOT NULL,
    PRIMARY KEY (from_id, to_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS arcs_host ON arcs (host);
CREATE TABLE IF NOT EXISTS skipped (
    host TEXT NOT NULL, url TEXT NOT NULL, reason TEXT NOT NULL, found_on INTEGER,
    PRIMARY KEY (host, url)
) WITHOUT ROWID;
"""

_IN_PROGRESS = (PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING)


def _host_to_json(host: HostData) -> str:
    return json.dumps({name: getattr(host, name) for name in HostData.__slots__})


def _host_from_json(text: str) -> HostData:
    raw = json.loads(text)
    raw["robots_state"] = RobotsState(raw.get("robots_state", "pending"))
    # A state saved before auto-throttle existed: its delay was the floor.
    raw.setdefault("min_crawl_delay", raw.get("crawl_delay", 0.0))
    known = set(HostData.__slots__)
    return HostData(**{k: v for k, v in raw.items() if k in known})


class _HostCounters:
    """Running totals of one site, kept in memory so statistics() never scans a table."""

    __slots__ = (
        "admitted",
        "aliases",
        "budget_hit",
        "by_state",
        "bytes",
        "duplicates",
        "errors",
        "levels",
    )  # fmt: skip

    def __init__(self) -> None:
        self.admitted = 0
        self.by_state: Counter[str] = Counter()
        self.duplicates = 0
        self.aliases = 0
        """Redirects to a page known already: done, but not pages of their own."""
        self.bytes = 0
        self.errors: Counter[str] = Counter()
        self.levels: Counter[int] = Counter()
        """Levels of the pages in progress: the breadth-first barrier."""
        self.budget_hit = False

    def move(self, old: str | None, new: str) -> None:
        if old is not None:
            self.by_state[old] -= 1
        self.by_state[new] += 1


class SQLiteDataManager(PagedReads, DataManager):
    """The default DataManager: a SQLite database ``crawl.sqlite3`` in ``state_dir``.

    One connection guarded by one lock; every public method runs inside
    ``with self._lock`` and commits once. WAL with ``synchronous=NORMAL``
    means a committed call survives ``kill -9`` of the process.

    Args:
        path: the database file.
        max_pages: per-site budget of pages (0 = none), enforced when links are added.
        max_download_attempts: attempts before a retryable error is final.
        max_redirects: hops before a redirect chain is an error.
        synchronous: SQLite's ``synchronous`` pragma. NORMAL (with WAL) survives a
            killed process; FULL also survives a power cut, at an fsync per call.
        max_pending_bytes: downloaded bodies waiting for a parser, at most; downloads
            pause beyond it, so slow parsing cannot fill the memory.
        read_only: only read (``rccrawler status`` beside a running crawl): no schema
            changes, no checkpoint on close.
        clock: wall-clock time source (tests may pass their own).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_pages: int = 0,
        max_download_attempts: int = 3,
        max_redirects: int = 10,
        synchronous: str = "NORMAL",
        read_only: bool = False,
        max_pending_bytes: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_pages = max_pages
        self.max_download_attempts = max_download_attempts
        self.max_redirects = max_redirects
        self.clock = clock
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"bad synchronous mode {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.read_only = read_only
        self._lock = threading.Lock()
        # Idle threads wait on these; a commit wakes as many as it made work for.
        self._download_ready = threading.Condition(self._lock)
        self._parse_ready = threading.Condition(self._lock)
        self._wake_downloaders = 0
        self._wake_parsers = 0
        # Downloaded bodies wait for a parser here, not on disk (see recover()).
        self._parse_queue: list[tuple[int, PageId]] = []
        self._downloaded: dict[PageId, tuple[PageData, bytes]] = {}
        self._parsing: dict[PageId, tuple[PageData, int]] = {}
        self._pending_bytes = 0
        self.max_pending_bytes = max_pending_bytes
        self._robots_pending = 0
        """Hosts whose robots.txt is PENDING (read without the lock as a hint)."""
        self._due_in = 0.0
        """Seconds until the soonest host becomes due, as the last take saw it."""
        self._db: sqlite3.Connection | None = None
        self._hosts: dict[str, HostData] = {}
        self._counters: dict[str, _HostCounters] = defaultdict(_HostCounters)
        self._next_id = 1
        self._rotation = 0
        self._pages_done = 0
        self._bytes = 0

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=30
            )
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open the state database {self.path}: {exc}") from exc
        try:
            if self.read_only:
                db.execute("PRAGMA query_only=1")
                self._db = db
                self._load_memory()
                return
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA cache_size=-2000")  # 2 MB: the OS caches the file too
            db.execute("PRAGMA temp_store=MEMORY")
            db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            db.close()
            raise StateError(f"{self.path} is not a usable crawl state ({exc})") from exc
        self._db = db
        self._load_memory()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                # A failed checkpoint is harmless: the next open replays the WAL.
                with contextlib.suppress(sqlite3.Error):
                    if self.read_only:
                        raise sqlite3.Error("no checkpoint from a reader")
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.close()
                self._db = None

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[sqlite3.Connection]:
        """The lock and one committed transaction around a public method's body."""
        with self._lock, self._transaction() as db:
            yield db

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One committed transaction; the caller holds the lock.

        A failure rolls the transaction back, so the file stays consistent; a
        storage failure (disk full, I/O error, read-only) becomes a StateError.
        """
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise StateError(f"cannot write the crawl state {self.path}: {exc}") from exc
            raise
        if self._wake_downloaders:
            self._download_ready.notify(self._wake_downloaders)
            self._wake_downloaders = 0
        if self._wake_parsers:
            self._parse_ready.notify(self._wake_parsers)
            self._wake_parsers = 0

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StateError("the DataManager is not open")
        return self._db

    def _load_memory(self) -> None:
        db = self.db
        self._hosts = {
            host: _host_from_json(data) for host, data in db.execute("SELECT host, data FROM hosts")
        }
        for host in self._hosts.values():
            host.in_flight = 0
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
            "SELECT host, level, count(*) FROM pages WHERE state IN (?, ?, ?) GROUP BY host, level",
            _IN_PROGRESS,
        ):
            self._counters[host].levels[level] = count
        for (host,) in db.execute("SELECT DISTINCT host FROM skipped WHERE reason = 'budget'"):
            self._counters[host].budget_hit = True
        row = db.execute("SELECT max(id) FROM pages").fetchone()
        self._next_id = (row[0] or 0) + 1
        self._pages_done = sum(
            c.by_state[PageState.DONE] - c.aliases for c in self._counters.values()
        )
        self._bytes = sum(c.bytes for c in self._counters.values())

    def check_identity(self, manager: str, storage: str) -> None:
        with self._atomic() as db:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("manager", manager),
                     ("storage", storage), ("created", str(self.clock()))],
                )  # fmt: skip
                return
        check_state_identity(meta, manager, storage, str(self.path.parent))

    def recover(self) -> int:
        with self._atomic() as db:
            # Bodies waiting for a parser live in memory only: a page whose links
            # were not stored yet is fetched again, like one that was in flight.
            moved = db.execute(
                "UPDATE pages SET state = 'waiting' "
                "WHERE state IN ('running', 'downloaded', 'parsing')"
            ).rowcount
            self._load_memory()
            self._wake_downloaders = self._wake_parsers = 1 << 16
            now = self.clock()
            for host in self._hosts.values():
                if host.robots_state is RobotsState.FETCHING:
                    host.robots_state = RobotsState.PENDING
                # The last request before a crash may have been just now.
                host.next_fetch_at = max(host.next_fetch_at, now + host.crawl_delay)
                self._save_host(host)
            self._count_robots()
            return moved

    # -- sites and robots ------------------------------------------------
    def _save_host(self, host: HostData) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO hosts (host, data) VALUES (?, ?)",
            (host.host, _host_to_json(host)),
        )

    def add_site(self, host: HostData, start_url: str, normalized_url: str) -> bool:
        with self._atomic():
            if host.host in self._hosts:
                known = self._hosts[host.host]
                # Settings may change between runs; politeness follows the newest.
                known.crawl_delay = max(host.crawl_delay, known.crawl_delay)
                known.min_crawl_delay = max(host.crawl_delay, known.min_crawl_delay)
                known.max_downloads_at_time = host.max_downloads_at_time
                known.max_crawl_level = host.max_crawl_level
                self._save_host(known)
                # Another start URL on a known host (docs.x/3/ and docs.x/2/): one more root.
                seen = self.db.execute(
                    "SELECT 1 FROM urls WHERE normalized_url = ?", (normalized_url,)
                ).fetchone()
                if seen is not None:
                    return False
                self._insert_pages(
                    [(host.host, start_url, normalized_url, None, 0, "")],
                    self._counters[host.host],
                )
                if known.stop_reason.startswith(BLOCKED_BY_ROBOTS):
                    self._end_waiting(host.host, SkipReason.ROBOTS)  # nothing of it is crawled
                elif known.stop_reason:
                    known.stop_reason, known.finished_at = "", 0.0  # it has work again
                    self._save_host(known)
                return True
            host = replace(
                host,
                started_at=self.clock(),
                min_crawl_delay=max(host.min_crawl_delay, host.crawl_delay),
            )
            self._hosts[host.host] = host
            self._save_host(host)
            self._insert_pages(
                [(host.host, start_url, normalized_url, None, 0, "")], self._counters[host.host]
            )
            self._count_robots()
            return True

    def _insert_pages(
        self,
        rows: Sequence[tuple[str, str, str, int | None, int, str]],
        counters: _HostCounters,
    ) -> list[int]:
        """Insert WAITING pages (host, url, normalized, id_from, level, referer); returns ids."""
        ids = list(range(self._next_id, self._next_id + len(rows)))
        self._next_id += len(rows)
        self.db.executemany(
            "INSERT INTO pages (id, host, url, normalized_url, id_from, level, state, referer) "
            "VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?)",
            [(pid, *row) for pid, row in zip(ids, rows, strict=True)],
        )
        self.db.executemany(
            "INSERT INTO urls (normalized_url, page_id) VALUES (?, ?)",
            [(row[2], pid) for pid, row in zip(ids, rows, strict=True)],
        )
        counters.admitted += len(rows)
        counters.by_state[PageState.WAITING] += len(rows)
        self._wake_downloaders += len(rows)
        return ids

    def take_robots(self) -> HostData | None:
        if not self._robots_pending:
            return None  # every downloader asks on every step: skip the lock
        with self._lock:  # memory only: nothing to commit
            now = self.clock()
            for host in self._hosts.values():
                if host.robots_state is RobotsState.PENDING and host.next_fetch_at <= now:
                    host.robots_state = RobotsState.FETCHING
                    host.next_fetch_at = now + host.crawl_delay
                    self._count_robots()
                    return replace(host)
            return None

    def _count_robots(self) -> None:
        self._robots_pending = sum(
            1 for host in self._hosts.values() if host.robots_state is RobotsState.PENDING
        )

    def store_robots(
        self, host: str, status: int | None, text: str, crawl_delay: float | None, *, blocked: bool
    ) -> None:
        with self._atomic():
            data = self._hosts[host]
            data.robots_state = RobotsState.READY
            data.robots_status = status
            data.robots_text = text
            if crawl_delay is not None and crawl_delay > data.min_crawl_delay:
                data.min_crawl_delay = crawl_delay
                data.crawl_delay = max(data.crawl_delay, crawl_delay)
            data.next_fetch_at = max(data.next_fetch_at, self.clock() + data.crawl_delay)
            self._wake_downloaders = 1 << 16  # the host's pages may be taken now
            if blocked:
                data.stop_reason = (
                    f"{BLOCKED_BY_ROBOTS} unavailable (HTTP {status})"
                    if status is not None
                    else f"{BLOCKED_BY_ROBOTS} unreachable"
                )
                self._end_waiting(host, SkipReason.ROBOTS)
            self._save_host(data)

    def _end_waiting(self, host: str, reason: SkipReason) -> None:
        counters = self._counters[host]
        count = self.db.execute(
            "UPDATE pages SET state = 'skipped', error_code = ? "
            "WHERE host = ? AND state = 'waiting'",
            (reason.value, host),
        ).rowcount
        counters.by_state[PageState.WAITING] -= count
        counters.by_state[PageState.SKIPPED] += count

    def hosts(self) -> list[HostData]:
        with self._lock:
            return [replace(host) for host in self._hosts.values()]

    def host(self, host: str) -> HostData | None:
        with self._lock:
            data = self._hosts.get(host)
            return replace(data) if data is not None else None

    # -- downloading -----------------------------------------------------
    def wait_for_work(self, timeout: float, kind: str = "") -> None:
        if kind == "parse":
            with self._parse_ready:
                self._parse_ready.wait(timeout)
        elif kind == "download":
            with self._download_ready:
                self._download_ready.wait(min(timeout, max(0.001, self._due_in)))
        else:
            super().wait_for_work(timeout, kind)

    def take_for_download(self) -> PageData | None:
        # Finding nothing is the common case for idle threads: only a lease opens a transaction.
        if self._pending_bytes > self.max_pending_bytes:
            return None  # the parsers are behind: let them catch up first
        with self._lock:
            now = self.clock()
            hosts = list(self._hosts.values())
            self._due_in = 1.0
            if not hosts:
                return None
            self._rotation = (self._rotation + 1) % len(hosts)
            for host in hosts[self._rotation :] + hosts[: self._rotation]:
                counters = self._counters[host.host]
                if (
                    host.robots_state is not RobotsState.READY
                    or counters.by_state[PageState.WAITING] <= 0
                    or host.in_flight >= host.max_downloads_at_time
                ):
                    continue
                due = max(host.next_fetch_at, host.retry_after_until)
                if due > now:
                    self._due_in = min(self._due_in, due - now)
                    continue
                row = self.db.execute(
                    f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = ? AND state = 'waiting' "
                    "ORDER BY level, id LIMIT 1",
                    (host.host,),
                ).fetchone()
                if row is None:
                    continue
                page = page_from_row(row)
                # Breadth-first barrier: a page two levels below one still in
                # progress would be fetched before links its parent's level
                # has not produced yet.
                busy_levels = [level for level, n in counters.levels.items() if n > 0]
                if busy_levels and page.level > min(busy_levels) + 1:
                    continue
                with self._transaction() as db:
                    db.execute("UPDATE pages SET state = 'running' WHERE id = ?", (page.id,))
                counters.move(PageState.WAITING, PageState.RUNNING)
                counters.levels[page.level] += 1
                host.in_flight += 1
                host.next_fetch_at = now + host.crawl_delay
                page.state = PageState.RUNNING
                return page
            return None

    def mark_request_sent(self, host: str) -> None:
        known = self._hosts.get(host)
        if known is not None and known.crawl_delay <= 0:
            return  # no delay to count from: skip the lock (a hint read, like take_robots)
        with self._lock:
            data = self._hosts.get(host)
            if data is not None:
                data.next_fetch_at = max(data.next_fetch_at, self.clock() + data.crawl_delay)

    def _release(self, page: PageData) -> None:
        """Give back a download lease (in-flight slot of the host)."""
        host = self._hosts[page.host]
        host.in_flight = max(0, host.in_flight - 1)
        self._wake_downloaders += 1  # a slot of the host is free again

    def _finish(
        self, page: PageData, counters: _HostCounters, state: PageState, error: str = ""
    ) -> None:
        """Count a page leaving the in-progress levels into a final state."""
        counters.move(page.state, state)
        counters.levels[page.level] -= 1
        if state is PageState.ERROR:
            counters.errors[error] += 1
        elif state is PageState.DONE:
            self._pages_done += 1

    def _load_page(self, page_id: PageId) -> PageData:
        row = self.db.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = ?", (page_id,)
        ).fetchone()
        if row is None:
            raise KeyError(page_id)
        return page_from_row(row)

    def store_download(self, page_id: PageId, result: DownloadResult, content_hash: str) -> None:
        with self._atomic() as db:
            now = self.clock()
            page = self._load_page(page_id)
            counters = self._counters[page.host]
            host = self._hosts[page.host]
            self._release(page)
            attempts = page.download_attempts + 1
            size = len(result.body)
            counters.bytes += size
            self._bytes += size
            if result.retry_after is not None:
                host.retry_after_until = max(host.retry_after_until, now + result.retry_after)
                self._save_host(host)
            if result.throttle and result.status is not None:
                delay = throttled_delay(host, result.elapsed, ok=result.status == 200)
                if delay != host.crawl_delay:
                    host.crawl_delay = delay
                    self._save_host(host)
            if (
                result.error
                or (result.status is not None and result.status >= 500)
                or (result.status == 429)
            ):
                error = result.error or f"http_{result.status}"
                retry = result.retryable or result.status in (429, 500, 502, 503, 504)
                if retry and attempts < self.max_download_attempts:
                    # Back off on the host: a failing server usually fails for every page.
                    if result.retry_after is None:
                        backoff = min(30.0, 0.5 * 2 ** (attempts - 1))
                        host.next_fetch_at = max(host.next_fetch_at, now + backoff)
                    db.execute(
                        "UPDATE pages SET state = 'waiting', download_attempts = ?, "
                        "error_code = ?, http_status = ? WHERE id = ?",
                        (attempts, error, result.status, page_id),
                    )
                    counters.move(PageState.RUNNING, PageState.WAITING)
                    counters.levels[page.level] -= 1
                else:
                    db.execute(
                        "UPDATE pages SET state = 'error', download_attempts = ?, "
                        "error_code = ?, http_status = ? WHERE id = ?",
                        (attempts, error, result.status, page_id),
                    )
                    self._finish(page, counters, PageState.ERROR, error)
                return
            status = result.status or 0
            if status != 200 or not is_html(result.content_type):
                state, error = (
                    (PageState.SKIPPED, SkipReason.NOT_HTML.value)
                    if 200 <= status < 300
                    else (PageState.ERROR, f"http_{status}")
                )
                db.execute(
                    "UPDATE pages SET state = ?, download_attempts = ?, http_status = ?, "
                    "content_type = ?, error_code = ?, bytes = ?, downloaded = 1 WHERE id = ?",
                    (state.value, attempts, status, result.content_type, error, size, page_id),
                )
                self._finish(page, counters, state, error)
                return
            first = db.execute(
                "SELECT id FROM pages WHERE host = ? AND content_hash = ? AND id != ? "
                "AND replace_id IS NULL LIMIT 1",
                (page.host, content_hash, page_id),
            ).fetchone()
            if first is not None:
                db.execute(
                    "UPDATE pages SET state = 'done', download_attempts = ?, http_status = 200, "
                    "content_type = ?, content_hash = ?, replace_id = ?, bytes = ?, "
                    "downloaded = 1, truncated = ?, error_code = '' WHERE id = ?",
                    (attempts, result.content_type, content_hash, first[0], size,
                     int(result.truncated), page_id),
                )  # fmt: skip
                counters.duplicates += 1
                self._finish(page, counters, PageState.DONE)
            else:
                db.execute(
                    "UPDATE pages SET state = 'downloaded', download_attempts = ?, "
                    "http_status = 200, content_type = ?, content_hash = ?, bytes = ?, "
                    "downloaded = 1, truncated = ?, error_code = '' WHERE id = ?",
                    (attempts, result.content_type, content_hash, size, int(result.truncated),
                     page_id),
                )  # fmt: skip
                counters.move(PageState.RUNNING, PageState.DOWNLOADED)
                page.state = PageState.DOWNLOADED
                page.http_status, page.content_type = 200, result.content_type
                page.content_hash, page.bytes = content_hash, size
                page.download_attempts, page.downloaded = attempts, True
                page.truncated, page.error_code = result.truncated, ""
                heapq.heappush(self._parse_queue, (page.level, page.id))
                self._downloaded[page.id] = (page, result.body)
                self._pending_bytes += size
                self._wake_parsers += 1

    def store_redirect(
        self, page_id: PageId, target_url: str, target_normalized: str, skip: SkipReason | None
    ) -> None:
        with self._atomic() as db:
            page = self._load_page(page_id)
            counters = self._counters[page.host]
            self._release(page)
            chain = [u for u in page.redirect_target.split("\n") if u] or [page.url]
            if skip is not None:
                db.execute(
                    "UPDATE pages SET state = 'skipped', error_code = ?, redirect_target = ? "
                    "WHERE id = ?",
                    (skip.value, "\n".join([*chain, target_url]), page_id),
                )
                self._finish(page, counters, PageState.SKIPPED)
            elif (
                target_url in chain
                or page.redirect_hops + 1 > self.max_redirects
                or self._redirects_back_to(target_normalized, page_id)
            ):
                code = SkipReason.REDIRECT_LOOP.value
                db.execute(
                    "UPDATE pages SET state = 'error', error_code = ?, redirect_target = ?, "
                    "redirect_hops = ? WHERE id = ?",
                    (code, "\n".join([*chain, target_url]), page.redirect_hops + 1, page_id),
                )
                self._finish(page, counters, PageState.ERROR, code)
            else:
                known = db.execute(
                    "SELECT page_id FROM urls WHERE normalized_url = ?", (target_normalized,)
                ).fetchone()
                if known is not None and known[0] != page_id:
                    # The target is a page of its own already: this URL is an alias of it.
                    db.execute(
                        "UPDATE pages SET state = 'done', replace_id = ?, error_code = 'redirect', "
                        "redirect_target = ? WHERE id = ?",
                        (known[0], "\n".join([*chain, target_url]), page_id),
                    )
                    self._finish(page, counters, PageState.DONE)
                    counters.aliases += 1
                    self._pages_done -= 1  # an alias is not a finished page of its own
                else:
                    if known is None:
                        db.execute(
                            "INSERT INTO urls (normalized_url, page_id) VALUES (?, ?)",
                            (target_normalized, page_id),
                        )
                    db.execute(
                        "UPDATE pages SET state = 'waiting', url = ?, normalized_url = ?, "
                        "redirect_target = ?, redirect_hops = ? WHERE id = ?",
                        (target_url, target_normalized, "\n".join([*chain, target_url]),
                         page.redirect_hops + 1, page_id),
                    )  # fmt: skip
                    counters.move(PageState.RUNNING, PageState.WAITING)
                    counters.levels[page.level] -= 1

    def _redirects_back_to(self, normalized_url: str, page_id: PageId) -> bool:
        """Whether ``normalized_url`` is a page that already stands for ``page_id``
        (a redirect alias of it, maybe through other aliases): A → B → A across two
        pages is a loop too, not two aliases of each other."""
        row = self.db.execute(
            "SELECT page_id FROM urls WHERE normalized_url = ?", (normalized_url,)
        ).fetchone()
        if row is None or row[0] == page_id:
            return False  # a new URL, or another spelling of this very page
        current = row[0]
        for _ in range(self.max_redirects + 1):
            found = self.db.execute("SELECT replace_id FROM pages WHERE id = ?", (current,))
            current = (found.fetchone() or (None,))[0]
            if current is None:
                return False
            if current == page_id:
                return True
        return False

    def skip_page(self, page_id: PageId, reason: SkipReason) -> None:
        with self._atomic() as db:
            page = self._load_page(page_id)
            counters = self._counters[page.host]
            if page.state is PageState.RUNNING:
                self._release(page)
            db.execute(
                "UPDATE pages SET state = 'skipped', error_code = ? WHERE id = ?",
                (reason.value, page_id),
            )
            self._finish(page, counters, PageState.SKIPPED)

    # -- parsing ---------------------------------------------------------
    def take_for_parsing(self) -> tuple[PageData, bytes] | None:
        if not self._parse_queue:
            return None  # a hint read without the lock; store_download wakes the parsers
        with self._lock:  # memory only: the body never went to disk
            if not self._parse_queue:
                return None
            _level, page_id = heapq.heappop(self._parse_queue)
            page, body = self._downloaded.pop(page_id)
            self._counters[page.host].move(PageState.DOWNLOADED, PageState.PARSING)
            page.state = PageState.PARSING
            self._parsing[page_id] = (page, len(body))
            return replace(page), body

    def store_parse(
        self, page_id: PageId, links: Sequence[FoundLink], skipped: Sequence[SkippedLink]
    ) -> None:
        with self._atomic() as db:
            page, size = self._parsing.pop(page_id)
            self._pending_bytes -= size
            counters = self._counters[page.host]
            unique: dict[str, FoundLink] = {}
            for link in links:
                unique.setdefault(link.normalized_url, link)
            known: dict[str, int] = {}
            keys = list(unique)
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                known.update(
                    db.execute(
                        "SELECT normalized_url, page_id FROM urls "
                        f"WHERE normalized_url IN ({marks})",
                        chunk,
                    ).fetchall()
                )
            new_rows: list[tuple[str, str, str, int | None, int, str]] = []
            not_queued: list[tuple[str, str, str, int]] = []
            for norm, link in unique.items():
                if norm in known:
                    continue
                if link.skip_if_new is not None:
                    not_queued.append((page.host, norm, link.skip_if_new.value, page_id))
                    continue
                if self.max_pages and counters.admitted + len(new_rows) >= self.max_pages:
                    not_queued.append((page.host, norm, SkipReason.BUDGET.value, page_id))
                    continue
                new_rows.append((page.host, link.url, norm, page_id, page.level + 1, page.url))
            new_ids = self._insert_pages(new_rows, counters) if new_rows else []
            targets = [known[n] for n in unique if n in known]
            targets.extend(new_ids)
            db.executemany(
                "INSERT OR IGNORE INTO arcs (from_id, to_id, host) VALUES (?, ?, ?)",
                [(page_id, target, page.host) for target in targets],
            )
            if any(row[2] == SkipReason.BUDGET.value for row in not_queued):
                counters.budget_hit = True
            db.executemany(
                "INSERT OR IGNORE INTO skipped (host, url, reason, found_on) VALUES (?, ?, ?, ?)",
                not_queued + [(page.host, s.url, s.reason.value, page_id) for s in skipped],
            )
            db.execute(
                "UPDATE pages SET state = 'done', parsed = 1, out_degree = ? WHERE id = ?",
                (len(targets), page_id),
            )
            self._finish(page, counters, PageState.DONE)

    # -- reading ---------------------------------------------------------
    def statistics(self) -> CrawlStats:
        with self._lock:
            stats = []
            for name, host in self._hosts.items():
                c = self._counters[name]
                stop_reason = host.stop_reason
                stats.append(
                    HostStats(
                        host=name,
                        waiting=c.by_state[PageState.WAITING],
                        running=c.by_state[PageState.RUNNING] + c.by_state[PageState.PARSING],
                        downloaded=c.by_state[PageState.DOWNLOADED],
                        parsing=c.by_state[PageState.PARSING],
                        done=c.by_state[PageState.DONE] - c.duplicates - c.aliases,
                        errors=c.by_state[PageState.ERROR],
                        skipped=c.by_state[PageState.SKIPPED],
                        duplicates=c.duplicates,
                        bytes=c.bytes,
                        crawl_delay=host.crawl_delay,
                        stop_reason=stop_reason,
                        robots_state=host.robots_state.value,
                        errors_by_kind=tuple(sorted((k, v) for k, v in c.errors.items() if v)),
                        started_at=host.started_at,
                        finished_at=host.finished_at,
                        budget_hit=c.budget_hit,
                    )
                )
            return CrawlStats(
                hosts=tuple(stats),
                pages_done=self._pages_done,
                downloading=sum(h.running - h.parsing for h in stats),
                parsing=sum(h.parsing for h in stats),
                bytes=self._bytes,
                taken_at=self.clock(),
            )

    def set_stop_reason(self, host: str, reason: str) -> None:
        with self._atomic():
            data = self._hosts.get(host)
            if data is None or (data.stop_reason and data.finished_at):
                return
            data.stop_reason = reason
            data.finished_at = self.clock()
            self._save_host(data)

    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(query, params).fetchall()
