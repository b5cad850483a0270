"""The PostgreSQL dialect: one crawl shared by any number of processes (SPEC §9).

The statements and the crawl rules live in ``sql.py`` and ``policy.py``; this
module keeps what sharing needs: leases with ``FOR UPDATE SKIP LOCKED``, an
owner token and a ``lease_until`` on the database clock, renewed while the
worker lives; politeness in the host rows; stop requests through the database.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import sql

from rccrawler.data.sql import (
    HOST_COLUMNS,
    LEASED,
    PAGE_COLUMNS,
    Claim,
    Cursor,
    LeaseLost,
    SQLDataManager,
    StateCounts,
    crawl_stats,
    host_from_row,
    host_stats,
    page_from_row,
    state_error,
)
from rccrawler.exceptions import StateError
from rccrawler.records import CrawlStats, HostData, PageData, PageId, PageState, RobotsState

if TYPE_CHECKING:
    from rccrawler.data.tables import TaskTable
    from rccrawler.policy import CrawlLimits

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]
PgCursor = psycopg.Cursor[Row]

DEFAULT_PARTITIONS = 8
"""Hash partitions of a task table declared with ``partition_by`` (search postings)."""


def schema_for(name: str) -> str:
    """The PostgreSQL schema that holds the crawl named ``name``."""
    return "rc_" + hashlib.sha1(name.encode()).hexdigest()[:16]


class PostgresDataManager(SQLDataManager):
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
        limits: the crawl's numbers (budget, attempts, redirects).
        task_tables: tables a crawl task keeps its per-page results in.
        partitions: hash partitions of task tables declared with ``partition_by``.
        read_only: only read (``status``, ``search``): no schema is created.
        max_pending_bytes: downloaded bodies waiting for a parser, at most.
        lease_s: seconds a lease lasts without renewal (default :attr:`lease_s`).
        clock: wall-clock source for the start and end times of sites.
    """

    types: ClassVar[Mapping[str, str]] = {
        "float": "DOUBLE PRECISION", "id": "BIGINT", "int": "BIGINT", "bool": "BOOLEAN",
        "false": "FALSE", "text": "TEXT", "bytes": "BYTEA", "without_rowid": "",
    }  # fmt: skip
    text_order: ClassVar[str] = ' COLLATE "C"'
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
        limits: CrawlLimits | None = None,
        task_tables: Sequence[TaskTable] = (),
        partitions: int = DEFAULT_PARTITIONS,
        read_only: bool = False,
        max_pending_bytes: int = 8 * 1024 * 1024,
        lease_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            limits=limits, task_tables=task_tables, max_pending_bytes=max_pending_bytes
        )
        self.url = url
        self.schema = schema
        self.partitions = partitions
        self.read_only = read_only
        if lease_s is not None:
            self.lease_s = lease_s
        self.clock = clock
        self.owner = uuid.uuid4().hex
        """This process's lease token."""
        self._conn: psycopg.Connection[Row] | None = None
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
        """Crawl delay of each host as the last lease here saw it."""
        self._page_hosts: dict[PageId, str] = {}
        """Host of each page this process leased for download (saves a look-up)."""

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        try:
            conn = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StateError(f"cannot connect to the crawl state {self.url}: {exc}") from exc
        schema = sql.Identifier(self.schema)
        try:
            if not self.read_only:
                with conn.transaction(), conn.cursor() as cur:
                    # Workers start together: one of them creates the schema, once. A
                    # crawl that exists is never altered (DDL would lock running workers).
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))
                    cur.execute("SELECT to_regclass(%s)", (f"{self.schema}.meta",))
                    if (cur.fetchone() or (None,))[0] is None:
                        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                        cur.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema))
                        cur.execute(self.schema_sql().encode())
                        cur.execute("CREATE SEQUENCE IF NOT EXISTS page_ids")
                        cur.execute(
                            "CREATE INDEX IF NOT EXISTS pages_owner ON pages (owner) "
                            "WHERE owner <> ''"
                        )
            conn.execute(sql.SQL("SET search_path TO {}").format(schema))
        except psycopg.Error as exc:
            conn.close()
            raise StateError(f"cannot create the crawl state in {self.url}: {exc}") from exc
        self._conn = conn
        with self._atomic() as cur:
            self._opened_at = self._clock(cur)

    def _task_table_sql(self, table: TaskTable) -> str:
        text = super()._task_table_sql(table)
        if table.partition_by is None:
            return text
        # Seed 000, Part IV: a table too big for one machine is hash-partitioned by key.
        create, rest = text.split(";\n", 1)
        parts = "".join(
            f"CREATE TABLE IF NOT EXISTS {table.name}_p{n} PARTITION OF {table.name} "
            f"FOR VALUES WITH (MODULUS {self.partitions}, REMAINDER {n});\n"
            for n in range(self.partitions)
        )
        return f"{create} PARTITION BY HASH ({table.partition_by});\n{parts}{rest}"

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            if not self.read_only:
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

    def describe(self) -> str:
        return f"schema {self.schema} of {self.url}"

    def request_stop(self) -> None:
        with self._atomic() as cur:
            cur.execute(
                "INSERT INTO meta VALUES ('stop_requested', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (repr(self._clock(cur)),),
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
        if self._conn is None:
            raise StateError("the DataManager is not open")
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                yield cur
        except psycopg.OperationalError as exc:
            raise state_error(self.url, exc) from exc
        if self._wake_downloaders:
            self._next_try = 0.0
        self._wake()

    def _sql(self, query: str) -> str:
        return query.replace("?", "%s")

    def _clock(self, cur: Cursor) -> float:
        """The database clock: every worker, on every machine, schedules by it."""
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        row = cur.fetchone()
        assert row is not None
        return float(row[0])

    shared: ClassVar[bool] = True

    def _storage_identity(self, cur: Cursor) -> str:
        # The server's own identity and the database: 127.0.0.1 and localhost are one
        # crawl, and no password is ever stored.
        cur.execute(
            "SELECT CASE WHEN has_function_privilege('pg_control_system()', 'execute') "
            "THEN (SELECT system_identifier::text FROM pg_control_system()) "
            "ELSE 'server' END, current_database()"
        )
        system, database = cur.fetchone() or ("?", "?")
        return f"postgresql:{system}/{database}"

    def _lock_identity(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema,))

    def _lock_sites(self, cur: Cursor) -> None:
        self._stats = None
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.schema + ":sites",))

    def _lease_until(self, now: float) -> float:
        return now + self.lease_s

    # -- leases --------------------------------------------------------------------
    def recover(self) -> int:
        """Queue again the pages whose lease expired (their worker died).

        Pages leased by live workers are theirs: unlike SQLite, a starting worker
        does not take back everything in progress.
        """
        with self._atomic() as cur:
            return self._reclaim_expired(cur)

    def _reclaim_expired(self, cur: Cursor) -> int:
        """Queue again the robots.txt fetches and pages whose lease ran out."""
        now = self._clock(cur)
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
        cur.execute(f"SELECT DISTINCT host FROM pages WHERE state IN {LEASED} AND {where}", args)
        moved = 0
        for (host,) in sorted(cur.fetchall()):
            cur.execute("SELECT 1 FROM hosts WHERE host = %s FOR UPDATE", (host,))
            cur.execute(
                "UPDATE pages p SET state = 'waiting', owner = '', lease_until = 0 "
                f"FROM pages old WHERE p.id = old.id AND p.host = %s AND p.state IN {LEASED} "
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
        if self.read_only or time.monotonic() - self._renewed_at < self.lease_s / 3:
            return
        self._renewed_at = time.monotonic()
        with self._transaction() as cur:
            now = self._clock(cur)
            cur.execute(
                f"UPDATE pages SET lease_until = %s WHERE owner = %s AND state IN {LEASED}",
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

    # -- the dialect's hooks ---------------------------------------------------------
    def _allocate_ids(self, cur: Cursor, count: int) -> list[int]:
        cur.execute("SELECT nextval('page_ids') FROM generate_series(1, %s)", (count,))
        return sorted(int(r[0]) for r in cur.fetchall())

    def _find_host(self, cur: Cursor, host: str) -> HostData | None:
        cur.execute(f"SELECT {HOST_COLUMNS} FROM hosts WHERE host = %s FOR UPDATE", (host,))
        row = cur.fetchone()
        return host_from_row(row) if row is not None else None

    def _insert_host(self, cur: Cursor, host: HostData) -> None:
        super()._insert_host(cur, host)
        self._robots_pending = 1

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        cur.execute("UPDATE hosts SET admitted = admitted + %s WHERE host = %s", (count, host))

    def _claim(
        self, cur: Cursor, page_id: PageId, states: Sequence[PageState], known: PageData | None
    ) -> Claim:
        """Lock the page's host row, then the page, which must still be this worker's."""
        host_name = known.host if known is not None else self._page_hosts.pop(page_id, None)
        if host_name is None:
            cur.execute("SELECT host FROM pages WHERE id = %s", (page_id,))
            row = cur.fetchone()
            if row is None:
                raise KeyError(page_id)
            host_name = row[0]
        cur.execute(
            f"SELECT {HOST_COLUMNS}, admitted, extract(epoch FROM clock_timestamp())::float8 "
            "FROM hosts WHERE host = %s FOR UPDATE",
            (host_name,),
        )
        locked = cur.fetchone()
        if locked is None:
            raise KeyError(host_name)
        host, admitted, now = host_from_row(locked[:-2]), int(locked[-2]), float(locked[-1])
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = %s AND owner = %s "
            "AND state = ANY(%s) FOR UPDATE",
            (page_id, self.owner, [str(s) for s in states]),
        )
        found = cur.fetchone()
        if found is None:
            logger.warning("page %d: its lease expired, another worker fetches it", page_id)
            raise LeaseLost(page_id)
        page = page_from_row(found)
        if known is not None:
            page.state = known.state
        return Claim(page, host, admitted, now)

    def _release(self, cur: Cursor, page: PageData) -> None:
        cur.execute(
            "UPDATE hosts SET in_flight = greatest(0, in_flight - 1) WHERE host = %s",
            (page.host,),
        )
        self._wake_downloaders += 1

    def _save_politeness(self, cur: Cursor, host: HostData) -> None:
        cur.execute(
            "UPDATE hosts SET crawl_delay = %s, retry_after_until = %s, "
            "next_fetch_at = greatest(next_fetch_at, %s) WHERE host = %s",
            (host.crawl_delay, host.retry_after_until, host.next_fetch_at, host.host),
        )

    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._atomic() as cur:
            cur.execute(self._sql(query), params)
            return list(cur.fetchall())

    # -- claiming work ---------------------------------------------------------------
    def take_robots(self) -> HostData | None:
        if not self._robots_pending:
            return None  # a hint, refreshed with the statistics snapshot
        with self._atomic() as cur:
            now = self._clock(cur)
            cur.execute(
                "UPDATE hosts SET robots_state = 'fetching', robots_owner = %s, "
                "robots_lease_until = %s, next_fetch_at = %s + crawl_delay "
                "WHERE host = (SELECT host FROM hosts WHERE robots_state = 'pending' "
                "AND next_fetch_at <= %s LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING {HOST_COLUMNS}",
                (self.owner, now + self.lease_s, now, now),
            )
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT count(*) FROM hosts WHERE robots_state = 'pending'")
                self._robots_pending = int((cur.fetchone() or (0,))[0])
                return None
            return host_from_row(row)

    def hosts(self) -> list[HostData]:
        with self._atomic() as cur:
            cur.execute(f"SELECT {HOST_COLUMNS} FROM hosts ORDER BY host")
            return [host_from_row(row) for row in cur.fetchall()]

    def host(self, host: str) -> HostData | None:
        with self._atomic() as cur:
            cur.execute(f"SELECT {HOST_COLUMNS} FROM hosts WHERE host = %s", (host,))
            row = cur.fetchone()
            return host_from_row(row) if row is not None else None

    def _due_in(self) -> float:
        return self._next_try - time.monotonic()

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
        from rccrawler.policy import breadth_first_allows

        cur.execute(
            f"SELECT {HOST_COLUMNS} FROM hosts WHERE host = %s AND robots_state = 'ready' "
            "AND in_flight < max_downloads_at_time "
            "AND greatest(next_fetch_at, retry_after_until) <= %s FOR UPDATE SKIP LOCKED",
            (host, now),
        )
        row = cur.fetchone()
        if row is None:
            return None  # another worker holds the host, or it is not due any more
        data = host_from_row(row)
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = %s AND state = 'waiting' "
            "ORDER BY level, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            (host,),
        )
        found = cur.fetchone()
        if found is None:
            return None
        page = page_from_row(found)
        # Breadth-first barrier, across every worker.
        cur.execute(f"SELECT min(level) FROM pages WHERE host = %s AND state IN {LEASED}", (host,))
        busy = (cur.fetchone() or (None,))[0]
        if not breadth_first_allows(page.level, [] if busy is None else [busy]):
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
                    f"SELECT {HOST_COLUMNS}, budget_hit FROM hosts ORDER BY started_at, host"
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
            counts: dict[str, StateCounts] = {}
            for host, state, error, count, nbytes, ndup, nalias in page_rows:
                c = counts.setdefault(host, StateCounts({}, {}))
                c.by_state[state] = c.by_state.get(state, 0) + count
                if state == PageState.ERROR:
                    c.errors[error] = c.errors.get(error, 0) + count
                c.bytes += int(nbytes)
                c.duplicates += ndup
                c.aliases += nalias
            parsing_here: Counter[str] = Counter(p.host for p, _ in self._parsing.values())
            stats, all_counts = [], []
            pending = 0
            for row in host_rows:
                data = host_from_row(row[:-1])
                if data.robots_state is RobotsState.PENDING:
                    pending += 1
                c = counts.get(data.host, StateCounts({}, {}))
                c.budget_hit = bool(row[-1])
                parsing = parsing_here[data.host]
                # A body being parsed here is still 'downloaded' in the table.
                c.by_state[PageState.DOWNLOADED] = c.by_state.get(PageState.DOWNLOADED, 0) - parsing
                all_counts.append(c)
                stats.append(host_stats(data, c, parsing=parsing))
            self._robots_pending = pending
            self._stats = crawl_stats(stats, all_counts, self.clock())
            self._stats_at = time.monotonic()
            return self._stats

    def set_stop_reason(self, host: str, reason: str) -> None:
        self._stats = None
        super().set_stop_reason(host, reason)
