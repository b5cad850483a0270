"""The PostgreSQL dialect: one crawl shared by any number of processes (SPEC §9).

The statements and the crawl rules live in ``sql.py`` and ``policy.py``; this
module keeps what sharing needs. Work is partitioned by host, the way crawlers
that scale do it (Heritrix's and StormCrawler's per-host queues): a worker
leases a *host* (``hosts.owner``) and then owns its politeness, its queue and
its page budget in memory, claiming its waiting pages in batches with
``FOR UPDATE SKIP LOCKED``; per-page writes lock only the page's own row. Each
worker holds a session-level advisory lock on its own key, so a worker that
dies is seen the moment its connection drops, and its hosts and pages go back
to the queue. Counters live in a ``counts`` table kept in the same transactions,
so ``statistics()`` costs O(hosts), never a scan of the pages.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

import psycopg
from psycopg import errors, sql
from psycopg_pool import ConnectionPool, PoolTimeout

from rccrawler.data.sql import (
    HOST_COLUMNS,
    INSERT_VALUES,
    PAGE_COLUMNS,
    Claim,
    Conflict,
    Cursor,
    LeaseLost,
    SQLDataManager,
    StorageOptions,
    host_from_row,
    page_from_row,
    retry_conflicts,
    state_error,
)
from rccrawler.data.stats import StateCounts, snapshot
from rccrawler.exceptions import StateError
from rccrawler.policy import breadth_first_allows
from rccrawler.records import CrawlStats, HostData, PageData, PageId, PageState, RobotsState

if TYPE_CHECKING:
    from rccrawler.data.tables import TaskTable

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]

CONFLICTS = (errors.SerializationFailure, errors.DeadlockDetected)
"""SQLSTATE 40001 and 40P01: the server rolled a transaction back to let others go on;
the same transaction run again succeeds (see :func:`retry_conflicts`)."""

DEFAULT_PARTITIONS = 8
"""Hash partitions of a task table declared with ``partition_by`` (search postings)."""

SHARED_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS page_ids;
CREATE INDEX IF NOT EXISTS pages_owner ON pages (owner) WHERE owner <> '';
CREATE TABLE IF NOT EXISTS workers (
    owner TEXT PRIMARY KEY, lock_key BIGINT NOT NULL, machine TEXT NOT NULL,
    pid INTEGER NOT NULL, started_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS counts (
    host TEXT NOT NULL, key TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (host, key)
);
CREATE INDEX IF NOT EXISTS skipped_order ON skipped (host, url COLLATE "C")
    INCLUDE (reason, found_on);
CREATE INDEX IF NOT EXISTS pages_host ON pages (host, id);
"""
"""What only a shared crawl needs: ids from a sequence, the workers, the counters, and
the orders the output reads a site in, a chunk at a time (keyset pagination): its
pages by id, its skipped links by bytes. Without them each chunk reads the rest of
the site, and writing the output grows faster than the crawl. A site's rows lie all
over the tables (200 sites crawled at once interleave their pages), so the indexes
the output reads also carry what it reads of a row (``arcs_host`` its target,
``skipped_order`` the reason and the page): an index-only scan then reads a chunk
from a few index pages instead of one table page per row, which is what made the
output slow down once the crawl outgrew the server's shared buffers."""


_LITERAL = re.compile(r"NULL|'[^',]*'")
_INTEGER = re.compile(r"-?\d+")

LEASE_LOOK_S = (0.02, 0.1)
"""Seconds between two looks for a host to lease: at first, and at most once every host
is held by some worker (a dead worker's or a handed-over host is taken that soon)."""

ANALYZE_FIRST = 200
"""Pages in the crawl when its tables are first analyzed (then each time they double)."""

Columns = Mapping[str, Sequence[tuple[str, str]]]
"""Each table's columns, in order, with their types (read once, at open)."""


def _array_insert(query: str, rows: Sequence[Sequence[Any]], columns: Columns) -> _Write | None:
    """An executemany of ``INSERT INTO t (…) VALUES (%s, …)`` as one statement that
    takes each column's values as an array (``… SELECT * FROM unnest(%s::bigint[], …)``),
    or None when the statement is not of that form.

    psycopg's executemany sends a row at a time, and that was the largest Python cost
    of storing a parse (its new pages, URLs, arcs and skipped links). A multi-row
    ``VALUES`` list did better, but its text changes with the number of rows, so the
    server parsed and planned every one afresh (0.5 ms each, more than all the rest
    of a page's statements). This text is the same for any number of rows: prepared
    once, planned once. An integer written into the statement (a task row's page id)
    becomes a parameter too, for the same reason.
    """
    found = INSERT_VALUES.fullmatch(query)
    table = columns.get(found.group(1), ()) if found is not None else ()
    if found is None or not table:
        return None
    name, listed, values, tail = found.groups()
    types = dict(table)
    names = listed.split(", ") if listed else [column for column, _type in table]
    tokens = values.split(", ")
    if len(names) != len(tokens) or not all(n in types for n in names):
        return None
    select: list[str] = []
    scalars: list[Any] = []
    arrays: list[str] = []
    for column, token in zip(names, tokens, strict=True):
        if token == "%s":
            select.append(f"r.c{len(arrays)}")
            arrays.append(f"%s::{types[column]}[]")
        elif _INTEGER.fullmatch(token):
            select.append(f"%s::{types[column]}")
            scalars.append(int(token))
        elif _LITERAL.fullmatch(token):
            select.append(token)
        else:
            return None
    floats = [
        types[c] == "double precision" for c, t in zip(names, tokens, strict=True) if t == "%s"
    ]
    data = [
        [float(v) if v is not None else None for v in column] if is_float else list(column)
        for column, is_float in zip(zip(*rows, strict=True), floats, strict=True)
    ]
    text = (
        f"INSERT INTO {name} ({', '.join(names)}) SELECT {', '.join(select)} "
        f"FROM unnest({', '.join(arrays)}) AS r({', '.join(f'c{n}' for n in range(len(arrays)))})"
        f"{tail}"
    )
    return _Write(text, scalars + data, name, "insert")


_DEFERRABLE = re.compile(
    r"(?:INSERT INTO (?P<insert>\w+) (?:\([^()]*\) )?VALUES \([^()]*\)(?:, \([^()]*\))*"
    r"(?: ON CONFLICT DO NOTHING)?"
    r"|INSERT INTO (?P<upsert>\w+) SELECT \* FROM unnest\([^()]*\) "
    r"ON CONFLICT \([^()]*\) DO UPDATE SET [^()]*"
    r"|UPDATE (?P<update>\w+) SET [^()]* WHERE id = %s"
    r"|DELETE FROM (?P<delete>\w+) WHERE page_id = %s)",
    re.S,
)
"""The writes a transaction can send later, with the others, in one statement: they read
only their own table's rows that they change (no subquery), and return nothing."""
_LOCKS = re.compile(r"\bFOR (?:UPDATE|SHARE|NO KEY UPDATE|KEY SHARE)\b|advisory", re.I)


@dataclass(frozen=True, slots=True)
class _Write:
    """A write that waits for the others (see DeferredWrites)."""

    text: str
    params: list[Any]
    table: str
    kind: str
    """insert, upsert, update or delete (the group of _DEFERRABLE that matched)."""

    def clashes(self, other: _Write) -> bool:
        """Whether the two cannot be one statement: they change one table, and are not
        INSERTs beside an UPDATE of a row by id (which no INSERT could be)."""
        return self.table == other.table and {self.kind, other.kind} != {"insert", "update"}


class DeferredWrites:
    """A write transaction in as few round trips as it can (one for most of them).

    On an autocommit connection: a plain read before any write runs by itself, as it
    would in the transaction (READ COMMITTED gives each statement its own snapshot);
    writes that return nothing (:data:`_DEFERRABLE`) wait, and go together as one
    statement (``WITH w0 AS (…), w1 AS (…) …``) when the transaction commits, itself
    atomic, so a page's stored parse or download needs no BEGIN and COMMIT at all.
    ``BEGIN`` is sent only when a statement has to run after a write or takes a lock.
    The statements of one ``WITH`` share one snapshot and cannot see each other's
    rows, so two of them never change one table, except INSERTs beside an UPDATE by id
    (new pages and the parsed page). A dialect-neutral caller sees a DB-API cursor.

    Measured on the scale-out crawl: 14 round trips a page became 5, and the worker's
    and the server's CPU per page fell with them.
    """

    def __init__(self, cursor: psycopg.Cursor[Row], columns: Columns) -> None:
        self.cursor = cursor
        self.columns = columns
        self.begun = False
        self.pending: list[_Write] = []
        """The writes not sent yet."""

    @property
    def rowcount(self) -> int:
        if self.pending:
            self._send(alone_last=True)
        return self.cursor.rowcount

    def fetchone(self) -> Any:
        assert not self.pending, "a write that returns rows is never deferred"
        return self.cursor.fetchone()

    def fetchall(self) -> list[Any]:
        assert not self.pending, "a write that returns rows is never deferred"
        return self.cursor.fetchall()

    def execute(self, query: str | bytes, params: Sequence[Any] = (), /) -> None:
        text = query.decode() if isinstance(query, bytes) else query
        found = _DEFERRABLE.fullmatch(text)
        if found is not None:
            kind = found.lastgroup or ""
            self._defer(_Write(text, list(params), found.group(kind), kind))
            return
        if self.pending:
            self._send(alone_last=False)
        elif not self.begun and (not text.lstrip().startswith("SELECT") or _LOCKS.search(text)):
            self._begin()
        self.cursor.execute(text, params)

    def executemany(self, query: str, params_seq: Iterable[Sequence[Any]], /) -> None:
        rows = list(params_seq)
        if not rows:
            return
        write = _array_insert(query, rows, self.columns)
        if write is not None:
            self._defer(write)
            return
        if self.pending:
            self._send(alone_last=False)
        if not self.begun:
            self._begin()
        self.cursor.executemany(query, rows)

    def _defer(self, write: _Write) -> None:
        if any(write.clashes(other) for other in self.pending):
            self._send(alone_last=False)
        self.pending.append(write)

    def _begin(self) -> None:
        self.cursor.execute("BEGIN")
        self.begun = True

    def _send(self, *, alone_last: bool) -> None:
        """Send the pending writes (in a transaction, since more statements follow)."""
        if not self.begun:
            self._begin()
        pending, self.pending = self.pending, []
        if alone_last and len(pending) > 1:
            self._send_together(pending[:-1])
            pending = pending[-1:]
        self._send_together(pending)

    def _send_together(self, pending: Sequence[_Write]) -> None:
        *first, last = pending
        text = "".join(f"w{n} AS ({w.text}), " for n, w in enumerate(first))
        text = f"WITH {text[:-2]} {last.text}" if first else last.text
        self.cursor.execute(text, [v for w in pending for v in w.params])

    def commit(self) -> None:
        if self.pending:
            # One statement is atomic by itself: no BEGIN and COMMIT around it.
            pending, self.pending = self.pending, []
            self._send_together(pending)
        if self.begun:
            self.cursor.execute("COMMIT")
            self.begun = False

    def rollback(self) -> None:
        self.pending = []
        if self.begun:
            self.begun = False
            with contextlib.suppress(psycopg.Error):
                self.cursor.execute("ROLLBACK")


def schema_for(name: str) -> str:
    """The PostgreSQL schema that holds the crawl named ``name``."""
    return "rc_" + hashlib.sha1(name.encode()).hexdigest()[:16]


@dataclass(slots=True)
class _HeldHost:
    """A host this worker leased: its politeness and queue live here while it holds it."""

    data: HostData
    admitted: int
    queue: deque[PageData] = field(default_factory=deque)
    """Waiting pages claimed by this worker (owner set), not handed to a thread yet."""
    exhausted: bool = False
    """The last claim found no waiting page (until this worker queues new ones)."""
    levels: Counter[int] = field(default_factory=Counter)
    """Levels of this host's pages in progress here: the breadth-first barrier."""
    busy: int = 0
    """Pages of the host handed to a thread and not stored yet (download or parse)."""
    budget_hit: bool = False
    dry: bool = False
    """The last claim found nothing it may take now (the breadth-first barrier): do not
    ask again until a page of the host finishes or new ones are queued."""
    draining: bool = False
    """Being handed over to a worker that holds fewer hosts: no new page is handed out,
    and the host is given back once nothing of it is in progress here."""


def _set_meta(cur: Cursor, key: str, value: str) -> None:
    """Write one of the crawl's shared values (the ``meta`` table), new or not."""
    cur.execute(
        "INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def _threads_wanted(held: _HeldHost) -> int:
    """Downloading threads a held host will keep busy: a worker leases hosts until these
    add up to its threads, and shares hosts out by them. A host without a crawl delay
    takes its whole limit, even while behind its breadth-first barrier (counting only
    what was in flight then, the first worker up leased 4 hosts of 8 while two others
    started, and kept them). A host with a delay, one with nothing left to claim, or
    one being handed over takes only what is in flight: between two requests a polite
    host needs no thread (counted as one, 8 threads on 40 hosts of 200 ms delay held 8
    hosts and crawled 38 pages/s; now 40 hosts, 800 pages in 5.7 s instead of 22 s)."""
    data = held.data
    if held.draining or (held.exhausted and not held.queue) or data.crawl_delay > 0:
        return data.in_flight
    return data.max_downloads_at_time


class PostgresDataManager(SQLDataManager):
    """A DataManager in a PostgreSQL schema, shared by every worker process of a crawl.

    Writes go through one connection guarded by one lock (the threads of a process
    share it; the held hosts in memory change with them), one transaction per method.
    That connection lives as long as the worker and holds its liveness lock. Reads
    that need no memory of this process (the statistics' counters, the stop check,
    the hosts, the unloaders' pages) take a connection of a small pool instead, so
    they never wait behind the crawl's writes. A worker leases hosts, up to its downloading threads'
    worth of connections, and claims each host's waiting pages in batches; the
    crawl delay, the per-host limit and the breadth-first barrier of a host are
    then kept by its one owner. A downloaded body waits in the memory of the
    process that fetched it, which parses it itself; at most ``max_pending_pages``
    of them, so a killed worker's pages fetched again stay few.

    Args:
        url: the ``postgresql://`` URL.
        schema: the schema of this crawl (see :func:`schema_for`).
        limits: the crawl's numbers (budget, attempts, redirects).
        task_tables: tables a crawl task keeps its per-page results in.
        partitions: hash partitions of task tables declared with ``partition_by``.
        read_only: only read (``status``, ``search``): nothing is created or leased.
        download_slots: requests this worker may have in flight (its downloading
            threads): it leases hosts until their limits add up to this.
        max_pending_bytes: downloaded bodies waiting for a parser, at most.
        clock: wall-clock source for the start and end times of sites.
    """

    types: ClassVar[Mapping[str, str]] = {
        "float": "DOUBLE PRECISION", "id": "BIGINT", "int": "BIGINT", "bool": "BOOLEAN",
        "false": "FALSE", "text": "TEXT", "bytes": "BYTEA", "without_rowid": "",
    }  # fmt: skip
    text_order: ClassVar[str] = ' COLLATE "C"'
    shared: ClassVar[bool] = True
    batch_size: ClassVar[int] = 16
    """Waiting pages of a held host claimed in one round trip."""
    hosts_per_thread: ClassVar[int] = 16
    """Hosts a worker holds at most, per downloading thread. Hosts with a crawl delay
    leave threads idle between requests, so a worker leases more of them until its
    threads are busy; each costs a queue of pages in memory and a look on every take,
    so not without bound (8 threads: 128 hosts, 128 requests/s at a delay of 1 s)."""
    reap_interval: ClassVar[float] = 0.25
    """Seconds between two looks for dead workers, and at how the hosts are shared."""
    stats_max_age: ClassVar[float] = 0.25
    """Seconds a statistics() snapshot is reused."""
    idle_stats_max_age: ClassVar[float] = 0.05
    """The same, while this worker holds no host and has no page in progress: it then
    waits only on the others, and a finished crawl should end every worker at once (at
    the end of a crawl of 3 workers, the last to see it exited 0.2 s after the first)."""
    stop_poll_s: ClassVar[float] = 1.0
    """Seconds between two looks for a stop request (``rccrawler stop``)."""
    read_connections: ClassVar[int] = 3
    """The pool's connections for reads, at most (a worker's routine, its downloading
    threads' host lookups and its unloaders read at once)."""

    def __init__(
        self,
        url: str,
        schema: str,
        *,
        partitions: int = DEFAULT_PARTITIONS,
        download_slots: int = 8,
        **options: Unpack[StorageOptions],
    ) -> None:
        super().__init__(**options)
        self.url = url
        self.schema = schema
        self.partitions = partitions
        self.download_slots = max(1, download_slots)
        self.max_pending_pages = self.download_slots
        self.owner = uuid.uuid4().hex
        """This worker's token: on its hosts, its pages and its row in ``workers``."""
        self.lock_key = random.randrange(1, 2**62)
        """The advisory lock this worker holds while its connection lives."""
        self._conn: psycopg.Connection[Row] | None = None
        self._columns: Columns = {}
        self._pool: ConnectionPool[psycopg.Connection[Row]] | None = None
        self._held: dict[str, _HeldHost] = {}
        self._handed: dict[PageId, PageData] = {}
        """Pages handed to a downloading thread, until their download is stored."""
        self._deltas: Counter[tuple[str, str]] = Counter()
        """Counter changes of the open transaction, written just before it commits."""
        self._stats: CrawlStats | None = None
        self._stats_at = 0.0
        self._opened_at = 0.0
        """Database clock when this process opened the state: later stop requests are for it."""
        self._stop_checked_at = -1e9
        self._stop_seen = False
        self._robots_pending = 1
        self._next_try = 0.0
        self._lease_look = LEASE_LOOK_S[0]
        """Seconds between two looks for a host to lease (see _lease_host)."""
        """time.monotonic() before which take_for_download need not look for a new host."""
        self._reaped_at = -1e9
        self._rotation = 0
        self._analyze_at = ANALYZE_FIRST
        self._analyzer: threading.Thread | None = None
        """Pages in the crawl at which to ANALYZE its tables next (see _analyze_if_grown)."""
        self._handed_over: dict[str, float] = {}
        """Hosts handed over to other workers, and until when (monotonic) to leave them."""
        self._share = 1 << 30
        """Hosts this worker may hold while others would idle: its fair share of the
        hosts with work (see _balance), known after the first look."""
        self._spare_published = -1
        """The idle downloading threads this worker last told the others of."""

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
                        cur.execute((self.schema_sql() + SHARED_SCHEMA).encode())
            conn.execute(sql.SQL("SET search_path TO {}").format(schema))
            self._columns = self._read_columns(conn)
            self.check_task_layout(
                {name: [column for column, _kind in columns]
                 for name, columns in self._columns.items()}
            )  # fmt: skip
            if not self.read_only:
                # Held as long as this connection lives: others see a death at once.
                conn.execute("SELECT pg_advisory_lock(%s)", (self.lock_key,))
                # A killed worker loses nothing it committed either way; only a crash of
                # the server itself could lose its last commits (pages fetched again).
                conn.execute("SET synchronous_commit = off")
        except StateError:
            conn.close()
            raise
        except psycopg.Error as exc:
            conn.close()
            raise StateError(f"cannot create the crawl state in {self.url}: {exc}") from exc
        self._conn = conn
        if not self.read_only:
            # status, stop and search read once and leave: their one connection will do.
            self._pool = ConnectionPool(
                self.url, min_size=1, max_size=self.read_connections, open=True,
                kwargs={"autocommit": True}, configure=self._configure_reader, num_workers=1,
                timeout=30, name=f"rccrawler-{self.owner[:8]}",
            )  # fmt: skip
        with self._atomic() as cur:
            self._opened_at = self._clock(cur)
            self._load_deep_links(cur)
            if not self.read_only:
                cur.execute(
                    "INSERT INTO workers VALUES (%s, %s, %s, %s, %s)",
                    (self.owner, self.lock_key, socket.gethostname(), os.getpid(),
                     self._opened_at),
                )  # fmt: skip
                _set_meta(cur, f"spare:{self.owner}", str(self.download_slots))
                self._spare_published = self.download_slots

    def _read_columns(self, conn: psycopg.Connection[Row]) -> dict[str, list[tuple[str, str]]]:
        """The crawl's tables and their columns' types (see :func:`_array_insert`)."""
        rows = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY c.relname, a.attnum",
            (self.schema,),
        ).fetchall()
        columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in rows:
            columns.setdefault(table, []).append((column, kind))
        return columns

    def _configure_reader(self, conn: psycopg.Connection[Row]) -> None:
        """A pooled connection reads this crawl's schema, and only reads."""
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute("SET default_transaction_read_only = on")

    def _task_table_sql(self, table: TaskTable) -> str:
        text = super()._task_table_sql(table)
        if table.partition_by is None:
            return text
        # Seed 000, Part IV: a table too big for one machine is hash-partitioned by key.
        create, rest = text.split(";\n", 1)
        count = table.partitions or self.partitions
        parts = "".join(
            f"CREATE TABLE IF NOT EXISTS {table.name}_p{n} PARTITION OF {table.name} "
            f"FOR VALUES WITH (MODULUS {count}, REMAINDER {n});\n"
            for n in range(count)
        )
        return f"{create} PARTITION BY HASH ({table.partition_by});\n{parts}{rest}"

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            if not self.read_only:
                # Give back what this process still holds, so nobody waits for it.
                with contextlib.suppress(psycopg.Error, StateError, Conflict), \
                        self._transaction() as cur:  # fmt: skip
                    for held in self._held.values():
                        self._save_held(cur, held)
                    self._reclaim(cur, self.owner)
                    cur.execute("DELETE FROM workers WHERE owner = %s", (self.owner,))
                    cur.execute("DELETE FROM meta WHERE key = %s", (f"spare:{self.owner}",))
                self._held.clear()
            self._conn.close()
            self._conn = None
            if self._analyzer is not None:
                self._analyzer.join()
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def describe(self) -> str:
        return f"schema {self.schema} of {self.url}"

    @retry_conflicts
    def request_stop(self) -> None:
        with self._atomic() as cur:
            _set_meta(cur, "stop_requested", repr(self._clock(cur)))

    @retry_conflicts
    def stop_requested(self) -> bool:
        # Workers started after the request carry on: it was meant for those running then.
        now = time.monotonic()
        if now - self._stop_checked_at < self.stop_poll_s:
            return self._stop_seen
        self._stop_checked_at = now
        with self._reading(one_statement=True) as cur:
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
        committed = False
        try:
            with self._storage_errors(), self._conn.cursor() as raw:
                cur = DeferredWrites(raw, self._columns)
                try:
                    yield cur
                    self._write_deltas(cur)
                    cur.commit()
                except BaseException:
                    cur.rollback()
                    raise
            committed = True
        finally:
            if not committed:
                self._deltas.clear()
            self._transaction_ended(committed=committed)
        self._wake()

    @contextlib.contextmanager
    def _reading(self, *, one_statement: bool = False) -> Iterator[Cursor]:
        """A read on a pooled connection, outside this process's lock (see the class).
        One statement needs no transaction around it (a BEGIN and a COMMIT less)."""
        if self._pool is None:  # a read-only open: its one connection is free
            with self._atomic() as cur:
                yield cur
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._storage_errors())
            conn = stack.enter_context(self._pool.connection())
            if not one_statement:
                stack.enter_context(conn.transaction())
            yield stack.enter_context(conn.cursor())

    @contextlib.contextmanager
    def _storage_errors(self) -> Iterator[None]:
        """A conflict becomes Conflict (the call runs again), a lost server StateError."""
        try:
            yield
        except CONFLICTS as exc:
            raise Conflict(str(exc).partition("\n")[0]) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise state_error(self.url, exc) from exc

    def _sql(self, query: str) -> str:
        return query.replace("?", "%s")

    def _clock(self, cur: Cursor) -> float:
        """The database clock: every worker, on every machine, schedules by it."""
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        row = cur.fetchone()
        assert row is not None
        return float(row[0])

    def _now(self) -> float:
        """This process's clock: a held host's times are kept in it. The host row keeps
        the database's; times cross between the two as "seconds from now", measured at
        the database when it runs the statement, so an error only ever makes them later."""
        return self.clock()

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

    # -- counters ----------------------------------------------------------------
    def _count(self, host: str, key: str, delta: int) -> None:
        if delta:
            self._deltas[(host, key)] += delta

    def _write_deltas(self, cur: Cursor) -> None:
        if not self._deltas:
            return
        rows = [(host, key, n) for (host, key), n in sorted(self._deltas.items()) if n]
        self._deltas.clear()
        if rows:
            # One statement, rows in sorted order (two workers never lock them in opposite
            # orders), not executemany: its pipeline costs more than the few rows here.
            hosts, keys, deltas = zip(*rows, strict=True)
            cur.execute(
                "INSERT INTO counts SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
                "ON CONFLICT (host, key) DO UPDATE SET n = counts.n + excluded.n",
                (list(hosts), list(keys), list(deltas)),
            )

    def _on_move(
        self, page: PageData, new: PageState, *, error: str = "", duplicate: bool = False,
        alias: bool = False, size: int = 0,
    ) -> None:  # fmt: skip
        # A body being parsed is 'downloaded' in the table (it lives in this memory).
        old = PageState.DOWNLOADED if page.state is PageState.PARSING else page.state
        state = PageState.DOWNLOADED if new is PageState.PARSING else new
        if old is not state:
            self._count(page.host, f"state:{old}", -1)
            self._count(page.host, f"state:{state}", 1)
        if state is PageState.ERROR:
            self._count(page.host, f"error:{error}", 1)
        self._count(page.host, "duplicates", int(duplicate))
        self._count(page.host, "aliases", int(alias))
        self._count(page.host, "bytes", size)
        self._after_commit(partial(self._held_moved, page.host, page.state, page.level, new))

    def _held_moved(self, host: str, old: PageState, level: int, new: PageState) -> None:
        """A page of a held host changed state (committed): its barrier and its queue."""
        held = self._held.get(host)
        if held is None:
            return
        was_busy = old in (PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING)
        busy = new in (PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING)
        if was_busy and not busy:
            held.levels[level] -= 1
            held.busy -= 1
            held.dry = False
        if new is PageState.WAITING:
            held.exhausted = False  # a retry or a redirect: back in the table's queue

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        self._count(host, "state:waiting", count)
        self._after_commit(partial(self._held_admitted, host, count))

    def _held_admitted(self, host: str, count: int) -> None:
        held = self._held.get(host)
        if held is not None:
            held.admitted += count
            held.exhausted = held.dry = False

    def _on_budget_hit(self, cur: Cursor, host: str) -> None:
        held = self._held.get(host)
        if held is not None and held.budget_hit:
            return
        if held is not None:
            held.budget_hit = True
        super()._on_budget_hit(cur, host)

    def _on_waiting_ended(self, host: str, count: int) -> None:
        self._count(host, "state:waiting", -count)
        self._count(host, "state:skipped", count)

    def _on_levels_lowered(
        self, host: str, pages: Sequence[PageId], level: int, parent: PageData
    ) -> None:
        held = self._held.get(host)
        if held is None:
            return
        moved = set(pages)
        for queued in held.queue:
            if queued.id in moved:
                queued.level, queued.id_from, queued.referer = level, parent.id, parent.url
        held.queue = deque(sorted(held.queue, key=lambda p: (p.level, p.id)))

    # -- workers, and what a dead one held ---------------------------------------------
    @retry_conflicts
    def recover(self) -> int:
        """Take back what dead workers held. Live workers keep theirs: unlike SQLite,
        a starting worker does not take back everything in progress."""
        with self._lock:
            self._reaped_at = -1e9
            return self._reap_dead()

    def _reap_dead(self) -> int:
        """Give dead workers' hosts and pages back to the queue (lock held)."""
        if self.read_only or time.monotonic() - self._reaped_at < self.reap_interval:
            return 0
        self._reaped_at = time.monotonic()
        moved = 0
        with self._transaction() as cur:
            cur.execute(
                "SELECT owner, lock_key FROM workers WHERE owner <> %s ORDER BY owner",
                (self.owner,),
            )
            workers = cur.fetchall()
        for owner, key in workers:
            with self._transaction() as cur:
                # Its session lock is free only when its connection is gone.
                cur.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,))
                if not (cur.fetchone() or (False,))[0]:
                    continue
                cur.execute("DELETE FROM workers WHERE owner = %s RETURNING owner", (owner,))
                if cur.fetchone() is None:
                    continue  # another worker reaped it first
                cur.execute("DELETE FROM meta WHERE key = %s", (f"spare:{owner}",))
                moved += self._reclaim(cur, owner)
        if moved:
            logger.warning("%d pages of a worker that stopped were queued again", moved)
        return moved

    def _reclaim(self, cur: Cursor, owner: str) -> int:
        """Put what ``owner`` held back: its robots.txt fetches, hosts and pages."""
        cur.execute(
            "UPDATE hosts SET robots_state = 'pending', robots_owner = '' "
            "WHERE robots_state = 'fetching' AND robots_owner = %s",
            (owner,),
        )
        if cur.rowcount:
            self._robots_pending = 1
        cur.execute(
            "UPDATE hosts SET owner = '', next_fetch_at = greatest(next_fetch_at, "
            "extract(epoch FROM clock_timestamp()) + crawl_delay) WHERE owner = %s",
            (owner,),
        )
        # Counted in the statement: a dead worker may have held thousands of pages.
        cur.execute(
            "WITH old AS (SELECT id, host, state FROM pages WHERE owner = %s "
            "AND state IN ('waiting', 'running', 'downloaded', 'parsing') FOR UPDATE), "
            "moved AS (UPDATE pages p SET state = 'waiting', owner = '', lease_until = 0 "
            "FROM old WHERE p.id = old.id RETURNING old.host, old.state) "
            "SELECT host, state, count(*) FROM moved WHERE state <> 'waiting' "
            "GROUP BY host, state",
            (owner,),
        )
        moved = 0
        for host, state, count in cur.fetchall():
            self._count(host, f"state:{state}", -count)
            self._count(host, "state:waiting", count)
            moved += count
        if moved:
            self._wake_downloaders = 1 << 16
        self._lease_look, self._next_try = LEASE_LOOK_S[0], 0.0  # its hosts are free now
        return moved

    def _balance(self) -> None:
        """Share the hosts between the workers (after each look for dead ones).

        A worker leases hosts up to its share of those with work (see _below_share),
        and beyond it while its threads would idle. Workers start at different times,
        so the first up may hold more than its share: it then hands one over to a
        worker holding fewer (8 hosts for 3 workers had come out 4, 4 and 0). At the
        end of a crawl a worker whose hosts are done has idle threads, which each
        worker publishes ("spare"); one holding more hosts than its threads serve at
        their limits then hands one over to it. (Counting hosts alone handed hosts to
        workers whose threads were all busy: nobody leased them for 1.7 s.) A host
        handed over gets no new page; it is given back once its pages in progress are
        stored (see _take_from_held), and leased by the worker that lacks one.
        """
        if self.read_only:
            return
        with self._lock:
            self._publish_spare()
        with self._reading() as cur:
            cur.execute(
                "SELECT w.owner, (SELECT count(*) FROM hosts h WHERE h.owner = w.owner), "
                "coalesce((SELECT m.value::int FROM meta m WHERE m.key = 'spare:' || w.owner), 0) "
                "FROM workers w"
            )
            others = {owner: (int(n), int(idle)) for owner, n, idle in cur.fetchall()
                      if owner != self.owner}  # fmt: skip
            cur.execute(
                "SELECT count(*) FROM hosts h WHERE owner = '' AND robots_state = 'ready' "
                "AND EXISTS (SELECT 1 FROM pages p WHERE p.host = h.host AND p.state = 'waiting')"
            )
            free = int((cur.fetchone() or (0,))[0])
        with self._lock:
            mine = len(self._held)
            held_elsewhere = sum(n for n, _idle in others.values())
            self._share = -(-(mine + held_elsewhere + free) // (len(others) + 1))
            if free or not others:
                return  # a worker with idle threads leases a free host itself
            candidates = [h for h in self._held.values() if not h.exhausted]
            if not candidates or any(h.draining for h in self._held.values()):
                return
            # The most recently leased: the least of its work is done.
            given = candidates[-1]
            if mine > self._share and any(n < self._share for n, _idle in others.values()):
                why = "fewer hosts than its share"
            elif (
                self._threads_wanted_here() > self.download_slots
                and 2 * max(idle for _n, idle in others.values())
                >= given.data.max_downloads_at_time
            ):
                why = "idle threads"
            else:
                return
            given.draining = True
            logger.info("handing %s over to a worker with %s", given.data.host, why)

    def _publish_spare(self) -> None:
        """Tell the other workers how many of this worker's downloading threads its hosts
        leave idle, when that changed (lock held)."""
        wanted = self._threads_wanted_here()
        spare = max(0, self.download_slots - wanted)
        if spare != self._spare_published:
            with self._transaction() as cur:
                _set_meta(cur, f"spare:{self.owner}", str(spare))
            self._spare_published = spare

    def live_workers(self) -> int:
        return sum(1 for *_rest, alive in self.workers() if alive)

    @retry_conflicts
    def workers(self) -> list[tuple[str, str, int, bool]]:
        """(owner, machine, pid, alive) of every worker that joined and did not leave."""
        with self._reading() as cur:
            cur.execute("SELECT owner, machine, pid, lock_key FROM workers ORDER BY started_at")
            rows = cur.fetchall()
            found = []
            for owner, machine, pid, key in rows:
                if owner == self.owner:
                    found.append((owner, machine, pid, True))
                    continue
                cur.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                    "AND granted AND ((classid::bigint << 32) | objid::bigint) = %s)",
                    (key,),
                )
                found.append((owner, machine, pid, bool((cur.fetchone() or (False,))[0])))
            return found

    # -- the dialect's hooks -------------------------------------------------------
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

    def _claim(
        self, cur: Cursor, page_id: PageId, states: Sequence[PageState], known: PageData | None
    ) -> Claim:
        """The page and its held host, from this worker's memory when it can.

        A page this worker handed to a thread is its own for as long as its connection
        lives: another worker reaps it only once this connection (and with it the
        advisory lock) is gone, and then this write cannot commit anyway. So no
        round trip is needed to check it; an unknown page is read and locked.
        """
        handed = self._handed.pop(page_id, None) if known is None else known
        if handed is not None:
            held = self._held.get(handed.host)
            if held is not None:
                return Claim(replace(handed), held.data, held.admitted, self._now())
        wanted = [str(s) for s in states]
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = %s AND owner = %s "
            "AND state = ANY(%s) FOR UPDATE",
            (page_id, self.owner, wanted),
        )
        found = cur.fetchone()
        if found is None:
            logger.warning("page %d: another worker took it over", page_id)
            raise LeaseLost(page_id)
        page = page_from_row(found)
        held = self._held.get(page.host)
        if held is None:
            raise LeaseLost(page_id)  # the host went to another worker
        # The table says 'waiting' (or 'downloaded') where this worker knows better.
        page.state = known.state if known is not None else PageState.RUNNING
        return Claim(page, held.data, held.admitted, self._now())

    def _release(self, cur: Cursor, page: PageData) -> None:
        self._after_commit(partial(self._slot_freed, page.host))

    def _slot_freed(self, host: str) -> None:
        held = self._held.get(host)
        if held is not None:
            held.data.in_flight = max(0, held.data.in_flight - 1)
        self._wake_downloaders += 1

    def _save_politeness(self, cur: Cursor, host: HostData) -> None:
        held = self._held.get(host.host)
        if held is None:
            return
        held.data.crawl_delay = host.crawl_delay
        held.data.retry_after_until = host.retry_after_until
        held.data.next_fetch_at = max(held.data.next_fetch_at, host.next_fetch_at)

    def _save_held(self, cur: Cursor, held: _HeldHost) -> None:
        """Write a held host's politeness back, for whoever holds it next."""
        data, now = held.data, self._now()
        cur.execute(
            "UPDATE hosts SET crawl_delay = %s, "
            "retry_after_until = extract(epoch FROM clock_timestamp()) + %s, "
            "next_fetch_at = greatest(next_fetch_at, extract(epoch FROM clock_timestamp()) + %s) "
            "WHERE host = %s",
            (data.crawl_delay, data.retry_after_until - now, data.next_fetch_at - now,
             data.host),
        )  # fmt: skip

    @retry_conflicts
    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._reading(one_statement=True) as cur:
            cur.execute(self._sql(query), params)
            return list(cur.fetchall())

    # -- claiming work ---------------------------------------------------------------
    @retry_conflicts
    def take_robots(self) -> HostData | None:
        if not self._robots_pending or self.read_only:
            return None  # a hint, refreshed with the statistics snapshot
        with self._atomic() as cur:
            now = self._clock(cur)
            cur.execute(
                "UPDATE hosts SET robots_state = 'fetching', robots_owner = %s, "
                "next_fetch_at = %s + crawl_delay "
                "WHERE host = (SELECT host FROM hosts WHERE robots_state = 'pending' "
                "AND next_fetch_at <= %s LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING {HOST_COLUMNS}",
                (self.owner, now, now),
            )
            row = cur.fetchone()
            if row is None:
                cur.execute("SELECT count(*) FROM hosts WHERE robots_state = 'pending'")
                self._robots_pending = int((cur.fetchone() or (0,))[0])
                return None
            return host_from_row(row)

    @retry_conflicts
    def hosts(self) -> list[HostData]:
        with self._reading(one_statement=True) as cur:
            cur.execute(f"SELECT {HOST_COLUMNS} FROM hosts ORDER BY host")
            return [host_from_row(row) for row in cur.fetchall()]

    @retry_conflicts
    def host(self, host: str) -> HostData | None:
        with self._reading(one_statement=True) as cur:
            cur.execute(f"SELECT {HOST_COLUMNS} FROM hosts WHERE host = %s", (host,))
            row = cur.fetchone()
            return host_from_row(row) if row is not None else None

    def _due_in(self) -> float:
        # The soonest held host due (a crawl delay of 5 ms waited out the look for a host
        # to lease instead, up to 0.05 s: the PostgreSQL docs took 54 s instead of 6),
        # or that look, whichever comes first.
        return min(super()._due_in(), max(0.001, min(0.05, self._next_try - time.monotonic())))

    @retry_conflicts
    def take_for_download(self) -> PageData | None:
        if self.read_only or self._pending_bytes > self.max_pending_bytes:
            return None
        with self._lock:
            if len(self._downloaded) + len(self._parsing) >= self.max_pending_pages:
                return None  # the parsers of this process are behind
            if self._below_share() and time.monotonic() >= self._next_try:
                # Its threads may all be busy with its hosts, and never find none due.
                self._next_try = time.monotonic() + self._lease_look
                if self._lease_host():
                    self._lease_look = LEASE_LOOK_S[0]
            page = self._take_from_held()
            if page is not None:
                return page
            if time.monotonic() < self._next_try:
                return None
            self._next_try = time.monotonic() + LEASE_LOOK_S[0]
            if self._lease_host():
                self._lease_look = LEASE_LOOK_S[0]
                return self._take_from_held()
            return None

    def _take_from_held(self) -> PageData | None:
        """A due page of a host this worker holds (lock held), marked running."""
        now = self._now()
        self._start_due_count()
        names = list(self._held)
        if not names:
            return None
        self._rotation = (self._rotation + 1) % len(names)
        for name in names[self._rotation :] + names[: self._rotation]:
            held = self._held[name]
            data = held.data
            if held.draining:
                if held.busy <= 0:
                    self._release_host(held)
                    self._handed_over[name] = time.monotonic() + 2 * self.reap_interval
                continue
            if data.in_flight >= data.max_downloads_at_time:
                continue
            if self._held_back(data, now):
                continue
            busy = [level for level, n in held.levels.items() if n > 0]
            if not held.queue and not held.exhausted and not held.dry:
                self._claim_batch(held, busy)
            if not held.queue:
                if held.exhausted and held.busy <= 0:
                    self._release_host(held)
                continue
            page = held.queue[0]
            if not breadth_first_allows(page.level, busy):
                continue
            taken = self._mark_running(page)  # else reaped meanwhile (this worker looked dead)
            held.queue.popleft()  # committed: a conflict leaves it queued, for the retry
            if not taken:
                continue
            held.levels[page.level] += 1
            held.busy += 1
            data.in_flight += 1
            data.next_fetch_at = now + data.crawl_delay
            page.state = PageState.RUNNING
            self._handed[page.id] = page
            return replace(page)
        return None

    def _mark_running(self, page: PageData) -> bool:
        """Mark a queued page running and this worker's, and count it, in one statement
        and one round trip (it is the crawl's most frequent write): whether it was
        still waiting (another worker may have taken the host over if this one looked
        dead, but then this connection is gone, and this write with it)."""
        if self._conn is None:
            raise StateError("the DataManager is not open")
        with self._storage_errors(), self._conn.cursor() as cur:
            # Autocommit: the statement is its own transaction.
            cur.execute(
                "WITH taken AS (UPDATE pages SET state = 'running', owner = %s WHERE id = %s "
                "AND state = 'waiting' RETURNING host) INSERT INTO counts SELECT host, key, n "
                "FROM taken, "
                "(VALUES ('state:running', 1), ('state:waiting', -1)) AS moved (key, n) "
                "ON CONFLICT (host, key) DO UPDATE SET n = counts.n + excluded.n",
                (self.owner, page.id),
            )
            return cur.rowcount > 0

    def _claim_batch(self, held: _HeldHost, busy: Sequence[int]) -> None:
        """Read the next waiting pages of a held host, in one round trip, into its queue.

        Nothing is written: the host's lease already makes its waiting pages this
        worker's, since only the host's holder hands them out. (They were marked with
        an owner once; a dead worker's reclaim then rewrote every page it had queued,
        2,000 rows in 170 ms at a million pages, and every page was written once more.)
        The queue is read only when it is empty, so every page in it is still waiting.
        """
        limit = min(busy) + 1 if busy else 1 << 30
        with self._transaction() as cur:
            cur.execute(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = %s AND state = 'waiting' "
                "AND level <= %s ORDER BY level, id LIMIT %s",
                (held.data.host, limit, self.batch_size),
            )
            pages = [page_from_row(row) for row in cur.fetchall()]
        held.queue.extend(pages)
        held.exhausted = not pages and not busy
        held.dry = not pages

    def _threads_wanted_here(self) -> int:
        """The downloading threads this worker's hosts will keep busy (lock held)."""
        return sum(map(_threads_wanted, self._held.values()))

    def _below_share(self) -> bool:
        """Whether this worker holds fewer hosts than its share of those with work (and
        than its threads: one worker of many hosts holds a host per thread at most)."""
        return len(self._held) < min(self._share, self.download_slots)

    def _lease_host(self) -> bool:
        """Lease one more host with waiting pages, while this worker has slots to fill."""
        # Below its share, even if the threads are spoken for: a host that waits for a
        # worker to be done with others starts late and ends the crawl alone at its
        # limit (8 hosts for 2 workers held 3 each, and two waited 2.4 s).
        if not self._below_share() and (self._threads_wanted_here() >= self.download_slots):
            return False
        if len(self._held) >= self.hosts_per_thread * self.download_slots:
            return False  # polite hosts need no thread between requests, but memory
        # A host this worker just handed over is left to the others for a while.
        now = time.monotonic()
        handed_over = [host for host, until in self._handed_over.items() if until > now]
        with self._transaction() as cur:
            cur.execute(
                "UPDATE hosts SET owner = %s WHERE host = (SELECT host FROM hosts h "
                "WHERE owner = '' AND robots_state = 'ready' AND host <> ALL(%s) "
                "AND EXISTS (SELECT 1 FROM pages p WHERE p.host = h.host AND p.state = 'waiting') "
                "ORDER BY next_fetch_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING {HOST_COLUMNS}, budget_hit, "
                "next_fetch_at - extract(epoch FROM clock_timestamp()), "
                "retry_after_until - extract(epoch FROM clock_timestamp())",
                (self.owner, handed_over),
            )
            row = cur.fetchone()
            if row is None:
                if not self._robots_pending:
                    # Every host is known and held: look again less often, up to 0.1 s
                    # (a transaction each time), until one is leased again.
                    self._lease_look = min(LEASE_LOOK_S[1], 2 * self._lease_look)
                    self._next_try = time.monotonic() + self._lease_look
                return False
            data = host_from_row(row[:-3])
            # From the database's clock to this process's (see _now).
            now = self._now()
            data.next_fetch_at, data.retry_after_until = now + row[-2], now + row[-1]
            cur.execute(
                "SELECT coalesce(sum(n), 0) FROM counts WHERE host = %s AND key LIKE 'state:%%'",
                (data.host,),
            )
            admitted = int((cur.fetchone() or (0,))[0])
            if not self._deep_links:
                cur.execute("SELECT EXISTS (SELECT 1 FROM deep_links WHERE host = %s)",
                            (data.host,))  # fmt: skip
                self._deep_links = bool((cur.fetchone() or (False,))[0])
        data.in_flight = 0
        self._held[data.host] = _HeldHost(data, admitted, budget_hit=bool(row[-3]))
        self._publish_spare()
        return True

    def _release_host(self, held: _HeldHost) -> None:
        """Give a host back: nothing of it is in progress here (its claimed pages, if
        it is handed over, go back to the queue)."""
        with self._transaction() as cur:
            self._save_held(cur, held)
            cur.execute(
                "UPDATE hosts SET owner = '' WHERE host = %s AND owner = %s",
                (held.data.host, self.owner),
            )
        del self._held[held.data.host]
        self._publish_spare()
        self._wake_downloaders = 1 << 16
        self._stats = None  # the site may be over: the finisher should see it now

    @retry_conflicts
    def mark_request_sent(self, host: str) -> None:
        with self._lock:
            held = self._held.get(host)
            if held is not None:
                if held.data.crawl_delay > 0:
                    held.data.next_fetch_at = max(
                        held.data.next_fetch_at, self._now() + held.data.crawl_delay
                    )
                return
            # robots.txt, fetched before anyone holds the host: the delay counts in its row.
            with self._transaction() as cur:
                cur.execute(
                    "UPDATE hosts SET next_fetch_at = greatest(next_fetch_at, "
                    "extract(epoch FROM clock_timestamp()) + crawl_delay) "
                    "WHERE host = %s AND crawl_delay > 0",
                    (host,),
                )

    # -- reading ---------------------------------------------------------
    @retry_conflicts
    def statistics(self) -> CrawlStats:
        if time.monotonic() - self._reaped_at >= self.reap_interval:
            with self._lock:
                self._reap_dead()
            self._balance()
        stats = self._stats
        idle = not self._held and not self._handed and not self._downloaded and not self._parsing
        max_age = self.idle_stats_max_age if idle else self.stats_max_age
        if stats is not None and time.monotonic() - self._stats_at < max_age:
            return stats
        # The counters on a pooled connection, without the lock: status, the live view
        # and the finisher never wait behind this process's writes.
        with self._reading() as cur:
            # One snapshot for both queries: the finisher must not see a page
            # leave the queue without seeing where it went.
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cur.execute(f"SELECT {HOST_COLUMNS}, budget_hit FROM hosts ORDER BY started_at, host")
            host_rows = cur.fetchall()
            cur.execute("SELECT host, key, n FROM counts WHERE n <> 0")
            count_rows = cur.fetchall()
        self._analyze_if_grown(sum(n for _h, key, n in count_rows if key.startswith("state:")))
        counts: dict[str, StateCounts] = {}
        for host, key, n in count_rows:
            c = counts.setdefault(host, StateCounts({}, {}))
            kind, _, name = key.partition(":")
            if kind == "state":
                c.by_state[name] = int(n)
            elif kind == "error":
                c.errors[name] = int(n)
            elif kind in ("duplicates", "aliases", "bytes"):
                setattr(c, kind, int(n))
        with self._lock:  # what lives in this process's memory, as of now
            parsing_here: Counter[str] = Counter(p.host for p, _ in self._parsing.values())
            sites = []
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
                held = self._held.get(data.host)
                if held is not None:
                    data = replace(held.data, stop_reason=data.stop_reason,
                                   finished_at=data.finished_at)  # fmt: skip
                sites.append((data, c, parsing))
            self._robots_pending = pending
            self._stats = snapshot(sites, self.clock())
            self._stats_at = time.monotonic()
            return self._stats

    def _analyze_if_grown(self, pages: int) -> None:
        """ANALYZE the crawl's tables each time they have doubled (what autovacuum does
        once it comes round, which a crawl of a few minutes may never see).

        A worker's statements are prepared, and planned once for their first five runs,
        while the tables are small: without statistics a join of the known links then
        scanned every page, and the duplicate check every page of the site, for each
        page stored; the crawl grew quadratically (measured: 0.5 → 2.4 ms of server
        CPU a page between 1,000 and 3,000 pages). ANALYZE gives the planner the sizes
        and makes every session plan its statements again. One worker runs it; it
        blocks no reads or writes, and runs in a thread of its own, since it takes a
        while on a large crawl (0.75 s at 250,000 pages): no statistics() waits for it.
        """
        if self.read_only or pages < self._analyze_at:
            return
        if self._analyzer is not None and self._analyzer.is_alive():
            return
        first, self._analyze_at = self._analyze_at == ANALYZE_FIRST, 2 * pages
        if first and pages >= 2 * ANALYZE_FIRST:
            return  # joining (or resuming) a crawl analyzed as it grew: from its size on
        self._analyzer = threading.Thread(target=self._analyze, name="rccrawler-analyze")
        self._analyzer.start()

    def _analyze(self) -> None:
        tables = ["pages", "urls", "arcs", "skipped", "deep_links", *self.task_tables]
        try:
            with self._reading() as cur:
                cur.execute(
                    "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (f"{self.schema}:analyze",)
                )
                if (cur.fetchone() or (False,))[0]:
                    cur.execute(f"ANALYZE {', '.join(tables)}")
        except (Conflict, StateError) as exc:  # the crawl goes on with the plans it has
            logger.info("ANALYZE of the crawl's tables failed: %s", exc)

    def set_stop_reason(self, host: str, reason: str) -> None:
        self._stats = None
        super().set_stop_reason(host, reason)

    @contextlib.contextmanager
    def elected(self, role: str) -> Iterator[bool]:
        """The first worker to ask, of all workers of the crawl, holds ``role`` until it
        closes; once its body has ended, ``role`` is done for the crawl as it stands, and
        a worker that asks after the holder closed is not elected again. (The lock alone
        let a slower worker, finding the crawl over after the first had closed, write
        every file once more.) If the holder dies in the body, the next to ask does it."""
        if self.read_only:
            yield True
            return
        elected, done_as_of = self._elect(role)
        yield elected
        if elected:
            self._mark_done(role, done_as_of)

    @retry_conflicts
    def _elect(self, role: str) -> tuple[bool, str]:
        """(whether this worker holds ``role`` and has not done it for the crawl as it
        stands, the crawl as it stands: its counters by host and state)."""
        with self._atomic() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (f"{self.schema}:{role}",))
            if not (cur.fetchone() or (False,))[0]:
                return False, ""
            cur.execute(
                "SELECT coalesce(string_agg(host || ' ' || key || ' ' || n, ',' "
                "ORDER BY host, key), '') FROM counts WHERE key LIKE 'state:%%' AND n <> 0"
            )
            as_of = str((cur.fetchone() or ("",))[0])
            cur.execute("SELECT value FROM meta WHERE key = %s", (f"done:{role}",))
            row = cur.fetchone()
            return row is None or row[0] != as_of, as_of

    @retry_conflicts
    def _mark_done(self, role: str, as_of: str) -> None:
        with self._atomic() as cur:
            _set_meta(cur, f"done:{role}", as_of)
