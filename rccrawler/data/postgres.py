"""The PostgreSQL dialect: one crawl shared by any number of processes (SPEC §9).

The statements and the crawl rules live in ``sql.py`` and ``policy.py``, and how the
workers divide the crawl (host leases, balancing, liveness, election) in
``coordination.py``. This module is how one worker talks to the server: its
connections (one for writes, held for its life, and a small pool for reads), a
transaction in as few round trips as it can (:class:`DeferredWrites`), the types and
the tables only a shared crawl needs, the database's clock, and the ``counts`` table
kept in the same transactions, so ``statistics()`` costs O(hosts), never a scan of
the pages.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import re
import select
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Unpack

import psycopg
from psycopg import errors, sql
from psycopg_pool import ConnectionPool, PoolTimeout

from rccrawler.data.coordination import (
    STORAGE_WAIT_S,
    WORKERS_SCHEMA,
    WRITTEN_KEY,
    CoordinatedDataManager,
    table_state,
)
from rccrawler.data.sql import (
    HOST_COLUMNS,
    INSERT_VALUES,
    SET_META,
    Conflict,
    Cursor,
    StorageLost,
    StorageOptions,
    UrlRowsAhead,
    host_from_row,
    retry_conflicts,
    state_error,
    worker_key,
)
from rccrawler.data.stats import StateCounts, snapshot
from rccrawler.exceptions import StateError
from rccrawler.records import CrawlStats, HostData, PageData, PageId, PageState, RobotsState

if TYPE_CHECKING:
    from rccrawler.data.tables import TaskTable

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]

CONFLICTS = (errors.SerializationFailure, errors.DeadlockDetected)
"""SQLSTATE 40001 and 40P01: the server rolled a transaction back to let others go on;
the same transaction run again succeeds (see :func:`retry_conflicts`)."""

LOST = (
    errors.AdminShutdown, errors.CrashShutdown, errors.CannotConnectNow,
    errors.ConnectionException,
)  # fmt: skip
"""What the server says as it goes away (57P01-57P03: a shutdown or restart, class 08);
an error the client raises itself, with no SQLSTATE, is a lost connection too."""

RECONNECT_BACKOFF_S = (0.05, 1.0)
"""First and longest wait between two tries to reach a lost storage (doubling)."""
RECONNECT_TIMEOUT_S = 5
"""Seconds one try to connect, or to take back the liveness lock, may take."""

TCP_OPTIONS: dict[str, Any] = {
    "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}  # fmt: skip
"""libpq's TCP options on every connection of a worker: a server gone without closing
them (a failover, a network cut, a host powered off) is found out within about 25 s
when the connection is idle (keepalive probes) and 30 s when a statement's data is not
acknowledged (``tcp_user_timeout``, ms), where a statement would otherwise wait for
it forever; the storage is then waited out as any lost one (``storage_wait_s``)."""


class _QuietBrokenConnections(logging.Filter):
    """The pool's warnings for each broken connection it drops and each failed try to
    connect: a lost storage is one line of this module's as it goes and one as it is
    back (see PostgresDataManager._wait_for_storage)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("discarding broken connection", "error connecting"))


logging.getLogger("psycopg.pool").addFilter(_QuietBrokenConnections())


def connection_lost(exc: BaseException) -> bool:
    """Whether a psycopg error means the connection is gone (not the statement wrong)."""
    if isinstance(exc, (PoolTimeout, *LOST)):
        return True
    return isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None


DEFAULT_PARTITIONS = 8
"""Hash partitions of a task table declared with ``partition_by`` (search postings)."""

SHARED_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS page_ids;
CREATE TABLE IF NOT EXISTS counts (
    host TEXT NOT NULL, key TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (host, key)
);
CREATE INDEX IF NOT EXISTS skipped_order ON skipped (host, url COLLATE "C")
    INCLUDE (reason, found_on);
CREATE INDEX IF NOT EXISTS pages_host ON pages (host, id);
"""
"""What only a shared crawl needs (besides its workers, :data:`WORKERS_SCHEMA`): ids from
a sequence, the counters, and
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

ANALYZE_FIRST = 200
"""Pages in the crawl when its tables are first analyzed (then each time they double)."""

OUTPUT_TABLES = ("pages", "urls", "arcs", "skipped")
"""The crawl's tables the output's queries join (see ``prepare_output``)."""

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
    listed = [c for c, t in zip(names, tokens, strict=True) if t == "%s"]
    data = _column_arrays(rows, [types[c] for c in listed])
    text = (
        f"INSERT INTO {name} ({', '.join(names)}) SELECT {', '.join(select)} "
        f"FROM unnest({', '.join(arrays)}) AS r({', '.join(f'c{n}' for n in range(len(arrays)))})"
        f"{tail}"
    )
    # The rows it adds by id or page id: no later write of its group may change them.
    keys: frozenset[tuple[str, int]] = frozenset()
    key = next((c for c in ("id", "page_id") if c in names), None)
    if key is not None:
        token = tokens[names.index(key)]
        if token == "%s":
            at = listed.index(key)
            keys = frozenset((name, row[at]) for row in rows)
        elif _INTEGER.fullmatch(token):
            keys = frozenset({(name, int(token))})
    return _Write(text, scalars + data, name, "insert", arrays=len(data), keys=keys)


def _column_arrays(rows: Sequence[Sequence[Any]], types: Sequence[str]) -> list[Any]:
    """Rows as one array per column, each written as PostgreSQL's array text where its
    type is one :func:`array_text` knows (else a list, which psycopg writes)."""
    return [
        array_text(column, kind)
        for column, kind in zip(zip(*rows, strict=True), types, strict=True)
    ]


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_ELEMENT_TEXT: dict[str, Callable[[Any], str]] = {
    "bigint": lambda v: str(int(v)),
    "integer": lambda v: str(int(v)),
    "double precision": lambda v: repr(float(v)),
    "boolean": lambda v: "t" if v else "f",
    "text": _quoted,
    "bytea": lambda v: _quoted("\\x" + bytes(v).hex()),
}
"""How a value of each type is written in an array's text (``{1,2}``, ``{"a","b"}``)."""


def array_text(values: Sequence[Any], kind: str) -> str | list[Any]:
    """``values`` as the text of a PostgreSQL array of ``kind`` (``{"a",NULL,"b\\"c"}``,
    the rules of the manual's "Array Value Input": every element quoted, backslash and
    double quote escaped), or as a list when the type is another.

    psycopg writes a list one element at a time in Python: for a page's arcs and links
    (300 values) that took 290-430 µs of the worker's CPU a statement, the text 105-120
    (measured on one connection, 500 statements each). The parameter's cast
    (``%s::bigint[]``) reads the text as the array.
    """
    element = _ELEMENT_TEXT.get(kind)
    if element is None:
        return list(values)
    if kind == "bigint" and None not in values:
        return "{" + ",".join(map(str, map(int, values))) + "}"
    return "{" + ",".join("NULL" if v is None else element(v) for v in values) + "}"


def _joined_arrays(parts: Sequence[Any]) -> Any:
    """Arrays (texts of :func:`array_text`, or lists) of several writes, end to end."""
    if all(isinstance(part, str) for part in parts):
        return "{" + ",".join(part[1:-1] for part in parts if part != "{}") + "}"
    return [v for part in parts for v in part]


_SET_ITEM = re.compile(r"(\w+) = (%s|NULL|TRUE|FALSE|-?\d+|'[^']*')")
_UPDATE_BY_ID = re.compile(r"UPDATE (\w+) SET (.*) WHERE id = %s", re.S)


@functools.lru_cache(maxsize=64)
def _update_by_ids(
    text: str, table_types: tuple[tuple[str, str], ...]
) -> tuple[str, tuple[str, ...]] | None:
    """``UPDATE t SET a = %s, b = 'x' WHERE id = %s`` as one statement for many rows,
    each column's values (and the ids, last) an array: ``UPDATE t SET a = v.c0, b = 'x'
    FROM unnest(%s::text[], %s::bigint[]) AS v (c0, c1) WHERE t.id = v.c1``, with the
    arrays' types; None when an assignment is not a value or a literal."""
    found = _UPDATE_BY_ID.fullmatch(text)
    if found is None:
        return None
    table, assignments = found.groups()
    types = dict(table_types)
    sets: list[str] = []
    kinds: list[str] = []
    for item in assignments.split(", "):
        matched = _SET_ITEM.fullmatch(item)
        if matched is None or matched.group(1) not in types:
            return None
        column, value = matched.groups()
        if value == "%s":
            sets.append(f"{column} = v.c{len(kinds)}")
            kinds.append(types[column])
        else:
            sets.append(f"{column} = {value}")
    kinds.append(types["id"])
    arrays = ", ".join(f"%s::{kind}[]" for kind in kinds)
    names = ", ".join(f"c{n}" for n in range(len(kinds)))
    text = (
        f"UPDATE {table} AS t SET {', '.join(sets)} FROM unnest({arrays}) "
        f"AS v ({names}) WHERE t.id = v.c{len(kinds) - 1}"
    )
    return text, tuple(kinds)


def _merged(writes: Sequence[_Write], columns: Columns) -> list[_Write]:
    """Writes of several transactions as one write per text, where they can be: unnest
    INSERTs of one text and the same scalars have their arrays put end to end, UPDATEs
    by id of one text become one UPDATE from arrays (see :func:`_update_by_ids`). The
    caller has made sure that no two of them change one row (see WriteBehind.send)."""
    alike: dict[tuple[str, str], list[_Write]] = {}
    for write in writes:
        if write.arrays:
            shape = repr(write.params[: len(write.params) - write.arrays])
        elif write.kind == "update":
            shape = "update"
        else:
            shape = str(len(alike))  # one of its own
        alike.setdefault((write.text, shape), []).append(write)
    merged: list[_Write] = []
    for (text, _shape), group in sorted(alike.items()):
        first = group[0]
        if len(group) == 1:
            merged.append(first)
        elif first.arrays:
            scalars = first.params[: len(first.params) - first.arrays]
            arrays = [
                _joined_arrays([write.params[len(scalars) + n] for write in group])
                for n in range(first.arrays)
            ]
            merged.append(replace(first, params=[*scalars, *arrays]))
        else:
            update = _update_by_ids(text, tuple(columns.get(first.table, ())))
            if update is None:
                merged.extend(group)
                continue
            statement, kinds = update
            arrays = _column_arrays([write.params for write in group], kinds)
            merged.append(_Write(statement, list(arrays), first.table, "update"))
    return merged


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
    arrays: int = 0
    """Its last parameters are this many arrays, one per column (an unnest INSERT)."""
    keys: frozenset[tuple[str, int]] = frozenset()
    """(table, id) of the rows it changes by id or page id, where it says (an UPDATE or
    DELETE by id, an INSERT of pages or of a page's task rows)."""

    def clashes(self, other: _Write) -> bool:
        """Whether the two cannot be one statement: they change one table, and are not
        INSERTs beside an UPDATE of a row by id (which no INSERT could be)."""
        return self.table == other.table and {self.kind, other.kind} != {"insert", "update"}


class DeferredWrites:
    """A write transaction in as few round trips as it can (none for most of them).

    On an autocommit connection: a plain read before any write runs by itself, as it
    would in the transaction (READ COMMITTED gives each statement its own snapshot);
    writes that return nothing (:data:`_DEFERRABLE`) wait, and go together as one
    statement (``WITH w0 AS (…), w1 AS (…) …``), itself atomic, so a page's stored
    parse or download needs no BEGIN and COMMIT at all; a transaction that has only
    such writes left at its end hands them to the worker's :class:`WriteBehind`
    instead of sending them. ``BEGIN`` is sent only when a statement has to run after
    a write or takes a lock, or the writes are more than one statement. The statements
    of one ``WITH`` share one snapshot and cannot see each other's rows, so two of
    them never change one table, except INSERTs beside an UPDATE by id (new pages and
    the parsed page): a write that would starts the next statement (a task's rows of a
    page, deleted, then inserted). The connection is asked for (``connect``) only
    when a statement is sent. A dialect-neutral caller sees a DB-API cursor.

    Measured on the scale-out crawl: 14 round trips a page became 5, and the worker's
    and the server's CPU per page fell with them.
    """

    def __init__(self, connect: Callable[[], psycopg.Cursor[Row]], columns: Columns) -> None:
        self.connect = connect
        self.columns = columns
        self.begun = False
        self.pending: list[_Write] = []
        """The writes not sent yet."""
        self.earlier: list[list[_Write]] = []
        """Writes not sent yet that must go before ``pending`` (it has one that clashes
        with them), a statement each."""
        self._cursor: psycopg.Cursor[Row] | None = None

    @property
    def cursor(self) -> psycopg.Cursor[Row]:
        if self._cursor is None:
            self._cursor = self.connect()
        return self._cursor

    @property
    def rowcount(self) -> int:
        if self.pending or self.earlier:
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
            table = found.group(kind)
            # An upsert may change any row of its table: one a statement.
            key = params[-1] if kind in ("update", "delete") else -1
            keys = frozenset({(table, key)}) if kind != "insert" else frozenset()
            self._defer(_Write(text, list(params), table, kind, keys=keys))
            return
        if self.pending or self.earlier:
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
        if self.pending or self.earlier:
            self._send(alone_last=False)
        if not self.begun:
            self._begin()
        self.cursor.executemany(query, rows)

    def _defer(self, write: _Write) -> None:
        if any(write.clashes(other) for other in self.pending):
            # A statement of its own, after these (nothing is sent yet: a transaction
            # that only writes is sent whole, later; see unsent()).
            self.earlier.append(self.pending)
            self.pending = []
        self.pending.append(write)

    def _begin(self) -> None:
        self.cursor.execute("BEGIN")
        self.begun = True

    def _send(self, *, alone_last: bool) -> None:
        """Send the pending writes (in a transaction, since more statements follow)."""
        if not self.begun:
            self._begin()
        earlier, self.earlier = self.earlier, []
        for writes in earlier:
            self.cursor.execute(*together(writes))
        pending, self.pending = self.pending, []
        if not pending:
            return
        if alone_last and len(pending) > 1:
            self.cursor.execute(*together(pending[:-1]))
            pending = pending[-1:]
        self.cursor.execute(*together(pending))

    def unsent(self) -> list[list[_Write]]:
        """The writes of a transaction that sent none, taken out to be sent later, in
        order, a statement each; none when it must commit now."""
        if self.begun:
            return []
        batches = [writes for writes in (*self.earlier, self.pending) if writes]
        self.earlier, self.pending = [], []
        return batches

    def commit(self) -> None:
        if self.earlier:
            self._send(alone_last=False)  # several statements: BEGIN and COMMIT
        elif self.pending:
            # One statement is atomic by itself: no BEGIN and COMMIT around it.
            pending, self.pending = self.pending, []
            self.cursor.execute(*together(pending))
        if self.begun:
            self.cursor.execute("COMMIT")
            self.begun = False

    def rollback(self) -> None:
        self.pending, self.earlier = [], []
        if self.begun:
            self.begun = False
            with contextlib.suppress(psycopg.Error):
                self.cursor.execute("ROLLBACK")

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()


def together(writes: Sequence[_Write]) -> tuple[str, list[Any]]:
    """Writes as one statement, ``WITH w0 AS (…), … last``, with its parameters."""
    *first, last = writes
    text = "".join(f"w{n} AS ({w.text}), " for n, w in enumerate(first))
    text = f"WITH {text[:-2]} {last.text}" if first else last.text
    return text, [v for w in writes for v in w.params]


def counts_upsert(deltas: Mapping[tuple[str, str], int]) -> tuple[str, list[Any]] | None:
    """The statement that adds ``deltas`` ((host, key) → change) to the ``counts`` rows:
    one statement, rows in sorted order (two workers never lock them in opposite
    orders), not executemany, whose pipeline costs more than the few rows here."""
    rows = [(host, key, n) for (host, key), n in sorted(deltas.items()) if n]
    if not rows:
        return None
    hosts, keys, changes = zip(*rows, strict=True)
    return (
        "INSERT INTO counts SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
        "ON CONFLICT (host, key) DO UPDATE SET n = counts.n + excluded.n",
        [list(hosts), list(keys), list(changes)],
    )


LINGER_S = 0.01
"""Seconds the writer lets transactions gather before it sends them (nothing waits for
them meanwhile): each send costs the worker's Python about 0.5 ms whatever it holds,
and sent as they came the PostgreSQL docs' pages went 1.8 to a send."""


@dataclass(slots=True)
class _Unsent:
    """A transaction done in memory whose writes wait for the writer (see WriteBehind)."""

    number: int
    batches: list[list[_Write]]
    """Its writes, a statement each, in order (see DeferredWrites.unsent)."""
    deltas: Counter[tuple[str, str]]


class WriteBehind:
    """The writes of a worker's transactions, sent after their calls returned, several
    transactions in one round trip (a group commit).

    A transaction that would send only writes at its end (a page's stored parse or
    download: :meth:`DeferredWrites.unsent`) is done once its memory changes are made;
    its writes wait here, in order, and the worker's writer thread sends all that wait
    in one pipeline, one transaction, as soon as the last send is over. So no thread
    waits on the server to store a page, and the lock of the worker's memory is never
    held over a round trip for it. Every other statement on the write connection
    (a read, a transaction that needs BEGIN) first sends what waits here, on the same
    connection, so it sees every earlier write, as it did when each was sent at once.

    Measured (one worker, the PostgreSQL docs): the worker's lock had been held 1.3 s
    of a 3.0 s crawl, 1.2 s of it waiting on the server for one round trip a page.

    A page whose writes wait here is in flight: a ``kill -9`` fetches it again. Each
    send also writes its last transaction's number (``meta``, ``written:<owner>``): a
    send cut off by a lost connection is known, once the storage is back, to have
    committed or not, and is sent again only if not.

    Args:
        limit: transactions waiting at most; a thread that would add one more waits
            (the server is slower than the crawl, or away: :meth:`wait_for_room`).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        self.ready = threading.Condition(self.lock)
        self.waiting: deque[_Unsent] = deque()
        self.numbered = 0
        self.sent_up_to = 0
        """The number of the last transaction known to be committed."""
        self.in_doubt = False
        """A send's connection was lost before it was heard of: it may have committed."""
        self.failed: StateError | None = None
        self.active = False
        """Writes are taken (after the worker joined the crawl; never read-only)."""
        self.closing = False

    def add(self, batches: list[list[_Write]], deltas: Counter[tuple[str, str]]) -> None:
        """Queue a transaction's writes (:meth:`DeferredWrites.unsent`) and counter
        changes, in the order of the calls."""
        with self.lock:
            if self.failed is not None:
                raise self.failed
            self.numbered += 1
            self.waiting.append(_Unsent(self.numbered, batches, deltas))
            if len(self.waiting) == 1 or len(self.waiting) >= self.limit // 2:
                self.ready.notify()

    def wait_for_room(self) -> None:
        """Before a write: wait while ``limit`` transactions wait to be sent."""
        with self.lock:
            while len(self.waiting) >= self.limit and self.failed is None:
                self.room.wait()
            if self.failed is not None:
                raise self.failed

    def wait_for_work(self) -> bool:
        """The writer waits for writes, then lets more come for up to :data:`LINGER_S`
        (or until half the limit waits): False once it should stop (closing, all sent)."""
        with self.lock:
            while self.failed is None:
                if not self.waiting:
                    if self.closing:
                        return False
                    self.ready.wait()
                    continue
                self.ready.wait_for(
                    lambda: len(self.waiting) >= self.limit // 2 or self.closing, LINGER_S
                )
                if self.waiting:  # else another thread sent them meanwhile
                    return True
            return False

    def send(self, conn: psycopg.Connection[Row], mark: str, columns: Columns) -> None:
        """Send what waits, in one round trip and one transaction (the connection is
        this caller's). ``mark`` is the ``meta`` key of the last number sent."""
        with self.lock:
            if self.failed is not None:
                raise self.failed
            group = list(self.waiting)
        if not group:
            return
        if self.in_doubt:
            row = conn.execute("SELECT value FROM meta WHERE key = %s", (mark,)).fetchone()
            self._sent(int(row[0]) if row is not None else 0)
            self.in_doubt = False
            group = [unsent for unsent in group if unsent.number > self.sent_up_to]
            if not group:
                return
        statements = [together(_merged(part, columns)) for part in self._parts(group, mark)]
        self.in_doubt = True
        if len(statements) == 1:
            conn.execute(*statements[0])  # one statement is atomic by itself
        else:
            # One pipeline, one Sync: its statements are one transaction (the server
            # rolls all of them back if one fails), in one round trip.
            with conn.pipeline(), conn.cursor() as cur:
                for statement in statements:
                    cur.execute(*statement)
        self.in_doubt = False
        self._sent(group[-1].number)

    @staticmethod
    def _parts(group: Sequence[_Unsent], mark: str) -> list[list[_Write]]:
        """The writes of a group as statements (one, unless a transaction changes a row
        an earlier one of the group did, or has writes that must follow its others: one
        statement's writes cannot see each other's), the counters and the mark of the
        last number in the last one."""
        parts: list[list[_Write]] = [[]]
        changed: set[tuple[str, int]] = set()
        deltas: Counter[tuple[str, str]] = Counter()
        for unsent in group:
            for after, batch in enumerate(unsent.batches):
                keys = set().union(*(write.keys for write in batch))
                if after or keys & changed:
                    parts.append([])
                    changed.clear()
                parts[-1].extend(batch)
                changed |= keys
            deltas.update(unsent.deltas)
        counts = counts_upsert(deltas)
        if counts is not None:
            parts[-1].append(_Write(counts[0], counts[1], "counts", "upsert"))
        parts[-1].append(
            _Write(placeholders(SET_META), [mark, str(group[-1].number)], "meta", "upsert")
        )
        return parts

    def _sent(self, number: int) -> None:
        with self.lock:
            self.sent_up_to = max(self.sent_up_to, number)
            while self.waiting and self.waiting[0].number <= number:
                self.waiting.popleft()
            self.room.notify_all()

    def drop(self) -> None:
        """Forget what waits: the worker was taken for dead and its pages went back to
        the queue (they are fetched again, as after any takeover)."""
        with self.lock:
            self.waiting.clear()
            self.in_doubt = False
            self.sent_up_to = self.numbered = 0
            self.room.notify_all()

    def fail(self, error: StateError) -> None:
        """The writes cannot be sent: every later call raises ``error``."""
        with self.lock:
            self.failed = error
            self.room.notify_all()

    def close(self) -> None:
        with self.lock:
            self.closing = True
            self.ready.notify_all()


def placeholders(query: str) -> str:
    """A statement written with ``?`` (sql.py's) in psycopg's placeholders."""
    return query.replace("?", "%s")


def schema_for(name: str) -> str:
    """The PostgreSQL schema that holds the crawl named ``name``."""
    return "rc_" + hashlib.sha1(name.encode()).hexdigest()[:16]


class PostgresDataManager(CoordinatedDataManager):
    """A DataManager in a PostgreSQL schema, shared by every worker process of a crawl.

    Writes go through one connection guarded by one lock (the threads of a process
    share it; the held hosts in memory change with them), one transaction per method.
    That connection lives as long as the worker and holds its liveness lock. Reads
    that need no memory of this process (the statistics' counters, the stop check,
    the hosts, the unloaders' pages) take a connection of a small pool instead, so
    they never wait behind the crawl's writes. Which hosts and pages this worker
    holds is :class:`CoordinatedDataManager`'s. A downloaded body waits in the memory
    of the process that fetched it, which parses it itself; at most
    ``max_pending_pages`` of them, so a killed worker's pages fetched again stay few.

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
        storage_wait_s: seconds a lost connection is waited out (SPEC §9).
    """

    types: ClassVar[Mapping[str, str]] = {
        "float": "DOUBLE PRECISION", "id": "BIGINT", "int": "BIGINT", "bool": "BOOLEAN",
        "false": "FALSE", "text": "TEXT", "bytes": "BYTEA", "without_rowid": "",
    }  # fmt: skip
    text_order: ClassVar[str] = ' COLLATE "C"'
    shared: ClassVar[bool] = True
    stats_max_age: ClassVar[float] = 0.25
    """Seconds a statistics() snapshot is reused."""
    idle_stats_max_age: ClassVar[float] = 0.05
    """The same, while this worker holds no host and has no page in progress: it then
    waits only on the others, and a finished crawl should end every worker at once (at
    the end of a crawl of 3 workers, the last to see it exited 0.2 s after the first)."""
    stop_poll_s: ClassVar[float] = 1.0
    """Seconds between two looks for a stop request (``rccrawler stop``)."""
    unsent_limit: ClassVar[int] = 64
    """Transactions done in memory whose writes wait to be sent, at most (see
    :class:`WriteBehind`): the pages a ``kill -9`` fetches again besides those in
    progress, and what an outage keeps in memory."""
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
        storage_wait_s: float = STORAGE_WAIT_S,
        **options: Unpack[StorageOptions],
    ) -> None:
        super().__init__(download_slots=download_slots, storage_wait_s=storage_wait_s, **options)
        self.url = url
        self.schema = schema
        self.partitions = partitions
        self._conn: psycopg.Connection[Row] | None = None
        self._columns: Columns = {}
        self._pool: ConnectionPool[psycopg.Connection[Row]] | None = None
        self._deltas: Counter[tuple[str, str]] = Counter()
        """Counter changes of the open transaction, written just before it commits."""
        self._stats: CrawlStats | None = None
        self._stats_at = 0.0
        self._opened_at = 0.0
        """Database clock when this process opened the state: later stop requests are for it."""
        self._stop_checked_at = -1e9
        self._stop_seen = False
        self._analyze_at = ANALYZE_FIRST
        """Pages in the crawl at which to ANALYZE its tables next (see _analyze_if_grown)."""
        self._analyzer: threading.Thread | None = None
        self._storage_lock = threading.Lock()
        """Held by the thread that reconnects; the others wait for it on this lock."""
        self._generation = 0
        """Connections to the storage lost and found again (see StorageLost)."""
        self._gone: StateError | None = None
        """Why the storage is given up on, once it was away longer than storage_wait_s."""
        self._unseen: dict[int, list[Callable[[], None]]] = {}
        """By thread: what the write in flight when the connection went would change in
        memory, had it committed (see _stored_unseen)."""
        self._connection_lock = threading.Lock()
        """Held while the write connection is in use: by a transaction from its first
        statement on, or by the writer sending what was written behind. Taken after
        ``_lock`` (never before it)."""
        self._writes = WriteBehind(self.unsent_limit)
        self._writer: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        """Hears the other workers' hints (see _listen)."""
        self._closing = threading.Event()
        self._wake_listener: tuple[socket.socket, socket.socket] | None = None
        """Written to by close(): the listener, waiting on its connection, ends at once."""

    # -- lifecycle -------------------------------------------------------
    def open(self) -> None:
        try:
            conn = psycopg.connect(self.url, autocommit=True, **TCP_OPTIONS)
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
                        cur.execute((self.schema_sql() + SHARED_SCHEMA + WORKERS_SCHEMA).encode())
            conn.execute(sql.SQL("SET search_path TO {}").format(schema))
            if self.read_only:
                with conn.cursor() as cur:
                    self._check_readable(cur)
            self._columns = self._read_columns(conn)
            self.check_task_layout(
                {name: [column for column, _kind in columns]
                 for name, columns in self._columns.items()}
            )  # fmt: skip
            if not self.read_only:
                self._configure_writer(conn)
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
                kwargs={"autocommit": True, **TCP_OPTIONS}, configure=self._configure_reader,
                num_workers=1, timeout=30, name=f"rccrawler-{self.owner[:8]}",
            )  # fmt: skip
        with self._atomic() as cur:
            self._opened_at = self._clock(cur)
            self._load_deep_links(cur)
            if not self.read_only:
                self._join(cur, self._opened_at)
        if not self.read_only:
            self._writes.active = True
            self._writer = threading.Thread(
                target=self._write_behind, name="rccrawler-writer", daemon=True
            )
            self._writer.start()
            self._wake_listener = socket.socketpair()
            self._listener = threading.Thread(
                target=self._listen, args=(self._wake_listener[0],), name="rccrawler-hints",
                daemon=True,
            )  # fmt: skip
            self._listener.start()

    def _configure_writer(self, conn: psycopg.Connection[Row]) -> None:
        """The write connection holds this worker's liveness lock for its life."""
        self._hold_liveness(conn.cursor())
        # A killed worker loses nothing it committed either way; only a crash of
        # the server itself could lose its last commits (pages fetched again).
        conn.execute("SET synchronous_commit = off")

    # -- a lost storage, waited out (SPEC §9) -------------------------------------------
    def _wait_for_storage(self, lost: StorageLost) -> None:
        """Reconnect after ``lost``, with backoff, for up to ``storage_wait_s``.

        One thread reconnects; the others wait on the same lock and find it done (the
        connection's generation moved on). Meanwhile no new work is taken (see
        :meth:`take_for_download`), and what this worker fetched waits in its threads
        and its parse queue, each of them bounded. Once the time is up, every thread
        that waits gets the StateError, and the crawl exits 2: what was committed is
        consistent, and what this worker held goes back to the queue once the others,
        or a resumed run, see it dead.
        """
        with self._storage_lock:
            if self._gone is not None:
                raise self._gone
            if lost.generation != self._generation:
                return  # another thread reconnected after this loss
            if self._away_since is None:
                self._away_since = time.monotonic()
            deadline = self._away_since + self.storage_wait_s
            pause, longest = RECONNECT_BACKOFF_S
            announced = False
            while True:
                try:
                    replaced = self._reconnect()
                    break
                except (psycopg.Error, PoolTimeout) as exc:
                    if not announced:
                        self._announce_lost(lost)
                        announced = True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._gone = StateError(
                            f"cannot write the crawl state {self.url}: away for more than "
                            f"storage_wait_s ({self.storage_wait_s:g} s): {exc}"
                        )
                        raise self._gone from exc
                    time.sleep(min(pause, left))
                    pause = min(longest, 2 * pause)
            self._generation += 1
            if announced or replaced:
                if not announced:
                    self._announce_lost(lost)
                logger.warning(
                    "storage back after %.1f s: carrying on", time.monotonic() - self._away_since
                )
            else:
                # Only a pooled connection of an outage already waited out (or one the
                # server closed): the pool has dropped it, the storage was never away.
                logger.info("a read connection was lost (%s): the pool replaced it", lost)
            self._away_since = None
            self._stats = None

    def _reconnect(self) -> bool:
        """A new write connection, when the old one is gone, that takes this worker's
        place again (see :meth:`_rejoin`); the read pool drops its broken connections.
        Whether the write connection was replaced. Raises psycopg.Error while the
        server cannot be reached."""
        conn = self._conn
        replaced = conn is not None and (conn.closed or conn.broken)
        if conn is not None and replaced:
            fresh = psycopg.connect(
                self.url, autocommit=True, connect_timeout=RECONNECT_TIMEOUT_S, **TCP_OPTIONS
            )
            try:
                fresh.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
                # The old session may still be ending on the server (a dropped connection):
                # its liveness lock, and with it its last write, is settled before ours.
                fresh.execute(f"SET lock_timeout = '{RECONNECT_TIMEOUT_S}s'")
                self._configure_writer(fresh)
                fresh.execute("RESET lock_timeout")
                with fresh.transaction(), fresh.cursor() as cur:
                    if self._rejoin(cur):
                        self._unseen.clear()  # its calls in flight are not its own any more
            except BaseException:
                fresh.close()
                raise
            self._conn = fresh
            conn.close()
        if self._pool is not None:
            self._pool.check()
            with self._pool.connection(timeout=RECONNECT_TIMEOUT_S) as reader:
                reader.execute("SELECT 1")
        return replaced

    def _announce_lost(self, lost: StorageLost) -> None:
        logger.warning(
            "storage lost (%s): waiting up to %g s for it (storage_wait_s), taking no new work",
            lost, self.storage_wait_s,
        )  # fmt: skip

    def _stored_unseen(self) -> None:
        with self._lock:
            for hook in self._unseen.pop(threading.get_ident(), []):
                hook()
            self._wake()

    def _forget_unseen(self) -> None:
        self._unseen.pop(threading.get_ident(), None)

    def _in_doubt(self) -> bool:
        return threading.get_ident() in self._unseen

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
        self._stop_listening()  # before the lock: a hint being acted on may need it
        with self._lock:
            if self._conn is None:
                return
            if not self.read_only:
                with contextlib.suppress(psycopg.Error, StateError, Conflict), \
                        self._transaction() as cur:  # fmt: skip
                    self._leave(cur)
                self._held.clear()
            self._writes.close()
            if self._writer is not None:
                self._writer.join(timeout=RECONNECT_TIMEOUT_S)
            self._conn.close()
            self._conn = None
            if self._analyzer is not None:
                self._analyzer.join()
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def describe(self) -> str:
        return f"schema {self.schema} of {self.url}"

    # -- the other workers' hints (CoordinatedDataManager._hint) ---------------------
    def _listen(self, wake: socket.socket) -> None:
        """Hear the hints on the crawl's channel, on a connection that does nothing else,
        until close(). A lost one is made again with backoff, quietly: the hints only
        speed up what every worker's own looks do anyway."""
        pause = RECONNECT_BACKOFF_S[0]
        while not self._closing.is_set():
            try:
                with psycopg.connect(
                    self.url, autocommit=True, connect_timeout=RECONNECT_TIMEOUT_S, **TCP_OPTIONS
                ) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.schema)))
                    pause = RECONNECT_BACKOFF_S[0]
                    self._hear(conn, wake)
            except (psycopg.Error, OSError, ValueError) as exc:  # ValueError: wake closed
                logger.debug("hints not heard for now (%s)", str(exc).partition("\n")[0])
                self._closing.wait(pause)
                pause = min(RECONNECT_BACKOFF_S[1], 2 * pause)

    def _hear(self, conn: psycopg.Connection[Row], wake: socket.socket) -> None:
        """Pass each hint to _on_hint as it comes, until close() wakes this thread
        (``wake`` readable)."""
        pgconn = conn.pgconn
        while not self._closing.is_set():
            ready, _writable, _broken = select.select([pgconn.socket, wake.fileno()], [], [])
            if wake.fileno() in ready:
                return
            pgconn.consume_input()  # OperationalError once the connection is gone
            while (note := pgconn.notifies()) is not None:
                self._on_hint(note.extra.decode())

    def _stop_listening(self) -> None:
        self._closing.set()
        if self._wake_listener is None:
            return
        self._wake_listener[1].send(b".")
        if self._listener is not None:
            self._listener.join(timeout=RECONNECT_TIMEOUT_S + 1)
            self._listener = None
        for end in self._wake_listener:
            end.close()
        self._wake_listener = None

    @retry_conflicts
    def request_stop(self) -> None:
        with self._atomic() as cur:
            self._set_meta(cur, "stop_requested", repr(self._clock(cur)))

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
    def _transaction(self, *, later: bool = False) -> Iterator[Cursor]:
        if self._conn is None:
            raise StateError("the DataManager is not open")
        committed = connected = False

        def connect() -> psycopg.Cursor[Row]:
            # The first statement: the connection is this transaction's from now on,
            # after what earlier transactions wrote behind.
            nonlocal connected
            self._connection_lock.acquire()
            connected = True
            self._send_unsent()
            assert self._conn is not None
            return self._conn.cursor()

        try:
            with self._storage_errors():
                cur = DeferredWrites(connect, self._columns)
                try:
                    yield cur
                    if not (later and self._write_later(cur)):
                        self._write_deltas(cur)
                        cur.commit()
                except BaseException:
                    cur.rollback()
                    raise
                finally:
                    cur.close()
            committed = True
        except StorageLost:
            # Its last statement may have committed unseen: keep what it would change.
            self._unseen[threading.get_ident()] = list(self._commit_hooks)
            raise
        finally:
            if connected:
                self._connection_lock.release()
            if not committed:
                self._deltas.clear()
            self._transaction_ended(committed=committed)
        self._wake()

    def _write_later(self, cur: DeferredWrites) -> bool:
        """Hand a transaction's writes to the writer, if it sent none (see WriteBehind):
        whether it is done (lock held)."""
        if cur.begun or not self._writes.active:
            return False
        batches = cur.unsent()
        if batches or self._deltas:
            self._writes.add(batches, self._deltas)
            self._deltas = Counter()
        return True

    def _wait_to_write(self) -> None:
        self._writes.wait_for_room()

    def _drop_unsent(self) -> None:
        self._writes.drop()

    def _send_unsent(self) -> None:
        """Send what transactions wrote behind (the connection lock held)."""
        if self._writes.waiting and self._conn is not None:
            with self._storage_errors():
                self._writes.send(self._conn, worker_key(WRITTEN_KEY, self.owner), self._columns)

    def _flush(self) -> None:
        """Send what waits to be written, now (before a read on another connection)."""
        if self._writes.waiting:
            with self._connection_lock:
                self._send_unsent()

    @retry_conflicts
    def _send_written(self) -> None:
        """The writer's send: run again after a conflict, or once a lost storage is back."""
        self._flush()

    def _write_behind(self) -> None:
        """The writer thread: sends what transactions wrote behind as soon as there is
        some, until the DataManager closes, or the storage is given up on."""
        while self._writes.wait_for_work():
            try:
                self._send_written()
            except StateError as exc:
                self._writes.fail(exc)
            except psycopg.Error as exc:  # a write the server refused: the crawl stops
                logger.error("the writes of this worker cannot be stored: %s", exc)
                self._writes.fail(state_error(self.url, exc))
            except Exception as exc:  # a bug: no thread may wait for a dead writer
                logger.exception("the writer of this worker failed")
                self._writes.fail(state_error(self.url, exc))

    def _invalidate_statistics(self) -> None:
        self._stats = None

    @contextlib.contextmanager
    def _reading(self, *, one_statement: bool = False) -> Iterator[Cursor]:
        """A read on a pooled connection, outside this process's lock (see the class).
        One statement needs no transaction around it (a BEGIN and a COMMIT less)."""
        if self._pool is None:  # a read-only open: its one connection is free
            with self._atomic() as cur:
                yield cur
            return
        self._flush()  # this worker's reads see its writes
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._storage_errors())
            conn = stack.enter_context(self._pool.connection())
            if not one_statement:
                stack.enter_context(conn.transaction())
            yield stack.enter_context(conn.cursor())

    @contextlib.contextmanager
    def _storage_errors(self) -> Iterator[None]:
        """A conflict becomes Conflict (the call runs again), a lost connection
        StorageLost (it runs again once the storage is back), any other failure of the
        server StateError."""
        generation = self._generation
        try:
            yield
        except CONFLICTS as exc:
            raise Conflict(str(exc).partition("\n")[0]) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            if connection_lost(exc):
                raise StorageLost(str(exc).partition("\n")[0], generation) from exc
            raise state_error(self.url, exc) from exc

    def _sql(self, query: str) -> str:
        return placeholders(query)

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
        counts = counts_upsert(self._deltas)
        self._deltas.clear()
        if counts is not None:
            cur.execute(*counts)

    def _on_move(
        self, page: PageData, new: PageState, *, error: str = "", duplicate: bool = False,
        alias: bool = False, size: int = 0,
    ) -> None:  # fmt: skip
        # A page taken, downloaded or being parsed is 'waiting' in the table (it lives in
        # this memory), and its bytes are counted when its row is written, with its parse.
        old, state = table_state(page.state), table_state(new)
        counted = size
        if new in (PageState.DOWNLOADED, PageState.PARSING):
            counted = 0  # (a parse taken counted them twice: 2x the bytes in status)
        elif page.state in (PageState.DOWNLOADED, PageState.PARSING):
            counted = page.bytes
        if old is not state:
            self._count(page.host, f"state:{old}", -1)
            self._count(page.host, f"state:{state}", 1)
        if state is PageState.ERROR:
            self._count(page.host, f"error:{error}", 1)
        self._count(page.host, "duplicates", int(duplicate))
        self._count(page.host, "aliases", int(alias))
        self._count(page.host, "bytes", counted)
        super()._on_move(page, new, error=error, duplicate=duplicate, alias=alias, size=size)

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        self._count(host, "state:waiting", count)
        super()._on_admitted(cur, host, count)

    def _on_reached(self, cur: Cursor, host: str, pages: Sequence[int], level: int) -> None:
        self._count(host, "state:unreached", -len(pages))
        self._count(host, "state:waiting", len(pages))
        super()._on_reached(cur, host, pages, level)

    def _on_refresh_begun(self, cur: Cursor) -> None:
        # Every page is unreached now, and nothing else is counted yet.
        cur.execute("DELETE FROM counts")
        cur.execute(
            "INSERT INTO counts SELECT host, 'state:unreached', count(*) FROM pages GROUP BY host"
        )
        self._stats, self._robots_pending = None, 1
        self._url_pages.clear()  # their pages are unreached now

    def _after_upgrade(self, cur: Cursor) -> None:
        def read_columns() -> None:
            assert self._conn is not None
            self._columns = self._read_columns(self._conn)

        self._after_commit(read_columns)

    def _on_waiting_ended(self, host: str, count: int) -> None:
        self._count(host, "state:waiting", -count)
        self._count(host, "state:skipped", count)

    # -- the dialect's hooks -------------------------------------------------------
    def _allocate_ids(self, cur: Cursor, count: int) -> list[int]:
        cur.execute("SELECT nextval('page_ids') FROM generate_series(1, %s)", (count,))
        return sorted(int(r[0]) for r in cur.fetchall())

    def _find_host(self, cur: Cursor, host: str) -> HostData | None:
        return self._find_hosts(cur, [host]).get(host)

    def _find_hosts(self, cur: Cursor, hosts: Sequence[str]) -> dict[str, HostData]:
        cur.execute(
            f"SELECT {HOST_COLUMNS} FROM hosts WHERE host = ANY(%s) ORDER BY host FOR UPDATE",
            (list(hosts),),
        )
        return {data.host: data for data in map(host_from_row, cur.fetchall())}

    def _insert_hosts(self, cur: Cursor, hosts: Sequence[HostData]) -> None:
        super()._insert_hosts(cur, hosts)
        if hosts:
            self._robots_pending = 1

    def _url_rows_ahead(self, page_id: PageId, urls: Sequence[str]) -> UrlRowsAhead:
        parsing = self._parsing.get(page_id)  # a hint without the lock
        if parsing is None or self._away_since is not None:
            return None  # the store reads them under the lock, as it must then
        _known, asked = self._remembered_links(urls, parsing[0].level + 1)
        if not asked:
            return None
        with self._reading(one_statement=True) as cur:
            return frozenset(asked), self._url_rows(cur, asked)

    def _url_rows(self, cur: Cursor, urls: Sequence[str]) -> list[tuple[str, int, str, int]]:
        # One array, not an IN list: the text is the same for any number of links, so it
        # is prepared and planned once (a list of each length was a statement of its
        # own, parsed and planned afresh, the most frequent of a page's statements). A
        # join, not "= ANY(%s)": the plan made once for any array then filtered every
        # row of the urls with the array (2.4 ms at 1,170 pages against 0.3).
        if not urls:
            return []
        cur.execute(
            "SELECT u.normalized_url, u.page_id, p.state, p.level "
            "FROM unnest(%s::text[]) AS q (url) JOIN urls u ON u.normalized_url = q.url "
            "JOIN pages p ON p.id = u.page_id",
            (list(urls),),
        )
        return list(cur.fetchall())

    @retry_conflicts
    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._reading(one_statement=True) as cur:
            cur.execute(self._sql(query), params)
            return list(cur.fetchall())

    # -- reading ---------------------------------------------------------
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

    @retry_conflicts
    def statistics(self) -> CrawlStats:
        if self._away_since is not None and self._stats is not None:
            return self._stats  # the live view and the finisher wait with the last one
        self._coordinate()
        stats = self._stats
        max_age = self.stats_max_age if self._holds_work() else self.idle_stats_max_age
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
            busy, threads = self._noted_threads(cur)
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
            downloaded_here: Counter[str] = Counter(p.host for p, _ in self._downloaded.values())
            running_here: Counter[str] = Counter(p.host for p in self._handed.values())
            sites = []
            pending = 0
            for row in host_rows:
                data = host_from_row(row[:-1])
                if data.robots_state is RobotsState.PENDING:
                    pending += 1
                c = counts.get(data.host, StateCounts({}, {}))
                c.budget_hit = bool(row[-1])
                host = data.host
                running, downloaded = running_here[host], downloaded_here[host]
                parsing = parsing_here[host]
                # A page in progress here is still 'waiting' in the table (see table_state).
                by_state = c.by_state
                for state, delta in (
                    (PageState.WAITING, -running - downloaded - parsing),
                    (PageState.RUNNING, running),
                    (PageState.DOWNLOADED, downloaded),
                ):
                    by_state[state] = by_state.get(state, 0) + delta
                held = self._held.get(data.host)
                if held is not None:
                    data = replace(held.data, stop_reason=data.stop_reason,
                                   finished_at=data.finished_at)  # fmt: skip
                sites.append((data, c, parsing))
            self._robots_pending = pending
            stats = snapshot(sites, self.clock())
            # Another worker's pages in flight are waiting in the counters (see
            # table_state): its busy downloading threads, as it last noted them, say how
            # many (all of them for status, which downloads nothing).
            downloading = stats.downloading + max(0, busy - self._threads_noted[0])
            if threads:
                downloading = min(downloading, threads)
            self._stats = replace(stats, downloading=downloading, downloading_threads=threads)
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

    def prepare_output(self) -> None:
        """ANALYZE the tables the output joins before it reads them. The crawl analyzed
        them as they grew (:meth:`_analyze_if_grown`), while most of its pages were
        still waiting, and the planner took the finished pages for a handful: the join
        of the graph's arcs of 8 sites of 150 pages then looked up every page among all
        the sites' arcs, 0.45 s instead of 0.01 s, in about one crawl in ten of 3
        workers (``benchmarks/scale_out.py``). It costs 0.02–0.03 s there, once a crawl
        (``export`` reads the state read-only, as the end left it). Waits for an
        ANALYZE under way (its lock)."""
        if self.read_only:
            return
        self._analyze(OUTPUT_TABLES, wait=True)

    def _analyze(self, tables: Sequence[str] = (), *, wait: bool = False) -> None:
        """ANALYZE ``tables`` (by default every table of the crawl), unless another worker
        does it now (``wait``: once it is done)."""
        tables = tables or ["pages", "urls", "arcs", "skipped", "deep_links", *self.task_tables]
        key = (f"{self.schema}:analyze",)
        try:
            with self._reading() as cur:
                if wait:
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", key)
                else:
                    cur.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", key)
                    if not (cur.fetchone() or (False,))[0]:
                        return
                cur.execute(f"ANALYZE {', '.join(tables)}")
        except (Conflict, StateError) as exc:  # the crawl goes on with the plans it has
            logger.info("ANALYZE of the crawl's tables failed: %s", exc)

    def set_stop_reasons(self, reasons: Mapping[str, str]) -> None:
        self._stats = None
        super().set_stop_reasons(reasons)
