"""The SQL DataManager: one schema, one set of statements, for every SQL backend.

The crawl rules come from :mod:`rccrawler.policy`; this module records what they
decide. A backend (``sqlite.py``, ``postgres.py``) is a dialect: it supplies the
type map, the transaction and its lock, how ids are allocated, how a page is
claimed and released (SQLite in-process, PostgreSQL with row locks and leases),
the clock, and its running counters. Statements are written once, with ``?``
placeholders that a dialect may rewrite (Django's database backends are the model).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import json
import logging
import random
import re
import threading
import time
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Concatenate,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    Unpack,
)

from rccrawler.data.base import (
    SCHEMA_VERSION,
    DataManager,
    check_state_identity,
    state_identity,
)
from rccrawler.data.tables import TaskTable, check_rows
from rccrawler.exceptions import StateError
from rccrawler.policy import (
    BLOCKED_BY_ROBOTS,
    CrawlLimits,
    DownloadVerdict,
    RedirectVerdict,
    admit_links,
    decide_download,
    decide_redirect,
    redirects_back_to,
    robots_stop_reason,
    unique_links,
    validator,
)
from rccrawler.records import (
    CrawlRun,
    HostData,
    PageArc,
    PageData,
    PageId,
    PageState,
    RobotsState,
    SkippedLink,
    SkipReason,
)

if TYPE_CHECKING:
    from rccrawler.data.base import TaskRows
    from rccrawler.records import DownloadResult, FoundLink

logger = logging.getLogger(__name__)

PAGE_COLUMNS = (
    "id, host, url, normalized_url, id_from, level, out_degree, state, downloaded, parsed, "
    "http_status, content_type, content_hash, error_code, replace_id, download_attempts, "
    "redirect_target, redirect_hops, bytes, truncated, referer, etag, last_modified, nofollow, "
    "prev_run, prev_url, prev_state, prev_http_status, prev_error_code, prev_hash"
)
PAGE_FIELDS = tuple(PAGE_COLUMNS.split(", "))
"""PageData's stored fields, in the order of PAGE_COLUMNS (page_from_row unpacks rows so)."""
if tuple(f.name for f in fields(PageData) if f.metadata.get("stored", True)) != PAGE_FIELDS:
    raise ImportError("PAGE_COLUMNS must list PageData's stored fields in their order")
HOST_FIELDS = tuple(f.name for f in fields(HostData))
HOST_COLUMNS = ", ".join(HOST_FIELDS)
LEASED_STATES = (PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING)
LEASED = "('running', 'downloaded', 'parsing')"
"""Page states held by one process (a body waiting for a parser lives in its memory)."""
_FINAL_STATE = {
    DownloadVerdict.RETRY: PageState.WAITING,
    DownloadVerdict.NOT_NODE: PageState.SKIPPED,
}
"""Where a download that is not a node leaves its page; any other verdict is an error."""

REFRESH_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run INTEGER PRIMARY KEY, kind TEXT NOT NULL, started_at {float} NOT NULL,
    finished_at {float} NOT NULL DEFAULT 0, changes TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS last_arcs (
    host TEXT NOT NULL, from_id {id} NOT NULL, to_id {id} NOT NULL,
    PRIMARY KEY (host, from_id, to_id)
){without_rowid};
CREATE INDEX IF NOT EXISTS deep_links_from ON deep_links (from_id);
"""
"""What a refresh needs (SPEC §10, schema version 4): the runs, and the graph's arcs as the
last run left them (the pages keep what that run knew of each in their ``prev_`` columns)."""
REFRESH_COLUMNS = (
    ("etag", "TEXT NOT NULL DEFAULT ''"),
    ("last_modified", "TEXT NOT NULL DEFAULT ''"),
    ("nofollow", "{bool} NOT NULL DEFAULT {false}"),
    ("prev_run", "INTEGER NOT NULL DEFAULT 0"),
    ("prev_url", "TEXT NOT NULL DEFAULT ''"),
    ("prev_state", "TEXT NOT NULL DEFAULT ''"),
    ("prev_http_status", "INTEGER"),
    ("prev_error_code", "TEXT NOT NULL DEFAULT ''"),
    ("prev_hash", "TEXT NOT NULL DEFAULT ''"),
)
"""The page columns schema version 4 added, as a state of version 3 gets them."""

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    scheme TEXT NOT NULL,
    base TEXT NOT NULL,
    crawl_delay {float} NOT NULL,
    min_crawl_delay {float} NOT NULL,
    max_downloads_at_time INTEGER NOT NULL,
    robots_state TEXT NOT NULL,
    robots_status INTEGER,
    robots_text TEXT NOT NULL,
    next_fetch_at {float} NOT NULL,
    retry_after_until {float} NOT NULL,
    in_flight INTEGER NOT NULL,
    stop_reason TEXT NOT NULL,
    started_at {float} NOT NULL,
    finished_at {float} NOT NULL,
    admitted INTEGER NOT NULL DEFAULT 0,
    budget_hit {bool} NOT NULL DEFAULT {false},
    robots_owner TEXT NOT NULL DEFAULT '',
    robots_lease_until {float} NOT NULL DEFAULT 0,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS pages (
    id {id} PRIMARY KEY,
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    normalized_url TEXT NOT NULL,
    id_from {id},
    level INTEGER NOT NULL,
    out_degree INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    downloaded {bool} NOT NULL DEFAULT {false},
    parsed {bool} NOT NULL DEFAULT {false},
    http_status INTEGER,
    content_type TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL DEFAULT '',
    error_code TEXT NOT NULL DEFAULT '',
    replace_id {id},
    download_attempts INTEGER NOT NULL DEFAULT 0,
    redirect_target TEXT NOT NULL DEFAULT '',
    redirect_hops INTEGER NOT NULL DEFAULT 0,
    bytes {id} NOT NULL DEFAULT 0,
    truncated {bool} NOT NULL DEFAULT {false},
    referer TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    lease_until {float} NOT NULL DEFAULT 0"""
    + "".join(f",\n    {name} {kind}" for name, kind in REFRESH_COLUMNS)
    + """
);
CREATE INDEX IF NOT EXISTS pages_queue ON pages (host, state, level, id);
CREATE INDEX IF NOT EXISTS pages_hash ON pages (host, content_hash);
CREATE TABLE IF NOT EXISTS urls (
    normalized_url TEXT PRIMARY KEY, page_id {id} NOT NULL
){without_rowid};
CREATE TABLE IF NOT EXISTS arcs (
    from_id {id} NOT NULL, to_id {id} NOT NULL, host TEXT NOT NULL,
    PRIMARY KEY (from_id, to_id)
){without_rowid};
CREATE INDEX IF NOT EXISTS arcs_host ON arcs (host, from_id, to_id);
CREATE TABLE IF NOT EXISTS deep_links (
    url TEXT NOT NULL, from_id {id} NOT NULL, host TEXT NOT NULL, PRIMARY KEY (url, from_id)
){without_rowid};
CREATE INDEX IF NOT EXISTS deep_links_host ON deep_links (host);
CREATE TABLE IF NOT EXISTS skipped (
    host TEXT NOT NULL, url TEXT NOT NULL, reason TEXT NOT NULL, found_on {id},
    PRIMARY KEY (host, url)
){without_rowid};
"""
    + REFRESH_SCHEMA
)
"""Every table of a crawl, in any dialect: ``{float}``, ``{id}``… come from its type map."""

INSERT_VALUES = re.compile(
    r"INSERT INTO (\w+) (?:\(([^()]*)\) )?VALUES \(([^()]*)\)((?: ON CONFLICT DO NOTHING)?)"
)
"""The one form of statement a backend may rewrite for an executemany (one statement for
many rows): ``INSERT INTO t [(columns)] VALUES (marks) [ON CONFLICT DO NOTHING]``, as
(table, columns, marks, tail)."""
_QUEUED = "state = 'waiting'"
_ANSWER = (
    "download_attempts = ?, http_status = 200, content_type = ?, content_hash = ?, "
    "bytes = ?, downloaded = ?, truncated = ?, error_code = '', etag = ?, last_modified = ?"
)
"""The columns of a page's HTML answer, set with :func:`_answer_values`: written when the
download is a duplicate, or by the parse's store (a held download is written with it,
see :meth:`SQLDataManager._hold_download`)."""


def _answer_values(page: PageData) -> tuple[object, ...]:
    """The values of :data:`_ANSWER` for a downloaded page, in its order."""
    return (page.download_attempts, page.content_type, page.content_hash, page.bytes, True,
            page.truncated, page.etag, page.last_modified)  # fmt: skip


GRAPH_ARCS = """
    FROM arcs a
    JOIN pages t ON t.id = a.to_id
    LEFT JOIN pages u ON u.id = t.replace_id
    JOIN pages f ON f.id = coalesce(u.replace_id, t.replace_id, t.id)
    WHERE f.state = 'done' AND f.http_status = 200 AND f.replace_id IS NULL
"""
"""The arcs of the graph (``DataManager.iter_arcs``): an arc to a duplicate or to a
redirect alias points to the page it stands for (two hops: an alias of a duplicate);
only arcs to nodes (200 HTML, not duplicates) count. Selects ``a.from_id, f.id``."""

SKIPPED_COLUMNS = (
    "s.url, s.reason, coalesce(p.normalized_url, ''), "
    "EXISTS (SELECT 1 FROM urls WHERE urls.normalized_url = s.url), "
    "s.found_on IS NULL OR p.state = 'done'"
)
"""A skipped link ``s`` as ``iter_skipped`` reads it, with the page it was found on,
``p``: its URL, its reason, that page's URL, whether the URL became a page after all,
and whether it was found in this run (see :func:`still_skipped`)."""


def still_skipped(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[str, str, str]]:
    """(url, reason, found_on) of the rows of :data:`SKIPPED_COLUMNS` still skipped: not
    a page after all, and found in this run (a link found on a page that is no node any
    more, which a refresh removed, was not)."""
    for url, reason, found_on, known, found_now in rows:
        if not known and found_now:
            yield url, reason, found_on


T = TypeVar("T")


def in_chunks(values: Sequence[T], size: int = 500) -> Iterator[tuple[list[T], str]]:
    """``values`` in chunks for ``IN (…)`` lists, each with its ``?`` marks (a statement
    takes a bounded number of parameters)."""
    for start in range(0, len(values), size):
        chunk = list(values[start : start + size])
        yield chunk, ",".join("?" * len(chunk))


CHUNK = 2000
"""Rows the output reads at a time (keyset pagination); a shorter chunk is the last."""


class Cursor(Protocol):
    """What the shared statements need of a DB-API cursor (sqlite3 and psycopg both fit)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...
    def executemany(self, query: Any, params_seq: Any, /) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


_STATES = {state.value: state for state in PageState}


def page_from_row(row: Sequence[Any]) -> PageData:
    """A PageData from a row of PAGE_COLUMNS (SQLite keeps booleans as integers).

    The unloaders make one per page of the crawl, several times over: one call with
    the row unpacked in the order of the fields, no dict and no Enum lookup per row.
    """
    (
        page_id,
        host,
        url,
        normalized_url,
        id_from,
        level,
        out_degree,
        state,
        downloaded,
        parsed,
        http_status,
        content_type,
        content_hash,
        error_code,
        replace_id,
        download_attempts,
        redirect_target,
        redirect_hops,
        size,
        truncated,
        referer,
        etag,
        last_modified,
        nofollow,
        prev_run,
        prev_url,
        prev_state,
        prev_http_status,
        prev_error_code,
        prev_hash,
    ) = row
    return PageData(
        id=page_id, host=host, url=url, normalized_url=normalized_url, id_from=id_from,
        level=level, out_degree=out_degree, state=_STATES[state], downloaded=bool(downloaded),
        parsed=bool(parsed), http_status=http_status, content_type=content_type,
        content_hash=content_hash, error_code=error_code, replace_id=replace_id,
        download_attempts=download_attempts, redirect_target=redirect_target,
        redirect_hops=redirect_hops, bytes=size, truncated=bool(truncated), referer=referer,
        etag=etag, last_modified=last_modified, nofollow=bool(nofollow), prev_run=prev_run,
        prev_url=prev_url, prev_state=prev_state, prev_http_status=prev_http_status,
        prev_error_code=prev_error_code, prev_hash=prev_hash,
    )  # fmt: skip


def host_from_row(row: Sequence[Any]) -> HostData:
    """A HostData from a row of HOST_COLUMNS."""
    raw = dict(zip(HOST_FIELDS, row, strict=True))
    raw["robots_state"] = RobotsState(raw["robots_state"])
    return HostData(**raw)


def host_values(host: HostData) -> list[Any]:
    """The values of HOST_COLUMNS for a HostData."""
    values = [getattr(host, name) for name in HOST_FIELDS]
    values[HOST_FIELDS.index("robots_state")] = host.robots_state.value
    return values


@dataclass(frozen=True, slots=True)
class Claim:
    """A page this process holds, locked for one write, with what the rules need."""

    page: PageData
    host: HostData
    admitted: int
    """Pages the site has admitted so far (the max_pages budget)."""
    now: float
    """The storage's clock."""


@dataclass(slots=True)
class SitesAdded:
    """What :meth:`SQLDataManager.add_sites` read once for all its sites, and what they
    add: each site's work sees the sites before it, and the new rows go in together."""

    known: dict[str, HostData]
    """The hosts as read before, by name."""
    roots: dict[str, tuple[PageId, str]]
    """Start pages by normalized URL: as read before, and those added by a site before."""
    now: float
    """The storage's clock."""
    new_hosts: dict[str, HostData] = field(default_factory=dict)
    """Hosts to insert, by name."""
    new_roots: list[tuple[str, str, str, int | None, int, str]] = field(default_factory=list)
    """Start pages to insert (the rows of ``_insert_pages``)."""


class StorageOptions(TypedDict, total=False):
    """What every backend's constructor takes besides where its state lives."""

    limits: CrawlLimits | None
    """The crawl's numbers (budget, attempts, redirects)."""
    task_tables: Sequence[TaskTable]
    """Tables a crawl task keeps its per-page results in."""
    read_only: bool
    """Only read (``status``, ``search`` beside a running crawl): nothing is written."""
    max_pending_bytes: int
    """Downloaded bodies waiting for a parser, at most; downloads pause beyond it."""
    clock: Callable[[], float]
    """Wall-clock time source (tests may pass their own)."""


class LeaseLost(Exception):
    """The page's lease expired and another process took it: this result is dropped."""


class Conflict(Exception):
    """The database rolled a transaction back to break a deadlock or a serialization
    conflict (SQLSTATE 40P01, 40001): the same call, run again, succeeds."""


class StorageLost(Conflict):
    """The connection to the storage was lost in the middle of a call (a restart, a
    failover, a dropped connection): once it is back, the same call runs again (see
    :func:`retry_conflicts`). The call's last write may have committed unseen; the
    dialect then keeps what it would have changed in memory (see :class:`AlreadyStored`).

    Args:
        generation: which connection failed (the dialect counts its reconnections), so
            threads that saw the same loss reconnect once.
    """

    def __init__(self, message: str, generation: int) -> None:
        super().__init__(message)
        self.generation = generation


class AlreadyStored(Exception):
    """A call run again after a lost connection finds that its write had committed
    before the connection went: the first run's changes to memory apply, and the call
    is done."""


def worker_key(kind: str, owner: str) -> str:
    """The ``meta`` key of one of a worker's own values (a process's downloading
    threads, a worker's idle ones...); ``worker_key(kind, "%")`` matches them all."""
    return f"{kind}:{owner}"


SET_META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
"""Write one of the crawl's shared values (the ``meta`` table), new or not."""

CONFLICT_ATTEMPTS = 10
"""Tries of one call that keeps meeting conflicts before the crawl gives up on it."""
CONFLICT_BACKOFF_S = (0.005, 0.5)
"""First and longest wait between two tries (doubling, full jitter)."""

Manager = TypeVar("Manager", bound="SQLDataManager")
Params = ParamSpec("Params")
Result = TypeVar("Result")


def retry_conflicts(
    method: Callable[Concatenate[Manager, Params], Result],
) -> Callable[Concatenate[Manager, Params], Result]:
    """Run a DataManager call again when the database aborted it over a conflict.

    The one place conflicts are handled, so a worker never dies from one: the call's
    transaction was rolled back, and what it changed in memory waits for the commit
    (:meth:`SQLDataManager._after_commit`), so running it again is safe. Waits grow
    from 5 ms and are jittered, so two workers that collided do not collide again.
    """

    @functools.wraps(method)
    def retried(self: Manager, /, *args: Params.args, **kwargs: Params.kwargs) -> Result:
        first, longest = CONFLICT_BACKOFF_S
        attempt = 0
        try:
            while True:
                try:
                    return method(self, *args, **kwargs)
                except StorageLost as exc:
                    self._wait_for_storage(exc)  # StateError once storage_wait_s is over
                except Conflict as exc:
                    attempt += 1
                    if attempt == CONFLICT_ATTEMPTS:
                        raise StateError(f"gave up after {attempt} conflicts: {exc}") from exc
                    self.conflicts += 1
                    logger.info("%s: %s; trying again", method.__name__, exc)
                    time.sleep(random.uniform(0, min(longest, first * 2 ** (attempt - 1))))
                except AlreadyStored:
                    self._stored_unseen()
                    return None  # type: ignore[return-value]  # only writes that return None
        finally:
            self._forget_unseen()

    return retried


MAX_HELD = 2**53
"""Held links admitted at once when the page budget has no limit (``max_pages: 0``)."""

UrlRowsAhead = tuple[frozenset[str], list[tuple[str, int, str, int]]] | None
"""URLs a parse's store read before taking the lock, and the rows found of them."""


def due_at(host: HostData) -> float:
    """When a host's politeness lets its next request go: its crawl delay counted from
    the last request, or a Retry-After, whichever is later."""
    return max(host.next_fetch_at, host.retry_after_until)


DUE_WAIT_MAX_S = 1.0
"""The longest an idle downloading thread waits for a host to become due: a take that
finds no host held back by its politeness says this."""


DUE_WATCHERS = 2
"""Idle downloading threads that wake when the next host comes due; the others wait to
be woken. A thread that leases a page wakes one more (:meth:`SQLDataManager._took`), so
hosts due together are taken one after another by as many threads as they need, and
the 200 idle threads of a crawl of many polite hosts do not all wake each time one
comes due (every few milliseconds)."""


MAX_PENDING_BYTES = 3 * 1024 * 1024
"""Downloaded bodies waiting for a parser, by default. Enough to keep the parsers fed
(about 20 pages of the Python docs, 200 of the PostgreSQL docs'); 8 MiB before, which
cost the PostgreSQL docs' crawl 2.8 MB more peak RSS for no speed (paired crawls: 0.99×
the wall time there, 1.01× on the Python docs)."""


class SQLDataManager(DataManager):
    """Every SQL statement of the crawl, once; a backend subclass is its dialect.

    Args:
        limits: the crawl's numbers (budget, attempts, redirects).
        task_tables: tables a crawl task keeps its per-page results in.
        max_pending_bytes: downloaded bodies waiting for a parser, at most; downloads
            pause beyond it, so slow parsing cannot fill the memory.
    """

    types: ClassVar[Mapping[str, str]] = {}
    """The dialect's type map for SCHEMA: float, id, bool, false, bytes, without_rowid."""
    text_order: ClassVar[str] = ""
    """A collation clause that sorts text by bytes (SQLite's default already does)."""

    url_pages_kept: ClassVar[int] = 4096
    """Pages remembered by URL for the links of later pages (about 0.7 MB)."""

    def __init__(self, **options: Unpack[StorageOptions]) -> None:
        self.limits = options.get("limits") or CrawlLimits()
        self.task_tables = {table.name: table for table in options.get("task_tables", ())}
        self.max_pending_bytes = options.get("max_pending_bytes", MAX_PENDING_BYTES)
        self.read_only = options.get("read_only", False)
        self.clock = options.get("clock", time.time)
        self._lock = threading.Lock()
        # Idle threads wait on these; a commit wakes as many as it made work for.
        self._download_ready = threading.Condition(self._lock)
        self._parse_ready = threading.Condition(self._lock)
        self._wake_downloaders = 0
        self._wake_parsers = 0
        self._due_watchers = 0
        """Idle downloading threads waiting for the next host to come due."""
        self._due_in_s = DUE_WAIT_MAX_S
        """Seconds until the soonest host held back by its politeness is due, as the last
        take saw it: how long an idle downloading thread waits (see :meth:`_held_back`)."""
        # Downloaded bodies wait for a parser in this process's memory, not on disk:
        # a page whose links were not stored yet is fetched again after a crash.
        self._parse_queue: list[tuple[int, PageId]] = []
        self._downloaded: dict[PageId, tuple[PageData, bytes]] = {}
        self._parsing: dict[PageId, tuple[PageData, int]] = {}
        self._pending_bytes = 0
        self._url_pages: dict[str, tuple[int, int]] = {}
        """Normalized URL -> (page id, level) of pages stored or met lately, at most
        :attr:`url_pages_kept`: a site's pages repeat its navigation links, which then
        need no query. A level here is never lower than the stored one (levels only
        ever go down), so a link no deeper than it never moves the page up."""
        self._held_hashes: dict[tuple[str, str], PageId] = {}
        """(host, content hash) of the pages downloaded and waiting for their parse, whose
        answer is held here until the parse's store writes it with the page done."""
        self._deep_links = False
        """Some link was too deep to queue (then new pages look for arcs to them)."""
        self._commit_hooks: list[Callable[[], None]] = []
        self._robots_in_flight = 0
        """robots.txt files this process is fetching (taken, not stored yet)."""
        self._threads_noted = (0, 0)
        """(busy, total) DownloadingThreads of this process, as last written."""
        self._threads_written_at = -1e9
        self.conflicts = 0
        """Calls run again after a conflict (see :func:`retry_conflicts`)."""

    def bodies_waiting(self) -> int:
        with self._lock:
            return len(self._downloaded) + len(self._parsing)

    def _load_deep_links(self, cur: Cursor) -> None:
        """Whether the state holds links that were too deep (at open)."""
        cur.execute("SELECT EXISTS (SELECT 1 FROM deep_links)")
        self._deep_links = bool((cur.fetchone() or (False,))[0])

    # -- the dialect ---------------------------------------------------------
    @abstractmethod
    def _transaction(self, *, later: bool = False) -> contextlib.AbstractContextManager[Cursor]:
        """One committed transaction; the caller holds ``_lock``. A failure rolls it back
        and a storage failure becomes a StateError. ``later``: a leased page's store,
        whose writes a dialect may send after the call returns (the page is in flight
        until then; an error is the crawl's, not the caller's)."""

    def _after_commit(self, hook: Callable[[], None]) -> None:
        """Change memory only once the open transaction commits (lock held): a
        transaction rolled back over a conflict and run again finds memory unchanged."""
        self._commit_hooks.append(hook)

    def _wait_for_storage(self, lost: StorageLost) -> None:
        """Wait until the storage is back after ``lost`` (a dialect that can lose its
        connection reconnects): raise StateError once it waited long enough."""
        raise StateError(str(lost)) from lost

    def _stored_unseen(self) -> None:
        """The write of a call whose connection was lost had committed: apply what it
        changes in memory (a dialect that can lose its connection kept it)."""

    def _forget_unseen(self) -> None:
        """A call run again after a lost connection is over, one way or the other."""

    def _transaction_ended(self, *, committed: bool) -> None:
        """Every dialect's transaction calls this as it ends (lock held)."""
        hooks, self._commit_hooks = self._commit_hooks, []
        if committed:
            for hook in hooks:
                hook()

    def _wait_to_write(self) -> None:
        """Before taking the lock for a write: wait until the storage takes one more (a
        dialect that sends writes after their calls return bounds them). No-op here."""

    @contextlib.contextmanager
    def _atomic(self, *, later: bool = False) -> Iterator[Cursor]:
        """The lock and one committed transaction around a public method's body."""
        self._wait_to_write()
        with self._lock, self._transaction(later=later) as cur:
            yield cur

    def _wake(self) -> None:
        """After a commit: wake as many idle threads as it made work for (lock held)."""
        if self._wake_downloaders:
            self._download_ready.notify(self._wake_downloaders)
            self._wake_downloaders = 0
        if self._wake_parsers:
            self._parse_ready.notify(self._wake_parsers)
            self._wake_parsers = 0

    @contextlib.contextmanager
    def _page_write(self) -> Iterator[Cursor]:
        """``_atomic`` for a write about a leased page: a lost lease drops the write."""
        with contextlib.suppress(LeaseLost), self._atomic(later=True) as cur:
            yield cur

    def _sql(self, query: str) -> str:
        """A statement in the dialect's placeholders (written with ``?``)."""
        return query

    def _set_meta(self, cur: Cursor, key: str, value: str) -> None:
        """Write one of the crawl's shared values (:data:`SET_META`)."""
        cur.execute(self._sql(SET_META), (key, value))

    def schema_sql(self) -> str:
        """The crawl's tables and the task's, in this dialect."""
        text = SCHEMA.format(**self.types)
        return text + "".join(self._task_table_sql(t) for t in self.task_tables.values())

    def _task_table_sql(self, table: TaskTable) -> str:
        columns = ", ".join(f"{name} {self.types[kind]}" for name, kind in table.all_columns)
        key = ", ".join(table.key)
        text = (
            f"CREATE TABLE IF NOT EXISTS {table.name} ({columns}, PRIMARY KEY ({key}))"
            f"{'' if table.large_rows else self.types['without_rowid']};\n"
        )
        return text + self._task_index_sql(table)

    def _task_index_sql(self, table: TaskTable) -> str:
        """The page_id index (unless the key starts with page_id), then the declared
        indexes."""
        text = ""
        for number, index in enumerate((("page_id",), *table.indexes)):
            if number == 0 and (table.key[0] == "page_id" or not table.per_page):
                continue
            text += (
                f"CREATE INDEX IF NOT EXISTS {table.name}_i{number} "
                f"ON {table.name} ({', '.join(index)});\n"
            )
        return text

    def check_task_layout(self, found: Mapping[str, Sequence[str]]) -> None:
        """Refuse a state whose task tables have other columns than this task declares
        (a state written by an older version of the task): its rows would be misread.

        Args:
            found: table name → its columns in order, as the state holds them (a table
                the state lacks is not in it).

        Raises:
            StateError: with the tables that differ and what to do.
        """
        for table in self.task_tables.values():
            have = list(found.get(table.name, ()))
            want = [name for name, _kind in table.all_columns]
            if have and have != want:
                raise StateError(
                    f"the state in {self.describe()} keeps task table {table.name} with "
                    f"columns ({', '.join(have)}), not ({', '.join(want)}) as this version "
                    "of the task does: it was written by another version; crawl again "
                    "with --fresh (or under another name) to rebuild it"
                )

    @abstractmethod
    def _allocate_ids(self, cur: Cursor, count: int) -> list[int]:
        """``count`` new page ids, ascending."""

    @abstractmethod
    def _claim(
        self, cur: Cursor, page_id: PageId, states: Sequence[PageState], known: PageData | None
    ) -> Claim:
        """Lock a page this process holds, in one of ``states``, with its host.

        Raises:
            LeaseLost: another process took the page over.
        """

    @abstractmethod
    def _release(self, cur: Cursor, page: PageData) -> None:
        """Give back the download slot (in-flight count) of the page's host."""

    @abstractmethod
    def _find_host(self, cur: Cursor, host: str) -> HostData | None:
        """A site's HostData, locked against other processes until commit."""

    def _find_hosts(self, cur: Cursor, hosts: Sequence[str]) -> dict[str, HostData]:
        """:meth:`_find_host` of several sites: those known, by name."""
        return {name: data for name in hosts if (data := self._find_host(cur, name)) is not None}

    def _save_host(self, cur: Cursor, host: HostData) -> None:
        self._save_hosts(cur, [host])

    def _save_hosts(self, cur: Cursor, hosts: Sequence[HostData]) -> None:
        """Write these hosts' rows: one statement, or one batch of them (on PostgreSQL,
        one round trip)."""
        sets = ", ".join(f"{name} = ?" for name in HOST_FIELDS[1:])
        query = self._sql(f"UPDATE hosts SET {sets} WHERE host = ?")
        rows = [(*host_values(host)[1:], host.host) for host in hosts]
        if len(rows) == 1:
            cur.execute(query, rows[0])
        elif rows:
            cur.executemany(query, rows)

    def _insert_hosts(self, cur: Cursor, hosts: Sequence[HostData]) -> None:
        marks = ", ".join("?" * len(HOST_FIELDS))
        cur.executemany(
            self._sql(f"INSERT INTO hosts ({HOST_COLUMNS}) VALUES ({marks})"),
            [host_values(host) for host in hosts],
        )

    def _save_politeness(self, cur: Cursor, host: HostData) -> None:
        """Store a host's delay, Retry-After and next fetch time after a download."""
        self._save_host(cur, host)

    def _clock(self, cur: Cursor) -> float:
        """The storage's clock (every process of a shared crawl schedules by it)."""
        raise NotImplementedError

    # Counters: a backend that keeps running totals updates them here (no-ops by default).
    def _on_move(
        self, page: PageData, new: PageState, *, error: str = "", duplicate: bool = False,
        alias: bool = False, size: int = 0,
    ) -> None:  # fmt: skip
        """A page left ``page.state`` for ``new``."""

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        """``count`` new pages were queued for ``host``."""

    def _on_budget_hit(self, cur: Cursor, host: str) -> None:
        cur.execute(self._sql("UPDATE hosts SET budget_hit = ? WHERE host = ?"), (True, host))

    def _on_budget_cleared(self, cur: Cursor, host: str) -> None:
        """The site's budget has room again (a resumed run raised ``max_pages``)."""
        cur.execute(self._sql("UPDATE hosts SET budget_hit = ? WHERE host = ?"), (False, host))

    def _on_waiting_ended(self, host: str, count: int) -> None:
        """``count`` waiting pages of ``host`` were skipped at once (robots, a lowered
        budget); a negative count: skipped pages were queued again (a larger budget)."""

    def _on_reached(self, cur: Cursor, host: str, pages: Sequence[int], level: int) -> None:
        """Unreached pages of ``host`` (ids ascending) were linked again: waiting at
        ``level``."""

    def _on_refresh_begun(self, cur: Cursor) -> None:
        """A refresh reset every page to unreached and every host to its start: a backend
        that keeps counters or hosts anywhere but in the tables reads them again."""

    def _lock_output(self, cur: Cursor) -> None:
        """Wait until no process writes the output files (a refresh must not change the
        state under them). No-op here: one process owns a state."""

    # -- identity --------------------------------------------------------------
    def _lock_identity(self, cur: Cursor) -> None:
        """Serialize the first write of the identity between processes (no-op here)."""

    def _storage_identity(self, cur: Cursor) -> str:
        """What identifies the storage itself, whatever the spelling of its URL."""
        return "sqlite"

    shared: ClassVar[bool] = False
    """Whether several processes may share the state (no --fresh hints then)."""

    @retry_conflicts
    def check_identity(self, manager: str) -> None:
        with self._atomic() as cur:
            self._lock_identity(cur)
            storage = self._storage_identity(cur)
            cur.execute("SELECT key, value FROM meta")
            meta = dict(cur.fetchall())
            identity = state_identity(manager, storage)
            if not meta.keys() & identity.keys():  # a new state (see state_identity)
                now = self._clock(cur)
                cur.executemany(
                    self._sql("INSERT INTO meta VALUES (?, ?)"),
                    [*identity.items(), ("created", repr(now))],
                )
                cur.execute(
                    self._sql("INSERT INTO runs (run, kind, started_at) VALUES (1, 'crawl', ?)"),
                    (now,),
                )
                return
            if meta.get("schema_version") == "3" and not self.read_only:
                self._upgrade_from_3(cur, meta)
                meta["schema_version"] = identity["schema_version"]
        check_state_identity(meta, manager, storage, self.describe(), shared=self.shared)

    def _upgrade_from_3(self, cur: Cursor, meta: Mapping[str, str]) -> None:
        """Bring a state of schema version 3 to version 4 (what a refresh needs): the page
        columns and the tables it lacks, and its crawl as run 1 (finished when every site
        had ended). Its pages have no validators yet: its first refresh asks for them in
        full, and compares their bodies."""
        cur.execute(self._sql("SELECT count(*) FROM hosts WHERE finished_at = 0"))
        unfinished = int((cur.fetchone() or (0,))[0])
        cur.execute("SELECT coalesce(max(finished_at), 0) FROM hosts")
        finished_at = float((cur.fetchone() or (0.0,))[0])
        for name, kind in REFRESH_COLUMNS:
            cur.execute(f"ALTER TABLE pages ADD COLUMN {name} {kind.format(**self.types)}")
        for statement in REFRESH_SCHEMA.format(**self.types).split(";"):
            if statement.strip():
                cur.execute(statement)
        cur.execute(
            self._sql(
                "INSERT INTO runs (run, kind, started_at, finished_at) VALUES (1, 'crawl', ?, ?)"
            ),
            (float(meta.get("created", "0") or 0), 0.0 if unfinished else finished_at),
        )
        cur.execute(
            self._sql("UPDATE meta SET value = ? WHERE key = 'schema_version'"),
            (str(SCHEMA_VERSION),),
        )
        self._after_upgrade(cur)
        logger.info("the state in %s was upgraded to schema version 4", self.describe())

    def _check_readable(self, cur: Cursor) -> None:
        """Refuse to read a state of another schema version (``status``, ``export``,
        ``search``): it would be misread. A crawl upgrades one of version 3."""
        cur.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        row = cur.fetchone()
        found = row[0] if row is not None else None
        if found is None or found == str(SCHEMA_VERSION):
            return
        hint = (
            "run the crawl once (rccrawler --config ...) to upgrade it"
            if found == "3"
            else "crawl again with --fresh"
        )
        raise StateError(
            f"the state in {self.describe()} was written by schema version {found}, this "
            f"rccrawler uses {SCHEMA_VERSION}; {hint}"
        )

    def _after_upgrade(self, cur: Cursor) -> None:
        """The state's tables changed (a dialect that caches their layout reads it again)."""

    # -- runs and refreshes (SPEC §10) -----------------------------------------------
    @retry_conflicts
    def begin_refresh(self) -> int | None:
        """Start a new run of a finished crawl: every page it found is known but unreached,
        every site starts again from its robots.txt and its start pages (queued by
        :meth:`add_site`), and what the last run knew of each page is kept beside it.

        Returns:
            The new run's number, or None when the last run is not over (it resumes).
        """
        with self._atomic() as cur:
            self._lock_sites(cur)
            self._lock_output(cur)
            cur.execute("SELECT run, finished_at FROM runs ORDER BY run DESC LIMIT 1")
            row = cur.fetchone()
            if row is None or not row[1]:
                return None
            last, run, now = int(row[0]), int(row[0]) + 1, self._clock(cur)
            cur.execute(
                self._sql("INSERT INTO runs (run, kind, started_at) VALUES (?, 'refresh', ?)"),
                (run, now),
            )
            # The graph as the last run left it, before its pages are reset.
            cur.execute("DELETE FROM last_arcs")
            cur.execute(
                f"INSERT INTO last_arcs (host, from_id, to_id) "
                f"SELECT DISTINCT a.host, a.from_id, f.id {GRAPH_ARCS}"
            )
            cur.execute(
                self._sql(
                    "UPDATE pages SET "
                    "prev_run = CASE WHEN state = 'unreached' THEN prev_run ELSE ? END, "
                    "prev_url = normalized_url, prev_state = state, "
                    "prev_http_status = http_status, prev_error_code = error_code, "
                    "prev_hash = content_hash, state = 'unreached', http_status = NULL, "
                    "content_hash = '', error_code = '', replace_id = NULL, "
                    "download_attempts = 0, bytes = 0, downloaded = ?, truncated = ?, "
                    "owner = '', lease_until = 0"
                ),
                (last, False, False),
            )
            # The sitemaps are read again, and give their skipped URLs again.
            cur.execute("DELETE FROM skipped WHERE found_on IS NULL")
            cur.execute(
                self._sql(
                    "UPDATE hosts SET robots_state = 'pending', stop_reason = '', started_at = ?, "
                    "finished_at = 0, budget_hit = ?, in_flight = 0, robots_owner = '', "
                    "robots_lease_until = 0, owner = ''"
                ),
                (now, False),
            )
            self._on_refresh_begun(cur)
            return run

    @retry_conflicts
    def forget_unreached(self) -> None:
        with self._atomic() as cur:
            self._forget_results(cur, None)

    @retry_conflicts
    def finish_run(
        self, changes: Mapping[str, Mapping[str, int]], rows: Mapping[int, TaskRows] | None = None
    ) -> None:
        with self._atomic() as cur:
            cur.execute("SELECT run, finished_at FROM runs ORDER BY run DESC LIMIT 1")
            row = cur.fetchone()
            if row is None or row[1]:
                return  # finished already: it keeps what it recorded
            for page_id, page_rows in (rows or {}).items():
                self._write_task_rows(cur, PageId(page_id), page_rows)
            cur.execute(
                self._sql("UPDATE runs SET finished_at = ?, changes = ? WHERE run = ?"),
                (self._clock(cur), json.dumps(changes, sort_keys=True), row[0]),
            )

    def runs(self) -> list[CrawlRun]:
        """Every run of the crawl, the first first."""
        return [
            CrawlRun(int(run), kind, float(started), float(finished or 0), changes or "")
            for run, kind, started, finished, changes in self._read(
                "SELECT run, kind, started_at, finished_at, changes FROM runs ORDER BY run", ()
            )
        ]

    def iter_last_arcs(self, host: str) -> Iterator[PageArc]:
        return self._iter_arc_table("last_arcs", host)

    def _forget_results(self, cur: Cursor, page_id: PageId | None) -> None:
        """A page the last run parsed is no node of this run's graph, or is parsed again:
        its links and its rows in the task's per-page tables go (SPEC §10). The links
        it was found to hold back (too deep) go too; its skipped links stay, and
        ``iter_skipped`` leaves out those of a page that is no node.

        Args:
            page_id: the page; None for every parsed page no link of this run reached
                (at its end), in one statement a table.
        """
        if page_id is None:
            pages = "IN (SELECT id FROM pages WHERE state = 'unreached' AND parsed)"
            params: tuple[object, ...] = ()
        else:
            pages, params = "= ?", (page_id,)
        cur.execute(self._sql(f"DELETE FROM arcs WHERE from_id {pages}"), params)
        cur.execute(self._sql(f"DELETE FROM deep_links WHERE from_id {pages}"), params)
        for table in self.task_tables.values():
            if table.per_page:
                cur.execute(self._sql(f"DELETE FROM {table.name} WHERE page_id {pages}"), params)
        cur.execute(
            self._sql(
                f"UPDATE pages SET parsed = ?, out_degree = 0, nofollow = ? WHERE id {pages}"
            ),
            (False, False, *params),
        )

    def _reach(
        self, cur: Cursor, host: str, page_ids: Sequence[int], level: int,
        id_from: PageId | None, referer: str,
    ) -> None:  # fmt: skip
        """Pages known from the last run and unreached in this one, linked again (by a page
        of ``level - 1``, a sitemap, the settings): they wait to be fetched at ``level``."""
        for chunk, marks in in_chunks(sorted(set(page_ids))):
            cur.execute(
                self._sql(
                    "UPDATE pages SET state = 'waiting', level = ?, id_from = ?, referer = ? "
                    f"WHERE id IN ({marks}) AND state = 'unreached' RETURNING id"
                ),
                (level, id_from, referer, *chunk),
            )
            reached = sorted(int(row[0]) for row in cur.fetchall())
            if reached:
                self._on_reached(cur, host, reached, level)
                self._wake_downloaders += len(reached)

    def describe(self) -> str:
        """Where the state lives, for messages."""
        return type(self).__name__

    # -- sites and robots ------------------------------------------------------
    def _lock_sites(self, cur: Cursor) -> None:
        """Serialize adding sites between processes (no-op here)."""

    def add_site(self, host: HostData, start_url: str, normalized_url: str) -> bool:
        return self.add_sites([(host, start_url, normalized_url)])[0]

    @retry_conflicts
    def add_sites(self, sites: Sequence[tuple[HostData, str, str]]) -> list[bool]:
        with self._atomic() as cur:
            self._lock_sites(cur)
            # One read of the hosts, of their start pages and of the clock for all the
            # sites, and the new ones inserted together: a few round trips a site had
            # held the lock 0.35 s for 300 sites on PostgreSQL, and every first request
            # waited for it.
            batch = SitesAdded(
                known=self._find_hosts(cur, [host.host for host, _url, _normalized in sites]),
                roots={url: (PageId(page_id), state) for url, page_id, state, _level
                       in self._url_rows(cur, [url for _host, _url, url in sites])},
                now=self._clock(cur),
            )  # fmt: skip
            added = [self._add_site(cur, batch, *site) for site in sites]
            self._insert_hosts(cur, list(batch.new_hosts.values()))
            self._insert_pages(cur, batch.new_roots)
            return added

    def _add_site(
        self, cur: Cursor, batch: SitesAdded, host: HostData, start_url: str,
        normalized_url: str,
    ) -> bool:  # fmt: skip
        """:meth:`add_sites`'s work for one site, in its transaction (lock held): what
        the batch read before, and what the sites before it added; new hosts and their
        start pages are inserted after them all, together."""
        root = (host.host, start_url, normalized_url, None, 0, "")
        if normalized_url in batch.roots:  # a start page known, or added by a site before
            page_id, state = batch.roots[normalized_url]
            data = None if host.host in batch.new_hosts else batch.known.get(host.host)
            if data is not None and self._follow_settings(data, host, batch.now):
                self._save_host(cur, data)
            if state == PageState.UNREACHED:  # a refresh starts here
                self._reach(cur, host.host, [page_id], 0, None, "")
            return False
        batch.roots[normalized_url] = (PageId(0), PageState.WAITING)  # inserted below
        if host.host in batch.new_hosts:  # new in this call, with another start URL
            batch.new_roots.append(root)
            return True
        data = batch.known.get(host.host)
        if data is None:
            data = replace(
                host,
                started_at=batch.now,
                min_crawl_delay=max(host.min_crawl_delay, host.crawl_delay),
                in_flight=0,
            )
            batch.new_hosts[host.host] = data
            batch.new_roots.append(root)
            return True
        self._follow_settings(data, host, batch.now)
        if data.stop_reason.startswith(BLOCKED_BY_ROBOTS):
            # Another start URL on a known host: nothing of it is crawled.
            self._insert_pages(cur, [root])
            self._end_waiting(cur, host.host, SkipReason.ROBOTS)
        else:
            # Another start URL on a known host (docs.x/3/ and docs.x/2/): one more root.
            batch.new_roots.append(root)
            if data.stop_reason:
                data.stop_reason, data.finished_at = "", 0.0  # it has work again
        self._save_host(cur, data)
        return True

    @staticmethod
    def _follow_settings(known: HostData, host: HostData, now: float) -> bool:
        """Settings may change between runs: politeness follows this run's (SPEC §3), a
        lower delay too; auto-throttle starts again from its floor. Whether the known
        host changed."""
        before = replace(known)
        delay = max(host.crawl_delay, host.min_crawl_delay)
        if delay < known.crawl_delay:
            known.next_fetch_at = min(known.next_fetch_at, now + delay)
        known.crawl_delay = delay
        known.min_crawl_delay = delay
        known.max_downloads_at_time = host.max_downloads_at_time
        return known != before

    @retry_conflicts
    def add_links(
        self, host: str, links: Sequence[FoundLink], skipped: Sequence[SkippedLink] = (), *,
        level: int = 1, referer: str = "",
    ) -> int:  # fmt: skip
        with self._atomic() as cur:
            self._lock_sites(cur)
            # The budget counts every page of the site (few before its robots.txt is in).
            cur.execute(self._sql("SELECT count(*) FROM pages WHERE host = ?"), (host,))
            admitted = int((cur.fetchone() or (0,))[0])
            unique = unique_links(links)
            found = self._url_rows(cur, list(unique))
            known = {url: page_id for url, page_id, _state, _level in found}
            admission = admit_links(unique, known, admitted, self.limits)
            unreached = [
                page_id
                for url, page_id, state, _level in found
                if state == PageState.UNREACHED and unique[url].skip_if_new is None
            ]
            if unreached:
                self._reach(cur, host, unreached, level, None, referer)
            rows = [(host, link.url, link.normalized_url, None, level, referer)
                    for link in admission.new]  # fmt: skip
            if rows:
                self._insert_pages(cur, rows)
            if admission.budget_hit:
                self._on_budget_hit(cur, host)
            cur.executemany(
                self._sql(
                    "INSERT INTO skipped (host, url, reason, found_on) VALUES (?, ?, ?, NULL) "
                    "ON CONFLICT DO NOTHING"
                ),
                [(host, url, reason) for url, reason in admission.not_queued]
                + [(host, s.url, s.reason.value) for s in skipped],
            )
            return len(rows)

    @retry_conflicts
    def apply_limits(self, host: str, max_depth: int) -> int:
        with self._atomic() as cur:
            self._lock_sites(cur)
            data = self._find_host(cur, host)
            if data is None or data.stop_reason.startswith(BLOCKED_BY_ROBOTS):
                return 0
            budget = self.limits.max_pages
            cur.execute(
                self._sql(
                    "SELECT count(*), coalesce(sum(CASE WHEN state = 'skipped' AND "
                    "error_code = ? THEN 1 ELSE 0 END), 0) FROM pages WHERE host = ?"
                ),
                (SkipReason.BUDGET.value, host),
            )
            admitted, over_budget = (int(n) for n in cur.fetchone() or (0, 0))
            counted = admitted - over_budget  # the pages the budget counts
            if budget and counted > budget:
                self._hold_over_budget(cur, host, counted - budget)
                return 0
            queued = self._queue_over_budget(cur, host, budget - counted if budget else MAX_HELD)
            counted += queued
            room = max(0, budget - counted) if budget else MAX_HELD
            level = "CASE WHEN p.id IS NULL THEN 1 ELSE p.level + 1 END"
            # The held links by their first finder (a sitemap's have none: level 1),
            # one more than there is room for, to tell whether the budget is hit again.
            cur.execute(
                self._sql(
                    f"SELECT s.url, {level}, p.id, coalesce(p.url, '') FROM skipped s "
                    "LEFT JOIN pages p ON p.id = s.found_on "
                    "WHERE s.host = ? AND s.reason IN (?, ?) AND "
                    "NOT EXISTS (SELECT 1 FROM urls u WHERE u.normalized_url = s.url) "
                    f"AND {level} <= ? ORDER BY 2, coalesce(p.id, 0), s.url{self.text_order} "
                    "LIMIT ?"
                ),
                (host, SkipReason.DEPTH.value, SkipReason.BUDGET.value, max_depth, room + 1),
            )
            held = cur.fetchall()
            rows = [(host, url, url, from_id, int(lvl), referer)
                    for url, lvl, from_id, referer in held[:room]]  # fmt: skip
            if rows:
                self._insert_pages(cur, rows)
                for start in range(0, len(rows), 500):
                    chunk = [row[1] for row in rows[start : start + 500]]
                    marks = ",".join("?" * len(chunk))
                    cur.execute(
                        self._sql(f"DELETE FROM skipped WHERE host = ? AND url IN ({marks})"),
                        (host, *chunk),
                    )
            if (rows or queued) and data.stop_reason:
                data.stop_reason, data.finished_at = "", 0.0  # it has work again
                self._save_host(cur, data)
            if len(held) <= room and not self._over_budget_left(cur, host):
                self._on_budget_cleared(cur, host)  # all it held fits the budget now
            return queued + len(rows)

    def _hold_over_budget(self, cur: Cursor, host: str, count: int) -> None:
        """A lowered ``max_pages``: the last-queued waiting pages beyond it are skipped
        (reason ``budget``), as links over the budget are; a larger budget queues them
        again (:meth:`_queue_over_budget`)."""
        cur.execute(
            self._sql(
                "UPDATE pages SET state = 'skipped', error_code = ? WHERE id IN (SELECT id FROM "
                f"pages WHERE host = ? AND {_QUEUED} ORDER BY level DESC, id DESC LIMIT ?)"
            ),
            (SkipReason.BUDGET.value, host, count),
        )
        skipped = cur.rowcount
        if skipped:  # (a finished site over a lower budget has nothing left to skip)
            self._on_waiting_ended(host, skipped)
            self._on_budget_hit(cur, host)

    def _queue_over_budget(self, cur: Cursor, host: str, room: int) -> int:
        """Queue again up to ``room`` pages a lowered budget skipped, nearest first."""
        cur.execute(
            self._sql(
                "UPDATE pages SET state = 'waiting', error_code = '' WHERE id IN (SELECT id FROM "
                "pages WHERE host = ? AND state = 'skipped' AND error_code = ? "
                "ORDER BY level, id LIMIT ?)"
            ),
            (host, SkipReason.BUDGET.value, room),
        )
        queued = cur.rowcount
        if queued:
            self._on_waiting_ended(host, -queued)
            self._wake_downloaders += queued
        return queued

    def _over_budget_left(self, cur: Cursor, host: str) -> bool:
        cur.execute(
            self._sql("SELECT 1 FROM pages WHERE host = ? AND state = 'skipped' AND error_code = ? "
                      "LIMIT 1"),
            (host, SkipReason.BUDGET.value),
        )  # fmt: skip
        return cur.fetchone() is not None

    def _insert_pages(
        self, cur: Cursor, rows: Sequence[tuple[str, str, str, int | None, int, str]]
    ) -> list[int]:
        """Insert WAITING pages (host, url, normalized, id_from, level, referer), of one
        host or several; returns their ids.

        The caller holds what keeps other processes from adding the same URLs.
        """
        if not rows:
            return []
        ids = self._allocate_ids(cur, len(rows))
        pairs = list(zip(ids, rows, strict=True))
        remembered = [(row[2], page_id, row[4]) for page_id, row in pairs]
        self._after_commit(functools.partial(self._remember_urls, remembered))
        cur.executemany(
            self._sql(
                "INSERT INTO pages (id, host, url, normalized_url, id_from, level, state, "
                "referer) VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?)"
            ),
            [(pid, *row) for pid, row in pairs],
        )
        cur.executemany(
            self._sql("INSERT INTO urls (normalized_url, page_id) VALUES (?, ?)"),
            [(row[2], pid) for pid, row in pairs],
        )
        for host, count in Counter(row[0] for row in rows).items():
            self._on_admitted(cur, host, count)
        self._wake_downloaders += len(rows)
        if self._deep_links:
            # Pages that linked to these URLs when they were too deep to queue: now that
            # a shorter path made them pages, those links are arcs too (whatever the order).
            for start in range(0, len(rows), 500):
                chunk = [row[2] for row in rows[start : start + 500]]
                marks = ",".join("?" * len(chunk))
                cur.execute(
                    self._sql(
                        "INSERT INTO arcs (from_id, to_id, host) SELECT d.from_id, u.page_id, "
                        "d.host FROM deep_links d JOIN urls u ON u.normalized_url = d.url "
                        f"WHERE d.url IN ({marks}) ON CONFLICT DO NOTHING"
                    ),
                    chunk,
                )
        return ids

    def _page_of_url(self, cur: Cursor, normalized_url: str) -> PageId | None:
        cur.execute(
            self._sql("SELECT page_id FROM urls WHERE normalized_url = ?"), (normalized_url,)
        )
        row = cur.fetchone()
        return PageId(row[0]) if row is not None else None

    def _known_links(
        self, cur: Cursor, host: str, urls: Sequence[str], level: int, ahead: UrlRowsAhead = None
    ) -> tuple[dict[str, int], list[int], dict[str, int]]:
        """The pages these URLs are already (normalized URL → id), those of them still
        waiting deeper than ``level`` (a shorter path to them was just found), and those
        the last run knew that this one has not reached yet (URL → id). ``ahead`` is
        what :meth:`_url_rows_ahead` read before the lock was taken."""
        known, asked = self._remembered_links(urls, level)
        unreached: dict[str, int] = {}
        deeper: list[int] = []
        if asked:
            if ahead is None:
                rows = self._url_rows(cur, asked)
            else:
                # What memory knows now wins (this process's pages since the read). A
                # URL the read did not ask for (forgotten since) is read now, and so is
                # one it did not find that memory knows now: a parse inserted it since,
                # deeper than these links (inserted again, it broke the unique URL).
                read, found = ahead
                wanted = set(asked)
                rows = [row for row in found if row[0] in wanted]
                seen = {row[0] for row in rows}
                remembered = self._url_pages
                missing = [
                    url
                    for url in asked
                    if url not in read or (url not in seen and url in remembered)
                ]
                if missing:
                    rows += self._url_rows(cur, missing)
            also_waiting = self._waiting_in_memory(cur, host, rows, level)
            for url, page_id, state, page_level in rows:
                known[url] = page_id
                waiting = state == PageState.WAITING or page_id in also_waiting
                if waiting and page_level > level:
                    deeper.append(page_id)
                elif state == PageState.UNREACHED:
                    unreached[url] = page_id
            # Not a page this run has not reached: a link to it must reach it.
            self._remember_urls([(url, page_id, page_level) for url, page_id, state, page_level
                                 in rows if state != PageState.UNREACHED])  # fmt: skip
        return known, deeper, unreached

    def _remembered_links(
        self, urls: Sequence[str], level: int
    ) -> tuple[dict[str, int], list[str]]:
        """The pages memory knows enough of, for links at ``level`` (URL → id), and the
        URLs to ask the storage about. Safe without the lock: a hint, then, that the
        lock's holder checks again."""
        remembered = self._url_pages
        known: dict[str, int] = {}
        asked: list[str] = []
        for url in urls:
            page = remembered.get(url)
            # A page no deeper than the links' level is never moved up by them, whatever
            # its state: what memory says is enough. Others may be: the database says.
            if page is not None and page[1] <= level:
                known[url] = page[0]
            else:
                asked.append(url)
        return known, asked

    def _url_rows_ahead(self, page_id: PageId, urls: Sequence[str]) -> UrlRowsAhead:
        """The rows of :meth:`_url_rows` for the links of a page being parsed that memory
        does not know, read before the lock is taken: (the URLs asked, the rows found).
        None here: a dialect whose reads are round trips reads them outside the lock (on
        PostgreSQL, under it, this read was most of a parse's hold on the lock, and the
        downloading threads queued behind it)."""
        return None

    def _waiting_in_memory(
        self, cur: Cursor, host: str, rows: Sequence[tuple[str, int, str, int]], level: int
    ) -> Container[int]:
        """Pages among these rows (of :meth:`_url_rows`) that wait in this process's memory
        though their rows say otherwise (none unless a backend keeps such pages)."""
        return ()

    def _remember_urls(self, pages: Sequence[tuple[str, int, int]]) -> None:
        """Remember (normalized URL, page id, level) of pages, forgetting the oldest."""
        remembered = self._url_pages
        for url, page_id, level in pages:
            remembered[url] = (page_id, level)
        excess = len(remembered) - self.url_pages_kept
        if excess > 0:
            for url in list(itertools.islice(remembered, excess)):
                del remembered[url]

    def _url_rows(self, cur: Cursor, urls: Sequence[str]) -> list[tuple[str, int, str, int]]:
        """(normalized URL, page id, state, level) of the pages these URLs are."""
        rows: list[tuple[str, int, str, int]] = []
        for chunk, marks in in_chunks(urls):
            cur.execute(
                self._sql(
                    "SELECT u.normalized_url, u.page_id, p.state, p.level FROM urls u "
                    f"JOIN pages p ON p.id = u.page_id WHERE u.normalized_url IN ({marks})"
                ),
                chunk,
            )
            rows += cur.fetchall()
        return rows

    @retry_conflicts
    def store_robots(
        self, host: str, status: int | None, text: str, crawl_delay: float | None, *,
        blocked: bool, error: str = "",
    ) -> None:  # fmt: skip
        with self._atomic() as cur:
            data = self._find_host(cur, host)
            if data is None:
                raise KeyError(host)
            data.robots_state = RobotsState.READY
            data.robots_status = status
            data.robots_text = text
            delay_before = data.crawl_delay
            if crawl_delay is not None and crawl_delay > data.min_crawl_delay:
                data.min_crawl_delay = crawl_delay
                data.crawl_delay = max(data.crawl_delay, crawl_delay)
            # robots.txt was a request: the delay counts from when it was sent (see
            # mark_request_sent), as a page's does, and a larger one it names counts from
            # then too. (Counted from its answer, every host's first page came a
            # latency late: 300 polite hosts, 0.3 s answers, 1.32 s after robots.txt.)
            data.next_fetch_at += data.crawl_delay - delay_before
            self._wake_downloaders = 1 << 16  # the host's pages may be taken now
            if blocked:
                data.stop_reason = robots_stop_reason(status, error)
                self._end_waiting(cur, host, SkipReason.ROBOTS)
            self._save_host(cur, data)
            cur.execute(self._sql("UPDATE hosts SET robots_owner = '' WHERE host = ?"), (host,))
            self._after_commit(self._robots_stored)

    def _robots_stored(self) -> None:
        self._robots_in_flight = max(0, self._robots_in_flight - 1)

    THREADS_KEY = "downloading_threads"
    """The ``meta`` row where a process notes its DownloadingThreads: "busy total"."""

    def _threads_key(self) -> str:
        """This process's row of :attr:`THREADS_KEY` (a worker of shared storage has its own)."""
        return self.THREADS_KEY

    THREADS_WRITE_EVERY_S = 1.0
    """Seconds at least between two writes of a changed busy count (a new total is
    written at once): ``rccrawler status`` needs no more, and the crawl's writes wait."""

    @retry_conflicts
    def note_download_threads(self, busy: int, total: int) -> None:
        if self.read_only or (busy, total) == self._threads_noted:
            return
        now = time.monotonic()
        if total == self._threads_noted[1] and now < self._threads_written_at + (
            self.THREADS_WRITE_EVERY_S
        ):
            return
        with self._atomic() as cur:
            self._set_meta(cur, self._threads_key(), f"{busy} {total}")
        self._threads_noted = (busy, total)
        self._threads_written_at = now

    def _noted_threads(self, cur: Cursor) -> tuple[int, int]:
        """(busy, total) DownloadingThreads as every process of the crawl last noted them."""
        cur.execute(
            self._sql("SELECT value FROM meta WHERE key = ? OR key LIKE ?"),
            (self.THREADS_KEY, worker_key(self.THREADS_KEY, "%")),
        )
        busy = total = 0
        for (value,) in cur.fetchall():
            with contextlib.suppress(ValueError):
                noted_busy, noted_total = map(int, str(value).split())
                busy, total = busy + noted_busy, total + noted_total
        return busy, total

    def _end_waiting(self, cur: Cursor, host: str, reason: SkipReason) -> None:
        cur.execute(
            self._sql(
                f"UPDATE pages SET state = 'skipped', error_code = ? WHERE host = ? AND {_QUEUED}"
            ),
            (reason.value, host),
        )
        self._on_waiting_ended(host, cur.rowcount)

    def set_stop_reason(self, host: str, reason: str) -> None:
        self.set_stop_reasons({host: reason})

    @retry_conflicts
    def set_stop_reasons(self, reasons: Mapping[str, str]) -> None:
        # One transaction, one read of the hosts and of the clock: one each a site had
        # taken 0.22 s at the end of a crawl of 300 polite hosts on PostgreSQL.
        with self._atomic() as cur:
            now = self._clock(cur)
            ended = [data for data in self._find_hosts(cur, list(reasons)).values()
                     if not (data.stop_reason and data.finished_at)]  # fmt: skip
            for data in ended:
                data.stop_reason, data.finished_at = reasons[data.host], now
            self._save_hosts(cur, ended)

    # -- downloading -----------------------------------------------------------
    def wait_for_work(self, timeout: float, kind: str = "") -> None:
        if kind == "parse":
            with self._parse_ready:
                self._parse_ready.wait(timeout)
        elif kind == "download":
            with self._download_ready:
                if self._due_watchers >= DUE_WATCHERS:
                    # Woken by new work, or by a thread that just leased some (_took).
                    self._download_ready.wait(DUE_WAIT_MAX_S)
                    return
                self._due_watchers += 1
                try:
                    self._download_ready.wait(min(timeout, max(0.001, self._due_in())))
                finally:
                    self._due_watchers -= 1
        else:
            super().wait_for_work(timeout, kind)

    def wake_all(self) -> None:
        with self._lock:
            self._download_ready.notify_all()
            self._parse_ready.notify_all()

    def _took(self) -> None:
        """A downloading thread leased a page (lock held): wake one idle thread, which
        leases the next due page or watches for the next host to come due."""
        self._download_ready.notify(1)

    def _due_in(self) -> float:
        """Seconds until a download may be due, as the last take saw it."""
        return self._due_in_s

    def _rest(self, resting: list[tuple[float, str]], host: HostData) -> None:
        """Put a host its politeness holds back on a heap of resting hosts, by when it is
        due: a take looks at it again only then (lock held)."""
        heapq.heappush(resting, (due_at(host), host.host))

    def _due_rested(self, resting: list[tuple[float, str]], now: float) -> list[str]:
        """The hosts of a heap of resting hosts that are due at ``now``, taken off it; the
        soonest of the others counts for :meth:`_due_in` (lock held)."""
        due = []
        while resting and resting[0][0] <= now:
            due.append(heapq.heappop(resting)[1])
        if resting:
            self._due_in_s = min(self._due_in_s, resting[0][0] - now)
        return due

    def _start_due_count(self) -> None:
        """A take looks at the hosts again: :meth:`_held_back` counts from the longest wait.
        Lock held."""
        self._due_in_s = DUE_WAIT_MAX_S

    def _held_back(self, host: HostData, now: float) -> bool:
        """Whether the host's politeness (its crawl delay, a Retry-After) holds its next
        request back at ``now``; if so, when it is due counts for :meth:`_due_in` (since
        the take's :meth:`_start_due_count`). Lock held."""
        due = due_at(host)
        if due <= now:
            return False
        self._due_in_s = min(self._due_in_s, due - now)
        return True

    @retry_conflicts
    def store_download(
        self,
        page_id: PageId,
        result: DownloadResult,
        content_hash: str,
        rows: Mapping[str, Sequence[tuple[Any, ...]]] | None = None,
        *,
        follow_links: bool = True,
    ) -> None:
        with self._page_write() as cur:
            claim = self._claim(cur, page_id, (PageState.RUNNING,), None)
            page = claim.page
            self._release(cur, page)
            outcome = decide_download(
                page, result, claim.host, claim.now, self.limits, content_hash
            )
            if outcome.host_changed:
                self._save_politeness(cur, outcome.host)
            size = len(result.body)
            unchanged = outcome.verdict is DownloadVerdict.UNCHANGED
            if page.parsed and not unchanged and outcome.verdict is not DownloadVerdict.RETRY:
                # A refresh: what its last parse stored goes, before this answer's rows.
                self._forget_results(cur, page_id)
                page.parsed = False
            if rows:
                self._write_task_rows(cur, page_id, rows)
            if not unchanged and outcome.verdict is not DownloadVerdict.HTML:
                state = _FINAL_STATE.get(outcome.verdict, PageState.ERROR)
                columns: dict[str, object] = {
                    "state": state.value, "owner": "", "download_attempts": outcome.attempts,
                    "error_code": outcome.error, "http_status": outcome.status,
                }  # fmt: skip
                # A response that came is kept with its type and size; a failed request has none.
                answered = outcome.verdict is DownloadVerdict.NOT_NODE or (
                    outcome.verdict is DownloadVerdict.ERROR and outcome.answered
                )
                if answered:
                    columns |= {
                        "content_type": result.content_type,
                        "bytes": size,
                        "downloaded": True,
                    }
                self._set_page(cur, page_id, columns)
                self._on_move(page, state, error=outcome.error, size=size if answered else 0)
                return
            if unchanged:
                # A 304 sends neither body nor (often) type: the page is as it was.
                content_hash = page.prev_hash
                page.content_type = result.content_type or page.content_type
                page.etag = validator(result.etag) or page.etag
                page.last_modified = validator(result.last_modified) or page.last_modified
            else:
                page.content_type = result.content_type
                page.etag = validator(result.etag)
                page.last_modified = validator(result.last_modified)
            page.http_status = 200
            page.content_hash, page.bytes = content_hash, size
            page.download_attempts, page.downloaded = outcome.attempts, True
            page.truncated, page.error_code = result.truncated, ""
            first = self._first_with_hash(cur, page.host, content_hash, page_id)
            if first is not None and page.parsed:
                self._forget_results(cur, page_id)  # a duplicate has no links
                page.parsed = False
            if first is not None:
                cur.execute(
                    self._sql(
                        "UPDATE pages SET state = 'done', owner = '', replace_id = ?, "
                        f"{_ANSWER} WHERE id = ?"
                    ),
                    (first, *_answer_values(page), page_id),
                )
                self._on_move(page, PageState.DONE, duplicate=True, size=size)
                return
            if unchanged:
                cur.execute(
                    self._sql(
                        f"UPDATE pages SET state = 'done', owner = '', {_ANSWER} WHERE id = ?"
                    ),
                    (*_answer_values(page), page_id),
                )
                self._on_move(page, PageState.DONE, size=size)
                if follow_links and not page.nofollow:
                    self._follow_stored_links(cur, page)
                return
            self._on_move(page, PageState.DOWNLOADED, size=size)
            page.state = PageState.DOWNLOADED
            page.robots_tags = result.robots_tags
            self._hold_download(cur, page, claim.now)
            self._after_commit(functools.partial(self._queue_for_parsing, page, result.body))

    def _follow_stored_links(self, cur: Cursor, page: PageData) -> None:
        """A page found unchanged keeps its links (its arcs as stored): the pages they
        link to are reached as its parse's links would reach them, one level down."""
        cur.execute(
            self._sql(
                "SELECT p.normalized_url FROM arcs a JOIN pages p ON p.id = a.to_id "
                "WHERE a.from_id = ?"
            ),
            (page.id,),
        )
        urls = [row[0] for row in cur.fetchall()]
        if not urls:
            return
        level = page.level + 1
        _known, deeper, unreached = self._known_links(cur, page.host, urls, level)
        if unreached:
            self._reach(cur, page.host, list(unreached.values()), level, page.id, page.url)
        if deeper:
            self._lower_levels(cur, page, deeper)

    def _first_with_hash(
        self, cur: Cursor, host: str, content_hash: str, page_id: PageId
    ) -> PageId | None:
        """The page of ``host`` whose body has this hash, the first found (it is the one
        page of them that is not a duplicate), other than ``page_id``."""
        held = self._held_hashes.get((host, content_hash))
        if held is not None and held != page_id:
            return held  # the first of them: the others were found duplicates of it
        cur.execute(
            self._sql(
                "SELECT id FROM pages WHERE host = ? AND content_hash = ? AND id <> ? "
                "AND replace_id IS NULL ORDER BY id LIMIT 1"
            ),
            (host, content_hash, page_id),
        )
        row = cur.fetchone()
        return PageId(row[0]) if row is not None else None

    def _hold_download(self, cur: Cursor, page: PageData, now: float) -> None:
        """Keep a downloaded page, waiting for its parse, in this process's memory only
        (a crash fetches it again): its row is written once, whole, by the parse's
        store, a write less a page. Its hash is the one thing another download must see
        meanwhile, and only this process stores the downloads of its hosts (on
        PostgreSQL a host is held by one worker until nothing of it is in progress).
        Measured on PostgreSQL: a page's row had been written three times, each a new
        version of it in every index of the pages."""
        key = (page.host, page.content_hash)
        self._after_commit(functools.partial(self._held_hashes.__setitem__, key, page.id))

    def _set_page(self, cur: Cursor, page_id: PageId, columns: Mapping[str, object]) -> None:
        """One UPDATE of a page's columns (names written in this module, values as parameters)."""
        assignments = ", ".join(f"{name} = ?" for name in columns)
        cur.execute(
            self._sql(f"UPDATE pages SET {assignments} WHERE id = ?"), (*columns.values(), page_id)
        )

    def _queue_for_parsing(self, page: PageData, body: bytes) -> None:
        """A stored download waits in memory for this process's parsers (lock held)."""
        heapq.heappush(self._parse_queue, (page.level, page.id))
        self._downloaded[page.id] = (page, body)
        self._pending_bytes += len(body)
        self._wake_parsers += 1

    def _replace_of(self, cur: Cursor, page_id: PageId) -> PageId | None:
        cur.execute(self._sql("SELECT replace_id FROM pages WHERE id = ?"), (page_id,))
        row = cur.fetchone()
        return PageId(row[0]) if row is not None and row[0] is not None else None

    @retry_conflicts
    def store_redirect(
        self, page_id: PageId, target_url: str, target_normalized: str, skip: SkipReason | None
    ) -> None:
        with self._page_write() as cur:
            page = self._claim(cur, page_id, (PageState.RUNNING,), None).page
            self._release(cur, page)
            if page.parsed:
                self._forget_results(cur, page_id)
            known = self._page_of_url(cur, target_normalized) if skip is None else None
            loops_back = redirects_back_to(
                known, page_id, lambda pid: self._replace_of(cur, pid), self.limits.max_redirects
            )
            outcome = decide_redirect(page, target_url, skip, known, loops_back, self.limits)
            if outcome.verdict is RedirectVerdict.SKIP:
                self._set_page(cur, page_id, {
                    "state": "skipped", "owner": "", "error_code": outcome.reason,
                    "redirect_target": outcome.chain,
                })  # fmt: skip
                self._on_move(page, PageState.SKIPPED)
            elif outcome.verdict is RedirectVerdict.LOOP:
                self._set_page(cur, page_id, {
                    "state": "error", "owner": "", "error_code": outcome.reason,
                    "redirect_target": outcome.chain, "redirect_hops": outcome.hops,
                })  # fmt: skip
                self._on_move(page, PageState.ERROR, error=outcome.reason)
            elif outcome.verdict is RedirectVerdict.ALIAS:
                # The target is a page of its own already: this URL is an alias of it.
                self._set_page(cur, page_id, {
                    "state": "done", "owner": "", "replace_id": outcome.alias_of,
                    "error_code": "redirect", "redirect_target": outcome.chain,
                })  # fmt: skip
                self._on_move(page, PageState.DONE, alias=True)
                if outcome.alias_of is not None:  # a page the last run knew: it is linked again
                    self._reach(cur, page.host, [outcome.alias_of], page.level, page.id_from,
                                page.referer)  # fmt: skip
            else:
                if known is None:
                    cur.execute(
                        self._sql("INSERT INTO urls (normalized_url, page_id) VALUES (?, ?)"),
                        (target_normalized, page_id),
                    )
                self._set_page(cur, page_id, {
                    "state": "waiting", "owner": "", "url": target_url,
                    "normalized_url": target_normalized, "redirect_target": outcome.chain,
                    "redirect_hops": outcome.hops,
                })  # fmt: skip
                self._on_move(page, PageState.WAITING)
                self._wake_downloaders += 1

    @retry_conflicts
    def skip_page(self, page_id: PageId, reason: SkipReason) -> None:
        with self._page_write() as cur:
            page = self._claim(cur, page_id, LEASED_STATES, None).page
            if page.state is PageState.RUNNING:
                self._release(cur, page)
            if page.parsed:
                self._forget_results(cur, page_id)
            cur.execute(
                self._sql(
                    "UPDATE pages SET state = 'skipped', owner = '', error_code = ? WHERE id = ?"
                ),
                (reason.value, page_id),
            )
            self._on_move(page, PageState.SKIPPED)

    # -- parsing -----------------------------------------------------------------
    def take_for_parsing(self) -> tuple[PageData, bytes] | None:
        if not self._parse_queue:
            return None  # a hint read without the lock; store_download wakes the parsers
        with self._lock:  # memory only: this process downloaded the body, it parses it
            if not self._parse_queue:
                return None
            _level, page_id = heapq.heappop(self._parse_queue)
            page, body = self._downloaded.pop(page_id)
            self._on_move(page, PageState.PARSING)
            page.state = PageState.PARSING
            self._parsing[page_id] = (page, len(body))
            return replace(page), body

    @retry_conflicts
    def store_parse(
        self,
        page_id: PageId,
        links: Sequence[FoundLink],
        skipped: Sequence[SkippedLink],
        rows: Mapping[str, Sequence[tuple[Any, ...]]] | None = None,
    ) -> None:
        self._wait_to_write()
        unique = unique_links(links)
        ahead = self._url_rows_ahead(page_id, list(unique))
        with (
            self._lock,
            self._parse_ending(page_id) as page,
            contextlib.suppress(LeaseLost),
            self._transaction(later=True) as cur,
        ):
            claim = self._claim(cur, page_id, (PageState.DOWNLOADED,), page)
            level, referer = page.level + 1, page.url
            known, deeper, unreached = self._known_links(cur, page.host, list(unique), level, ahead)
            admission = admit_links(unique, known, claim.admitted, self.limits)
            reached = [pid for url, pid in unreached.items() if unique[url].skip_if_new is None]
            if reached:
                self._reach(cur, page.host, reached, level, page_id, referer)
            new_rows = [
                (page.host, link.url, link.normalized_url, page_id, level, referer)
                for link in admission.new
            ]
            new_ids = self._insert_pages(cur, new_rows)
            if deeper:
                self._lower_levels(cur, page, deeper)
            targets = admission.known_targets + new_ids
            cur.executemany(
                self._sql(
                    "INSERT INTO arcs (from_id, to_id, host) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING"
                ),
                [(page_id, target, page.host) for target in targets],
            )
            if admission.budget_hit:
                self._on_budget_hit(cur, page.host)
            deep = [(url, page_id, page.host) for url in admission.later_arcs]
            if deep:
                cur.executemany(
                    self._sql(
                        "INSERT INTO deep_links (url, from_id, host) VALUES (?, ?, ?) "
                        "ON CONFLICT DO NOTHING"
                    ),
                    deep,
                )
                self._deep_links = True
            cur.executemany(
                self._sql(
                    "INSERT INTO skipped (host, url, reason, found_on) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING"
                ),
                [(page.host, url, reason, page_id) for url, reason in admission.not_queued]
                + [(page.host, s.url, s.reason.value, page_id) for s in skipped],
            )
            if rows:
                self._write_task_rows(cur, page_id, rows)
            nofollow = any(link.skip_if_new is SkipReason.NOFOLLOW for link in unique.values())
            # The answer's columns too: a backend may have held them in memory only
            # (:meth:`_hold_download`); the parse makes the page final.
            cur.execute(
                self._sql(
                    "UPDATE pages SET state = 'done', owner = '', parsed = ?, out_degree = ?, "
                    f"nofollow = ?, {_ANSWER} WHERE id = ?"
                ),
                (True, len(targets), nofollow, *_answer_values(page), page_id),
            )
            self._on_move(page, PageState.DONE)

    @contextlib.contextmanager
    def _parse_ending(self, page_id: PageId) -> Iterator[PageData]:
        """The page being parsed, forgotten once its parse is stored (or failed for good).
        After a conflict it stays, for :func:`retry_conflicts` to run the call again."""
        page, size = self._parsing[page_id]
        try:
            yield page
        except Conflict:
            raise
        except BaseException:
            self._parse_ended(page, size)
            raise
        self._parse_ended(page, size)

    def _parse_ended(self, page: PageData, size: int) -> None:
        """A downloaded page leaves this process: its parse is stored, or it failed for
        good (it is fetched again after a resume). A backend that held it lets go."""
        del self._parsing[page.id]
        self._pending_bytes -= size
        key = (page.host, page.content_hash)
        if self._held_hashes.get(key) == page.id:
            del self._held_hashes[key]

    def _lower_levels(self, cur: Cursor, page: PageData, targets: Sequence[int]) -> None:
        """A page's level is its shortest distance from a start page (SPEC §5.1): a
        waiting page found again on a shallower path moves up, whatever order the
        parsers (of any process) found its links in."""
        level = page.level + 1
        for chunk, marks in in_chunks(targets):
            cur.execute(
                self._sql(
                    "UPDATE pages SET level = ?, id_from = ?, referer = ? "
                    f"WHERE id IN ({marks}) AND {_QUEUED} AND level > ? RETURNING id"
                ),
                (level, page.id, page.url, *chunk, level),
            )
            lowered = [PageId(row[0]) for row in cur.fetchall()]
            if lowered:
                self._on_levels_lowered(page.host, lowered, level, page)

    def _on_levels_lowered(
        self, host: str, pages: Sequence[PageId], level: int, parent: PageData
    ) -> None:
        """Waiting pages moved up to ``level`` (a backend holding copies updates them)."""

    # -- a task's own tables -------------------------------------------------------
    def _write_task_rows(
        self, cur: Cursor, page_id: PageId, rows: Mapping[str, Sequence[tuple[Any, ...]]]
    ) -> None:
        """Replace what a former parse of the page stored in each named task table."""
        for name, table_rows in rows.items():
            table = self.task_tables.get(name)
            if table is None or not table.per_page:
                raise KeyError(f"no task table {name!r} kept per page was declared")
            check_rows(table, table_rows)
            cur.execute(self._sql(f"DELETE FROM {name} WHERE page_id = ?"), (page_id,))
            if table_rows:
                # The page id is a literal (an int): the rows go as they are, with no
                # tuple made per row (a search index writes hundreds per page).
                marks = ", ".join("?" * len(table.columns))
                cur.executemany(
                    self._sql(f"INSERT INTO {name} VALUES ({int(page_id)}, {marks})"), table_rows
                )

    def _derived_table(self, name: str) -> TaskTable:
        table = self._task_table(name)
        if table.per_page:
            raise KeyError(f"task table {name!r} is kept per page: store_parse writes it")
        return table

    @retry_conflicts
    def add_task_rows(self, table: str, rows: Sequence[tuple[Any, ...]]) -> None:
        spec = self._derived_table(table)
        check_rows(spec, rows)
        if not rows:
            return
        marks = ", ".join("?" * len(spec.columns))
        with self._atomic() as cur:
            cur.executemany(self._sql(f"INSERT INTO {table} VALUES ({marks})"), rows)

    @retry_conflicts
    def clear_task_table(self, table: str) -> None:
        self._derived_table(table)
        with self._atomic() as cur:
            cur.execute(f"DELETE FROM {table}")

    def task_rows(
        self, table: str, *, columns: Sequence[str] | None = None,
        equals: Mapping[str, Any] | None = None, prefix: tuple[str, str] | None = None,
        any_of: tuple[str, Sequence[Any]] | None = None,
    ) -> list[tuple[Any, ...]]:  # fmt: skip
        spec = self._task_table(table)
        names = list(columns) if columns else [name for name, _ in spec.all_columns]
        where, params = self._task_where(spec, equals, prefix)
        select = f"SELECT {', '.join(map(spec.column, names))} FROM {table}"
        if any_of is None:
            return self._read(select + where, params)
        column, values = spec.column(any_of[0]), list(any_of[1])
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(values), 500):
            chunk = values[start : start + 500]
            marks = ",".join("?" * len(chunk))
            clause = f"{where} AND " if where else " WHERE "
            found += self._read(f"{select}{clause}{column} IN ({marks})", [*params, *chunk])
        return found

    def task_row_counts(
        self, table: str, column: str, *, prefix: str = ""
    ) -> list[tuple[Any, int]]:
        spec = self._task_table(table)
        name = spec.column(column)
        where, params = self._task_where(spec, None, (column, prefix) if prefix else None)
        return [
            (value, int(count))
            for value, count in self._read(
                f"SELECT {name}, count(*) FROM {table}{where} GROUP BY {name} "
                f"ORDER BY {name}{self.text_order}",
                params,
            )
        ]

    def task_row_total(self, table: str) -> int:
        self._task_table(table)
        return int(self._read(f"SELECT count(*) FROM {table}", ())[0][0])

    def _task_table(self, name: str) -> TaskTable:
        table = self.task_tables.get(name)
        if table is None:
            raise KeyError(f"no task table {name!r} was declared")
        return table

    def _task_where(
        self,
        table: TaskTable,
        equals: Mapping[str, Any] | None,
        prefix: tuple[str, str] | None,
    ) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for name, value in (equals or {}).items():
            clauses.append(f"{table.column(name)} = ?")
            params.append(value)
        if prefix is not None:
            name = table.column(prefix[0])
            clauses.append(f"{name}{self.text_order} >= ? AND {name}{self.text_order} < ?")
            params += [prefix[1], prefix[1] + "\U0010ffff"]
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    # -- reading (the unloaders', in batches) ------------------------------------------
    @abstractmethod
    def _read(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run one read-only query (``?`` placeholders) and return all its rows."""

    def iter_pages(self, host: str) -> Iterator[PageData]:
        last = 0
        while True:
            rows = self._read(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = ? AND id > ? "
                f"ORDER BY id LIMIT {CHUNK}",
                (host, last),
            )
            for row in rows:
                yield page_from_row(row)
            if len(rows) < CHUNK:
                return  # a short chunk is the last: no query for an empty one
            last = int(rows[-1][0])

    def iter_arcs(self, host: str) -> Iterator[PageArc]:
        query = (
            f"SELECT DISTINCT a.from_id, f.id {GRAPH_ARCS} "
            "AND a.host = ? AND a.from_id > ? AND a.from_id <= ? ORDER BY a.from_id, f.id"
        )
        last_from = 0
        while True:
            # Page through whole source pages so DISTINCT stays exact.
            bound, sources = self._read(
                "SELECT max(from_id), count(*) FROM (SELECT DISTINCT from_id FROM arcs "
                "WHERE host = ? AND from_id > ? ORDER BY from_id LIMIT 200) AS chunk",
                (host, last_from),
            )[0]
            if bound is None:
                return
            # Rows are (int, int): PageArc._make builds the record without a Python
            # call per id (PageId is only a name for int).
            yield from map(PageArc._make, self._read(query, (host, last_from, bound)))
            if sources < 200:
                return
            last_from = bound

    def iter_raw_arcs(self, host: str) -> Iterator[PageArc]:
        return self._iter_arc_table("arcs", host)

    def _iter_arc_table(self, table: str, host: str) -> Iterator[PageArc]:
        """A site's rows of an arcs table (``arcs``, ``last_arcs``) by (from, to), in chunks."""
        last = (0, 0)
        while True:
            rows = self._read(
                f"SELECT from_id, to_id FROM {table} WHERE host = ? "
                "AND (from_id > ? OR (from_id = ? AND to_id > ?)) "
                f"ORDER BY from_id, to_id LIMIT {CHUNK}",
                (host, last[0], last[0], last[1]),
            )
            yield from map(PageArc._make, rows)
            if len(rows) < CHUNK:
                return
            last = (int(rows[-1][0]), int(rows[-1][1]))

    def iter_skipped(self, host: str) -> Iterator[tuple[str, str, str]]:
        order, last = self.text_order, ""
        while True:
            # The next chunk of the site's skipped links in URL order, an index range of
            # its own size, and then which of them became pages after all: filtering
            # first would read every remaining row of the site for each chunk.
            rows = self._read(
                f"SELECT {SKIPPED_COLUMNS} FROM "
                f"(SELECT url, reason, found_on FROM skipped WHERE host = ? AND url{order} > ? "
                f"ORDER BY url{order} LIMIT {CHUNK}) s "
                f"LEFT JOIN pages p ON p.id = s.found_on ORDER BY s.url{order}",
                (host, last),
            )
            yield from still_skipped(rows)
            if len(rows) < CHUNK:
                return
            last = rows[-1][0]

    # Several small sites at once: one query per kind for up to 500 of them, whole.
    def pages_of_sites(self, hosts: Sequence[str]) -> dict[str, list[PageData]]:
        found: dict[str, list[PageData]] = {host: [] for host in hosts}
        for chunk, marks in in_chunks(hosts):
            for row in self._read(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE host IN ({marks}) ORDER BY host, id",
                chunk,
            ):
                page = page_from_row(row)
                found[page.host].append(page)
        return found

    def arcs_of_sites(self, hosts: Sequence[str]) -> dict[str, list[PageArc]]:
        found: dict[str, list[PageArc]] = {host: [] for host in hosts}
        for chunk, marks in in_chunks(hosts):
            for host, source, target in self._read(
                f"SELECT DISTINCT a.host, a.from_id, f.id {GRAPH_ARCS} "
                f"AND a.host IN ({marks}) ORDER BY a.host, a.from_id, f.id",
                chunk,
            ):
                found[host].append(PageArc(source, target))
        return found

    def skipped_of_sites(self, hosts: Sequence[str]) -> dict[str, list[tuple[str, str, str]]]:
        found: dict[str, list[tuple[str, str, str]]] = {host: [] for host in hosts}
        order = self.text_order
        for chunk, marks in in_chunks(hosts):
            rows = self._read(
                f"SELECT s.host, {SKIPPED_COLUMNS} FROM skipped s "
                f"LEFT JOIN pages p ON p.id = s.found_on WHERE s.host IN ({marks}) "
                f"ORDER BY s.host, s.url{order}",
                chunk,
            )
            for host, *row in rows:
                found[host].extend(still_skipped([row]))
        return found


def state_error(where: str, exc: BaseException) -> StateError:
    """A storage failure as the error the command line reports (one line, exit 2)."""
    return StateError(f"cannot write the crawl state {where}: {exc}")
