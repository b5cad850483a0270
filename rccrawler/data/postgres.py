"""The PostgreSQL DataManager: one crawl shared by any number of processes (SPEC §9)."""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

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
    HostData,
    HostStats,
    PageData,
    PageId,
    PageState,
    RobotsState,
    SkipReason,
)

if TYPE_CHECKING:
    from rccrawler.records import DownloadResult, FoundLink, SkippedLink

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]
Cursor = psycopg.Cursor[Row]

_HOST_FIELDS = tuple(f.name for f in fields(HostData))
_HOST_COLUMNS = ", ".join(_HOST_FIELDS)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    scheme TEXT NOT NULL,
    base TEXT NOT NULL,
    crawl_delay DOUBLE PRECISION NOT NULL,
    min_crawl_delay DOUBLE PRECISION NOT NULL,
    max_downloads_at_time INTEGER NOT NULL,
    max_crawl_level INTEGER NOT NULL,
    robots_state TEXT NOT NULL,
    robots_status INTEGER,
    robots_text TEXT NOT NULL,
    next_fetch_at DOUBLE PRECISION NOT NULL,
    retry_after_until DOUBLE PRECISION NOT NULL,
    in_flight INTEGER NOT NULL,
    stop_reason TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION NOT NULL,
    admitted INTEGER NOT NULL DEFAULT 0,
    budget_hit BOOLEAN NOT NULL DEFAULT FALSE,
    robots_owner TEXT NOT NULL DEFAULT '',
    robots_lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS pages (
    id BIGINT PRIMARY KEY,
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    normalized_url TEXT NOT NULL,
    id_from BIGINT,
    level INTEGER NOT NULL,
    out_degree INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    downloaded BOOLEAN NOT NULL DEFAULT FALSE,
    parsed BOOLEAN NOT NULL DEFAULT FALSE,
    http_status INTEGER,
    content_type TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL DEFAULT '',
    error_code TEXT NOT NULL DEFAULT '',
    replace_id BIGINT,
    download_attempts INTEGER NOT NULL DEFAULT 0,
    redirect_target TEXT NOT NULL DEFAULT '',
    redirect_hops INTEGER NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL DEFAULT 0,
    truncated BOOLEAN NOT NULL DEFAULT FALSE,
    referer TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE SEQUENCE IF NOT EXISTS page_ids;
CREATE INDEX IF NOT EXISTS pages_queue ON pages (host, state, level, id);
CREATE INDEX IF NOT EXISTS pages_hash ON pages (host, content_hash);
CREATE INDEX IF NOT EXISTS pages_owner ON pages (owner) WHERE owner <> '';
CREATE TABLE IF NOT EXISTS urls (normalized_url TEXT PRIMARY KEY, page_id BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS arcs (
    from_id BIGINT NOT NULL, to_id BIGINT NOT NULL, host TEXT NOT NULL,
    PRIMARY KEY (from_id, to_id)
);
CREATE INDEX IF NOT EXISTS arcs_host ON arcs (host, from_id);
CREATE TABLE IF NOT EXISTS skipped (
    host TEXT NOT NULL, url TEXT NOT NULL, reason TEXT NOT NULL, found_on BIGINT,
    PRIMARY KEY (host, url)
);
"""

_LEASED = "('running', 'downloaded', 'parsing')"
"""Page states held by one worker (a body waiting for a parser lives in its memory)."""


def schema_for(name: str) -> str:
    """The PostgreSQL schema that holds the crawl named ``name`` (its state_dir)."""
    return "rc_" + hashlib.sha1(name.encode()).hexdigest()[:16]


def _host(row: Row) -> HostData:
    raw = dict(zip(_HOST_FIELDS, row, strict=True))
    raw["robots_state"] = RobotsState(raw["robots_state"])
    return HostData(**raw)


class PostgresDataManager(PagedReads, DataManager):
    """A DataManager in a PostgreSQL schema, shared by every worker process of a crawl.

    One connection guarded by one lock (the threads of a process share it), one
    transaction per method. Pages are leased with ``FOR UPDATE SKIP LOCKED`` and
    carry their worker's ``owner`` token and a ``lease_until`` time (database
    clock), renewed while the worker lives; an expired lease puts the page back
    in the queue. Politeness lives in the host row (``next_fetch_at``,
    ``in_flight``), changed only under its row lock. A downloaded body waits in
    the memory of the process that fetched it, which parses it itself.

    Args:
        url: the ``postgresql://`` URL.
        schema: the schema of this crawl (see :func:`schema_for`).
        max_pages: per-site budget of pages (0 = none).
        max_download_attempts: attempts before a retryable error is final.
        max_redirects: hops before a redirect chain is an error.
        max_pending_bytes: downloaded bodies waiting for a parser, at most.
        lease_s: seconds a lease lasts without renewal (default :attr:`lease_s`).
        clock: wall-clock source for the start and end times of sites.
    """

    lease_s: float = 30.0
    """How long a dead worker's pages stay leased; live workers renew every third of it."""
    stats_max_age: ClassVar[float] = 0.25
    """Seconds a statistics() snapshot is reused: the aggregate runs at most this often."""
    stop_poll_s: ClassVar[float] = 1.0
    """Seconds between two looks for a stop request (``rccrawler stop``)."""

    def __init__(
        self,
        url: str,
        schema: str,
        *,
        max_pages: int = 0,
        max_download_attempts: int = 3,
        max_redirects: int = 10,
        max_pending_bytes: int = 8 * 1024 * 1024,
        lease_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.schema = schema
        self.max_pages = max_pages
        self.max_download_attempts = max_download_attempts
        self.max_redirects = max_redirects
        self.max_pending_bytes = max_pending_bytes
        if lease_s is not None:
            self.lease_s = lease_s
        self.clock = clock
        self.owner = uuid.uuid4().hex
        """This process's lease token."""
        self._lock = threading.Lock()
        self._download_ready = threading.Condition(self._lock)
        self._parse_ready = threading.Condition(self._lock)
        self._wake_downloaders = 0
        self._wake_parsers = 0
        self._conn: psycopg.Connection[Row] | None = None
        self._parse_queue: list[tuple[int, PageId]] = []
        self._downloaded: dict[PageId, tuple[PageData, bytes]] = {}
        self._parsing: dict[PageId, tuple[PageData, int]] = {}
        self._pending_bytes = 0
        self._stats: CrawlStats | None = None
        self._stats_at = 0.0
        self._opened_at = 0.0
        """Database clock when this process opened the state: later stop requests are for it."""
        self._stop_checked_at = -1e9
        self._stop_seen = False
        self._robots_pending = 1
        self._next_try = 0.0
        """time.monotonic() before which take_for_download need not ask the database."""
        self._renewed_at = time.monotonic()
        self._rotation = 0
        self._delays: dict[str, float] = {}
        self._page_hosts: dict[PageId, str] = {}
        """Host of each page this process leased for download (saves a look-up)."""
        """Crawl delay of each host as the last lease here saw it."""

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        try:
            conn = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StateError(f"cannot connect to the crawl state {self.url}: {exc}") from exc
        try:
            with conn.transaction(), conn.cursor() as cur:
                # Workers start together: one of them creates the schema.
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(self.schema)))  # fmt: skip
                cur.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
                cur.execute(_SCHEMA.encode())
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        except psycopg.Error as exc:
            conn.close()
            raise StateError(f"cannot create the crawl state in {self.url}: {exc}") from exc
        self._conn = conn
        with self._transaction() as cur:
            self._opened_at = self._now(cur)

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            # Give back what this process still holds, so nobody waits for its lease.
            with contextlib.suppress(psycopg.Error), self._transaction() as cur:
                self._reclaim(cur, "owner = %s", (self.owner,))
                cur.execute(
                    "UPDATE hosts SET robots_state = 'pending', robots_owner = '' "
                    "WHERE robots_state = 'fetching' AND robots_owner = %s",
                    (self.owner,),
                )
            self._conn.close()
            self._conn = None

    def request_stop(self) -> None:
        with self._atomic() as cur:
            cur.execute(
                "INSERT INTO meta VALUES ('stop_requested', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (repr(self._now(cur)),),
            )

    def stop_requested(self) -> bool:
        # Workers started after the request carry on: it was meant for those running then.
        now = time.monotonic()
        if now - self._stop_checked_at < self.stop_poll_s:
            return self._stop_seen
        self._stop_checked_at = now
        with self._atomic() as cur:
            cur.execute("SELECT value FROM meta WHERE key = 'stop_requested'")
            row = cur.fetchone()
        self._stop_seen = row is not None and float(row[0]) >= self._opened_at
        return self._stop_seen

    @classmethod
    def exists(cls, url: str, schema: str) -> bool:
        """Whether a crawl's schema is there (``rccrawler status`` creates nothing)."""
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
                ).fetchone()
        except psycopg.Error as exc:
            raise StateError(f"cannot connect to the crawl state {url}: {exc}") from exc
        return row is not None

    @classmethod
    def drop(cls, url: str, schema: str) -> None:
        """Remove a crawl's schema and everything in it (``--fresh``)."""
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
        except psycopg.Error as exc:
            raise StateError(f"cannot drop the crawl state in {url}: {exc}") from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        """One committed transaction; the caller holds the lock."""
        if self._conn is None:
            raise StateError("the DataManager is not open")
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                yield cur
        except psycopg.OperationalError as exc:
            raise StateError(f"cannot write the crawl state {self.url}: {exc}") from exc
        if self._wake_downloaders:
            self._next_try = 0.0
            self._download_ready.notify(self._wake_downloaders)
            self._wake_downloaders = 0
        if self._wake_parsers:
            self._parse_ready.notify(self._wake_parsers)
            self._wake_parsers = 0

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[Cursor]:
        with self._lock, self._transaction() as cur:
            yield cur

    @staticmethod
    def _now(cur: Cursor) -> float:
        """The database clock: every worker, on every machine, schedules by it."""
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        row = cur.fetchone()
        assert row is not None
        return float(row[0])

    def check_identity(self, manager: str, storage: str) -> None:
        with self._atomic() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
            cur.execute("SELECT key, value FROM meta")
            meta = dict(cur.fetchall())
            if not meta:
                cur.executemany(
                    "INSERT INTO meta VALUES (%s, %s)",
                    [("schema_version", str(SCHEMA_VERSION)), ("manager", manager),
                     ("storage", storage), ("created", str(self.clock()))],
                )  # fmt: skip
                return
        check_state_identity(meta, manager, storage, f"schema {self.schema} of {self.url}")

    def recover(self) -> int:
        """Queue again the pages whose lease expired (their worker died).

        Pages leased by live workers are theirs: unlike SQLite, a starting worker
        does not take back everything in progress.
        """
        with self._atomic() as cur:
            return self._reclaim_expired(cur)

    def _reclaim_expired(self, cur: Cursor) -> int:
        """Queue again the robots.txt fetches and pages whose lease ran out."""
        now = self._now(cur)
        cur.execute(
            "UPDATE hosts SET robots_state = 'pending', robots_owner = '' "
            "WHERE robots_state = 'fetching' AND robots_lease_until < %s",
            (now,),
        )
        if cur.rowcount:
            self._robots_pending = 1
        return self._reclaim(cur, "lease_until < %s", (now,))

    def _reclaim(self, cur: Cursor, where: str, args: tuple[Any, ...]) -> int:
        """Put leased pages matching ``where`` back in the queue, host row locked first."""
        cur.execute(f"SELECT DISTINCT host FROM pages WHERE state IN {_LEASED} AND {where}", args)
        moved = 0
        for (host,) in sorted(cur.fetchall()):
            cur.execute("SELECT 1 FROM hosts WHERE host = %s FOR UPDATE", (host,))
            cur.execute(
                "UPDATE pages p SET state = 'waiting', owner = '', lease_until = 0 "
                f"FROM pages old WHERE p.id = old.id AND p.host = %s AND p.state IN {_LEASED} "
                f"AND {where.replace('owner', 'p.owner').replace('lease_until', 'p.lease_until')} "
                "RETURNING old.state",
                (host, *args),
            )
            states = [row[0] for row in cur.fetchall()]
            running = sum(1 for s in states if s == PageState.RUNNING)
            if running:
                cur.execute(
                    "UPDATE hosts SET in_flight = greatest(0, in_flight - %s) WHERE host = %s",
                    (running, host),
                )
            moved += len(states)
        if moved:
            self._wake_downloaders = 1 << 16
        return moved

    def _heartbeat(self) -> None:
        """Renew this worker's leases and reclaim dead workers' ones (lock held)."""
        if time.monotonic() - self._renewed_at < self.lease_s / 3:
            return
        self._renewed_at = time.monotonic()
        with self._transaction() as cur:
            now = self._now(cur)
            cur.execute(
                f"UPDATE pages SET lease_until = %s WHERE owner = %s AND state IN {_LEASED}",
                (now + self.lease_s, self.owner),
            )
            cur.execute(
                "UPDATE hosts SET robots_lease_until = %s "
                "WHERE robots_state = 'fetching' AND robots_owner = %s",
                (now + self.lease_s, self.owner),
            )
        with self._transaction() as cur:
            moved = self._reclaim_expired(cur)
        if moved:
            logger.warning("%d pages of a worker that stopped answering were queued again", moved)

    # -- sites and robots ------------------------------------------------
    def _lock_host(self, cur: Cursor, host: str) -> HostData:
        cur.execute(f"SELECT {_HOST_COLUMNS} FROM hosts WHERE host = %s FOR UPDATE", (host,))
        row = cur.fetchone()
        if row is None:
            raise KeyError(host)
        return _host(row)

    @staticmethod
    def _save_host(cur: Cursor, host: HostData) -> None:
        sets = ", ".join(f"{name} = %s" for name in _HOST_FIELDS[1:])
        values = [getattr(host, name) for name in _HOST_FIELDS[1:]]
        values[_HOST_FIELDS.index("robots_state") - 1] = host.robots_state.value
        cur.execute(f"UPDATE hosts SET {sets} WHERE host = %s", (*values, host.host))

    def add_site(self, host: HostData, start_url: str, normalized_url: str) -> bool:
        with self._atomic() as cur:
            self._stats = None
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema + ":sites",))
            cur.execute("SELECT 1 FROM hosts WHERE host = %s", (host.host,))
            if cur.fetchone() is not None:
                known = self._lock_host(cur, host.host)
                known.crawl_delay = max(host.crawl_delay, known.crawl_delay)
                known.min_crawl_delay = max(host.crawl_delay, known.min_crawl_delay)
                known.max_downloads_at_time = host.max_downloads_at_time
                known.max_crawl_level = host.max_crawl_level
                self._save_host(cur, known)
                cur.execute("SELECT 1 FROM urls WHERE normalized_url = %s", (normalized_url,))
                if cur.fetchone() is not None:
                    return False
                self._insert_pages(cur, [(host.host, start_url, normalized_url, None, 0, "")])
                if known.stop_reason.startswith(BLOCKED_BY_ROBOTS):
                    self._end_waiting(cur, host.host, SkipReason.ROBOTS)
                elif known.stop_reason:
                    known.stop_reason, known.finished_at = "", 0.0
                    self._save_host(cur, known)
                return True
            host = replace(
                host,
                started_at=self.clock(),
                min_crawl_delay=max(host.min_crawl_delay, host.crawl_delay),
                in_flight=0,
            )
            marks = ", ".join(["%s"] * len(_HOST_FIELDS))
            values = [getattr(host, name) for name in _HOST_FIELDS]
            values[_HOST_FIELDS.index("robots_state")] = host.robots_state.value
            cur.execute(f"INSERT INTO hosts ({_HOST_COLUMNS}) VALUES ({marks})", values)
            self._insert_pages(cur, [(host.host, start_url, normalized_url, None, 0, "")])
            self._robots_pending = 1
            return True

    def _insert_pages(
        self, cur: Cursor, rows: Sequence[tuple[str, str, str, int | None, int, str]]
    ) -> list[int]:
        """Insert WAITING pages (host, url, normalized, id_from, level, referer); returns ids.

        The caller holds the host row lock, so no other worker adds the same URLs.
        """
        cur.execute("SELECT nextval('page_ids') FROM generate_series(1, %s)", (len(rows),))
        ids = sorted(int(r[0]) for r in cur.fetchall())
        cur.executemany(
            "INSERT INTO pages (id, host, url, normalized_url, id_from, level, state, referer) "
            "VALUES (%s, %s, %s, %s, %s, %s, 'waiting', %s)",
            [(pid, *row) for pid, row in zip(ids, rows, strict=True)],
        )
        cur.executemany(
            "INSERT INTO urls (normalized_url, page_id) VALUES (%s, %s)",
            [(row[2], pid) for pid, row in zip(ids, rows, strict=True)],
        )
        cur.execute(
            "UPDATE hosts SET admitted = admitted + %s WHERE host = %s", (len(rows), rows[0][0])
        )
        self._wake_downloaders += len(rows)
        return ids

    def take_robots(self) -> HostData | None:
        if not self._robots_pending:
            return None  # a hint, refreshed with the statistics snapshot
        with self._atomic() as cur:
            now = self._now(cur)
            cur.execute(
                "UPDATE hosts SET robots_state = 'fetching', robots_owner = %s, "
                "robots_lease_until = %s, next_fetch_at = %s + crawl_delay "
                "WHERE host = (SELECT host FROM hosts WHERE robots_state = 'pending' "
                "AND next_fetch_at <= %s LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING {_HOST_COLUMNS}",
                (self.owner, now + self.lease_s, now, now),
            )
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT count(*) FROM hosts WHERE robots_state = 'pending'")
                self._robots_pending = int((cur.fetchone() or (0,))[0])
                return None
            return _host(row)

    def store_robots(
        self, host: str, status: int | None, text: str, crawl_delay: float | None, *, blocked: bool
    ) -> None:
        with self._atomic() as cur:
            now = self._now(cur)
            data = self._lock_host(cur, host)
            data.robots_state = RobotsState.READY
            data.robots_status = status
            data.robots_text = text
            if crawl_delay is not None and crawl_delay > data.min_crawl_delay:
                data.min_crawl_delay = crawl_delay
                data.crawl_delay = max(data.crawl_delay, crawl_delay)
            data.next_fetch_at = max(data.next_fetch_at, now + data.crawl_delay)
            self._wake_downloaders = 1 << 16
            if blocked:
                data.stop_reason = (
                    f"{BLOCKED_BY_ROBOTS} unavailable (HTTP {status})"
                    if status is not None
                    else f"{BLOCKED_BY_ROBOTS} unreachable"
                )
                self._end_waiting(cur, host, SkipReason.ROBOTS)
            self._save_host(cur, data)
            cur.execute("UPDATE hosts SET robots_owner = '' WHERE host = %s", (host,))

    @staticmethod
    def _end_waiting(cur: Cursor, host: str, reason: SkipReason) -> None:
        cur.execute(
            "UPDATE pages SET state = 'skipped', error_code = %s "
            "WHERE host = %s AND state = 'waiting'",
            (reason.value, host),
        )

    def hosts(self) -> list[HostData]:
        with self._atomic() as cur:
            cur.execute(f"SELECT {_HOST_COLUMNS} FROM hosts ORDER BY host")
            return [_host(row) for row in cur.fetchall()]

    def host(self, host: str) -> HostData | None:
        with self._atomic() as cur:
            cur.execute(f"SELECT {_HOST_COLUMNS} FROM hosts WHERE host = %s", (host,))
            row = cur.fetchone()
            return _host(row) if row is not None else None

    # -- downloading -----------------------------------------------------
    def wait_for_work(self, timeout: float, kind: str = "") -> None:
        if kind == "parse":
            with self._parse_ready:
                self._parse_ready.wait(timeout)
        elif kind == "download":
            with self._download_ready:
                due = self._next_try - time.monotonic()
                self._download_ready.wait(min(timeout, max(0.001, due)))
        else:
            super().wait_for_work(timeout, kind)

    def take_for_download(self) -> PageData | None:
        if self._pending_bytes > self.max_pending_bytes:
            return None  # the parsers of this process are behind
        if time.monotonic() < self._next_try:
            return None  # the last look found nothing due before then
        with self._atomic() as cur:
            # Candidates without locks; each is locked (or skipped) and re-checked below.
            cur.execute(
                "SELECT host, greatest(next_fetch_at, retry_after_until), "
                "in_flight < max_downloads_at_time, extract(epoch FROM clock_timestamp())::float8 "
                "FROM hosts h WHERE robots_state = 'ready' "
                "AND EXISTS (SELECT 1 FROM pages p WHERE p.host = h.host AND p.state = 'waiting') "
                "ORDER BY host"
            )
            candidates = cur.fetchall()
            now = candidates[0][3] if candidates else 0.0
            due_in = 0.5
            ready: list[str] = []
            for name, due, free, _now in candidates:
                if not free:
                    due_in = min(due_in, 0.01)  # a slot frees when another worker stores
                elif due > now:
                    due_in = min(due_in, due - now)
                else:
                    ready.append(name)
            if ready:
                self._rotation = (self._rotation + 1) % len(ready)
                ready = ready[self._rotation :] + ready[: self._rotation]
            for name in ready:
                page = self._lease_from(cur, name, now)
                if page is not None:
                    self._next_try = 0.0
                    return page
                due_in = min(due_in, 0.01)
            self._next_try = time.monotonic() + due_in
            return None

    def _lease_from(self, cur: Cursor, host: str, now: float) -> PageData | None:
        cur.execute(
            f"SELECT {_HOST_COLUMNS} FROM hosts WHERE host = %s AND robots_state = 'ready' "
            "AND in_flight < max_downloads_at_time "
            "AND greatest(next_fetch_at, retry_after_until) <= %s FOR UPDATE SKIP LOCKED",
            (host, now),
        )
        row = cur.fetchone()
        if row is None:
            return None  # another worker holds the host, or it is not due any more
        data = _host(row)
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = %s AND state = 'waiting' "
            "ORDER BY level, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            (host,),
        )
        found = cur.fetchone()
        if found is None:
            return None
        page = page_from_row(found)
        # Breadth-first barrier, across every worker: no page two levels below one
        # still in progress anywhere.
        cur.execute(f"SELECT min(level) FROM pages WHERE host = %s AND state IN {_LEASED}", (host,))
        busy = (cur.fetchone() or (None,))[0]
        if busy is not None and page.level > busy + 1:
            return None
        cur.execute(
            "UPDATE pages SET state = 'running', owner = %s, lease_until = %s WHERE id = %s",
            (self.owner, now + self.lease_s, page.id),
        )
        cur.execute(
            "UPDATE hosts SET in_flight = in_flight + 1, next_fetch_at = %s WHERE host = %s",
            (now + data.crawl_delay, host),
        )
        page.state = PageState.RUNNING
        self._delays[host] = data.crawl_delay
        self._page_hosts[page.id] = host
        return page

    def mark_request_sent(self, host: str) -> None:
        if self._delays.get(host) == 0:
            return  # no delay to count from (as of this process's last lease on the host)
        with self._atomic() as cur:
            cur.execute(
                "UPDATE hosts SET next_fetch_at = greatest(next_fetch_at, "
                "extract(epoch FROM clock_timestamp()) + crawl_delay) "
                "WHERE host = %s AND crawl_delay > 0",
                (host,),
            )

    def _claim(
        self, cur: Cursor, page_id: PageId, *states: str, host_name: str | None = None
    ) -> tuple[PageData, HostData, int, float]:
        """Lock the page's host row, then the page, which must still be this worker's.

        Returns:
            The page, its host, the host's admitted pages and the database time.
        """
        host_name = host_name or self._page_hosts.pop(page_id, None)
        if host_name is None:
            cur.execute("SELECT host FROM pages WHERE id = %s", (page_id,))
            row = cur.fetchone()
            if row is None:
                raise KeyError(page_id)
            host_name = row[0]
        cur.execute(
            f"SELECT {_HOST_COLUMNS}, admitted, extract(epoch FROM clock_timestamp())::float8 "
            "FROM hosts WHERE host = %s FOR UPDATE",
            (host_name,),
        )
        locked = cur.fetchone()
        if locked is None:
            raise KeyError(host_name)
        host, admitted, now = _host(locked[:-2]), int(locked[-2]), float(locked[-1])
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = %s AND owner = %s "
            "AND state = ANY(%s) FOR UPDATE",
            (page_id, self.owner, list(states)),
        )
        found = cur.fetchone()
        if found is None:
            raise _LeaseLost(page_id)
        return page_from_row(found), host, admitted, now

    def _release(self, cur: Cursor, host: HostData) -> None:
        """Give back a download lease (an in-flight slot of the host)."""
        cur.execute(
            "UPDATE hosts SET in_flight = greatest(0, in_flight - 1) WHERE host = %s",
            (host.host,),
        )
        self._wake_downloaders += 1

    def store_download(self, page_id: PageId, result: DownloadResult, content_hash: str) -> None:
        with self._lock, contextlib.suppress(_LeaseLost), self._transaction() as cur:
            page, host, _admitted, now = self._claim(cur, page_id, PageState.RUNNING)
            self._release(cur, host)
            attempts = page.download_attempts + 1
            size = len(result.body)
            changed = False
            if result.retry_after is not None:
                host.retry_after_until = max(host.retry_after_until, now + result.retry_after)
                changed = True
            if result.throttle and result.status is not None:
                delay = throttled_delay(host, result.elapsed, ok=result.status == 200)
                if delay != host.crawl_delay:
                    host.crawl_delay = delay
                    changed = True
            if (
                result.error
                or (result.status is not None and result.status >= 500)
                or (result.status == 429)
            ):
                error = result.error or f"http_{result.status}"
                retry = result.retryable or result.status in (429, 500, 502, 503, 504)
                if retry and attempts < self.max_download_attempts:
                    if result.retry_after is None:
                        backoff = min(30.0, 0.5 * 2 ** (attempts - 1))
                        host.next_fetch_at = max(host.next_fetch_at, now + backoff)
                        changed = True
                    cur.execute(
                        "UPDATE pages SET state = 'waiting', owner = '', download_attempts = %s, "
                        "error_code = %s, http_status = %s WHERE id = %s",
                        (attempts, error, result.status, page_id),
                    )
                else:
                    self._end(cur, page_id, PageState.ERROR, error, attempts, result.status)
                if changed:
                    self._save_host_politeness(cur, host)
                return
            if changed:
                self._save_host_politeness(cur, host)
            status = result.status or 0
            if status != 200 or not is_html(result.content_type):
                state, error = (
                    (PageState.SKIPPED, SkipReason.NOT_HTML.value)
                    if 200 <= status < 300
                    else (PageState.ERROR, f"http_{status}")
                )
                cur.execute(
                    "UPDATE pages SET state = %s, owner = '', download_attempts = %s, "
                    "http_status = %s, content_type = %s, error_code = %s, bytes = %s, "
                    "downloaded = TRUE WHERE id = %s",
                    (state.value, attempts, status, result.content_type, error, size, page_id),
                )
                return
            cur.execute(
                "SELECT id FROM pages WHERE host = %s AND content_hash = %s AND id <> %s "
                "AND replace_id IS NULL ORDER BY id LIMIT 1",
                (page.host, content_hash, page_id),
            )
            first = cur.fetchone()
            if first is not None:
                cur.execute(
                    "UPDATE pages SET state = 'done', owner = '', download_attempts = %s, "
                    "http_status = 200, content_type = %s, content_hash = %s, replace_id = %s, "
                    "bytes = %s, downloaded = TRUE, truncated = %s, error_code = '' WHERE id = %s",
                    (attempts, result.content_type, content_hash, first[0], size,
                     result.truncated, page_id),
                )  # fmt: skip
                return
            cur.execute(
                "UPDATE pages SET state = 'downloaded', lease_until = %s, download_attempts = %s, "
                "http_status = 200, content_type = %s, content_hash = %s, bytes = %s, "
                "downloaded = TRUE, truncated = %s, error_code = '' WHERE id = %s",
                (now + self.lease_s, attempts, result.content_type, content_hash, size,
                 result.truncated, page_id),
            )  # fmt: skip
            page.state = PageState.DOWNLOADED
            page.http_status, page.content_type = 200, result.content_type
            page.content_hash, page.bytes = content_hash, size
            page.download_attempts, page.downloaded = attempts, True
            page.truncated, page.error_code = result.truncated, ""
            heapq.heappush(self._parse_queue, (page.level, page.id))
            self._downloaded[page.id] = (page, result.body)
            self._pending_bytes += size
            self._wake_parsers += 1

    @staticmethod
    def _save_host_politeness(cur: Cursor, host: HostData) -> None:
        cur.execute(
            "UPDATE hosts SET crawl_delay = %s, retry_after_until = %s, "
            "next_fetch_at = greatest(next_fetch_at, %s) WHERE host = %s",
            (host.crawl_delay, host.retry_after_until, host.next_fetch_at, host.host),
        )

    @staticmethod
    def _end(
        cur: Cursor, page_id: PageId, state: PageState, error: str, attempts: int,
        status: int | None,
    ) -> None:  # fmt: skip
        cur.execute(
            "UPDATE pages SET state = %s, owner = '', download_attempts = %s, error_code = %s, "
            "http_status = %s WHERE id = %s",
            (state.value, attempts, error, status, page_id),
        )

    def store_redirect(
        self, page_id: PageId, target_url: str, target_normalized: str, skip: SkipReason | None
    ) -> None:
        with self._lock, contextlib.suppress(_LeaseLost), self._transaction() as cur:
            page, host, _admitted, _now = self._claim(cur, page_id, PageState.RUNNING)
            self._release(cur, host)
            chain = "\n".join([*([u for u in page.redirect_target.split("\n") if u]
                                 or [page.url]), target_url])  # fmt: skip
            if skip is not None:
                cur.execute(
                    "UPDATE pages SET state = 'skipped', owner = '', error_code = %s, "
                    "redirect_target = %s WHERE id = %s",
                    (skip.value, chain, page_id),
                )
                return
            if (
                target_url in chain.split("\n")[:-1]
                or page.redirect_hops + 1 > self.max_redirects
                or self._redirects_back_to(cur, target_normalized, page_id)
            ):
                cur.execute(
                    "UPDATE pages SET state = 'error', owner = '', error_code = %s, "
                    "redirect_target = %s, redirect_hops = %s WHERE id = %s",
                    (SkipReason.REDIRECT_LOOP.value, chain, page.redirect_hops + 1, page_id),
                )
                return
            cur.execute("SELECT page_id FROM urls WHERE normalized_url = %s", (target_normalized,))
            known = cur.fetchone()
            if known is not None and known[0] != page_id:
                # The target is a page of its own already: this URL is an alias of it.
                cur.execute(
                    "UPDATE pages SET state = 'done', owner = '', replace_id = %s, "
                    "error_code = 'redirect', redirect_target = %s WHERE id = %s",
                    (known[0], chain, page_id),
                )
                return
            if known is None:
                cur.execute(
                    "INSERT INTO urls (normalized_url, page_id) VALUES (%s, %s)",
                    (target_normalized, page_id),
                )
            cur.execute(
                "UPDATE pages SET state = 'waiting', owner = '', url = %s, normalized_url = %s, "
                "redirect_target = %s, redirect_hops = %s WHERE id = %s",
                (target_url, target_normalized, chain, page.redirect_hops + 1, page_id),
            )

    def _redirects_back_to(self, cur: Cursor, normalized_url: str, page_id: PageId) -> bool:
        """Whether ``normalized_url`` is a page that already stands for ``page_id``."""
        cur.execute("SELECT page_id FROM urls WHERE normalized_url = %s", (normalized_url,))
        row = cur.fetchone()
        if row is None or row[0] == page_id:
            return False
        current = row[0]
        for _ in range(self.max_redirects + 1):
            cur.execute("SELECT replace_id FROM pages WHERE id = %s", (current,))
            current = (cur.fetchone() or (None,))[0]
            if current is None:
                return False
            if current == page_id:
                return True
        return False

    def skip_page(self, page_id: PageId, reason: SkipReason) -> None:
        with self._lock, contextlib.suppress(_LeaseLost), self._transaction() as cur:
            page, host, _admitted, _now = self._claim(cur, page_id, *_LEASED_STATES)
            if page.state is PageState.RUNNING:
                self._release(cur, host)
            cur.execute(
                "UPDATE pages SET state = 'skipped', owner = '', error_code = %s WHERE id = %s",
                (reason.value, page_id),
            )

    # -- parsing ---------------------------------------------------------
    def take_for_parsing(self) -> tuple[PageData, bytes] | None:
        if not self._parse_queue:
            return None
        with self._lock:  # memory only: this process downloaded the body, it parses it
            if not self._parse_queue:
                return None
            _level, page_id = heapq.heappop(self._parse_queue)
            page, body = self._downloaded.pop(page_id)
            page.state = PageState.PARSING
            self._parsing[page_id] = (page, len(body))
            return replace(page), body

    def store_parse(
        self, page_id: PageId, links: Sequence[FoundLink], skipped: Sequence[SkippedLink]
    ) -> None:
        with self._lock:
            page, size = self._parsing.pop(page_id)
            self._pending_bytes -= size
            with contextlib.suppress(_LeaseLost), self._transaction() as cur:
                self._store_parse(cur, page, links, skipped)

    def _store_parse(
        self,
        cur: Cursor,
        page: PageData,
        links: Sequence[FoundLink],
        skipped: Sequence[SkippedLink],
    ) -> None:
        _page, _host_data, admitted, _now = self._claim(
            cur, page.id, PageState.DOWNLOADED, host_name=page.host
        )
        unique: dict[str, FoundLink] = {}
        for link in links:
            unique.setdefault(link.normalized_url, link)
        cur.execute(
            "SELECT normalized_url, page_id FROM urls WHERE normalized_url = ANY(%s)",
            (list(unique),),
        )
        known: dict[str, int] = dict(cur.fetchall())
        new_rows: list[tuple[str, str, str, int | None, int, str]] = []
        not_queued: list[tuple[str, str, str, int]] = []
        for norm, link in unique.items():
            if norm in known:
                continue
            if link.skip_if_new is not None:
                not_queued.append((page.host, norm, link.skip_if_new.value, page.id))
                continue
            if self.max_pages and admitted + len(new_rows) >= self.max_pages:
                not_queued.append((page.host, norm, SkipReason.BUDGET.value, page.id))
                continue
            new_rows.append((page.host, link.url, norm, page.id, page.level + 1, page.url))
        new_ids = self._insert_pages(cur, new_rows) if new_rows else []
        targets = [known[n] for n in unique if n in known]
        targets.extend(new_ids)
        cur.executemany(
            "INSERT INTO arcs (from_id, to_id, host) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            [(page.id, target, page.host) for target in targets],
        )
        if any(row[2] == SkipReason.BUDGET.value for row in not_queued):
            cur.execute("UPDATE hosts SET budget_hit = TRUE WHERE host = %s", (page.host,))
        cur.executemany(
            "INSERT INTO skipped (host, url, reason, found_on) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            not_queued + [(page.host, s.url, s.reason.value, page.id) for s in skipped],
        )
        cur.execute(
            "UPDATE pages SET state = 'done', owner = '', parsed = TRUE, out_degree = %s "
            "WHERE id = %s",
            (len(targets), page.id),
        )

    # -- reading ---------------------------------------------------------
    def statistics(self) -> CrawlStats:
        with self._lock:
            self._heartbeat()
            if self._stats is not None and time.monotonic() - self._stats_at < self.stats_max_age:
                return self._stats
            with self._transaction() as cur:
                # One snapshot for both queries: the finisher must not see a page
                # leave the queue without seeing where it went.
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute(
                    f"SELECT {_HOST_COLUMNS}, budget_hit FROM hosts ORDER BY started_at, host"
                )
                host_rows = cur.fetchall()
                cur.execute(
                    "SELECT host, state, CASE WHEN state = 'error' THEN error_code ELSE '' END, "
                    "count(*), coalesce(sum(bytes), 0), "
                    "count(*) FILTER (WHERE replace_id IS NOT NULL AND error_code = ''), "
                    "count(*) FILTER (WHERE error_code = 'redirect') "
                    "FROM pages GROUP BY 1, 2, 3"
                )
                page_rows = cur.fetchall()
            by_state: dict[str, Counter[str]] = {}
            errors: dict[str, Counter[str]] = {}
            size: Counter[str] = Counter()
            dups: Counter[str] = Counter()
            aliases: Counter[str] = Counter()
            for host, state, error, count, nbytes, ndup, nalias in page_rows:
                by_state.setdefault(host, Counter())[state] += count
                if state == PageState.ERROR:
                    errors.setdefault(host, Counter())[error] += count
                size[host] += int(nbytes)
                dups[host] += ndup
                aliases[host] += nalias
            parsing_here: Counter[str] = Counter(p.host for p, _ in self._parsing.values())
            stats = []
            pending = 0
            for row in host_rows:
                data, budget_hit = _host(row[:-1]), bool(row[-1])
                name = data.host
                if data.robots_state is RobotsState.PENDING:
                    pending += 1
                c = by_state.get(name, Counter())
                parsing = parsing_here[name]
                stats.append(
                    HostStats(
                        host=name,
                        waiting=c[PageState.WAITING],
                        running=c[PageState.RUNNING] + parsing,
                        downloaded=max(0, c[PageState.DOWNLOADED] - parsing),
                        parsing=parsing,
                        done=c[PageState.DONE] - dups[name] - aliases[name],
                        errors=c[PageState.ERROR],
                        skipped=c[PageState.SKIPPED],
                        duplicates=dups[name],
                        bytes=size[name],
                        crawl_delay=data.crawl_delay,
                        stop_reason=data.stop_reason,
                        robots_state=data.robots_state.value,
                        errors_by_kind=tuple(
                            sorted((k, v) for k, v in errors.get(name, Counter()).items() if v)
                        ),
                        started_at=data.started_at,
                        finished_at=data.finished_at,
                        budget_hit=budget_hit,
                    )
                )
            self._robots_pending = pending
            self._stats = CrawlStats(
                hosts=tuple(stats),
                pages_done=sum(c[PageState.DONE] for c in by_state.values())
                - sum(aliases.values()),
                downloading=sum(h.running - h.parsing for h in stats),
                parsing=sum(h.parsing for h in stats),
                bytes=sum(size.values()),
                taken_at=self.clock(),
            )
            self._stats_at = time.monotonic()
            return self._stats

    def set_stop_reason(self, host: str, reason: str) -> None:
        with self._atomic() as cur:
            self._stats = None
            cur.execute(
                "UPDATE hosts SET stop_reason = %s, finished_at = %s "
                "WHERE host = %s AND NOT (stop_reason <> '' AND finished_at <> 0)",
                (reason, self.clock(), host),
            )

    text_order = ' COLLATE "C"'

    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._atomic() as cur:
            cur.execute(query.replace("?", "%s"), params)
            return cur.fetchall()


_LEASED_STATES = (PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING)


class _LeaseLost(Exception):
    """The page's lease expired and another worker took it: this result is dropped."""

    def __init__(self, page_id: PageId) -> None:
        super().__init__(page_id)
        logger.warning("page %d: its lease expired, another worker fetches it", page_id)
