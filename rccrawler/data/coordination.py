"""How the workers of a shared crawl divide it between them (SPEC §9).

Work is partitioned by host, the way crawlers that scale do it (Heritrix's and
StormCrawler's per-host queues): a worker *leases a host* (``hosts.owner``) and then
owns its politeness, its queue and its page budget in memory, claiming its waiting
pages in batches; per-page writes lock only the page's own row. This module decides
who does what: which hosts a worker leases and hands over (its share), which of a
held host's pages goes next, when another worker is dead and what of its work goes
back to the queue, and which worker writes the output. How a statement reaches the
server (connections, transactions in few round trips, the counters) is the
dialect's, ``postgres.py``; what is written for each event of a page
is ``sql.py``'s, and what it means is ``policy.py``'s.

Liveness: each worker holds a session-level advisory lock on its own key, so a worker
that dies is seen the moment its connection drops, and its hosts and pages go back to
the queue. A restart of the server (or a failover) drops every connection at once: a worker notes
the server's start time as it takes its lock, and one whose lock went with another
server is given its ``storage_wait_s`` (noted beside it) to take it again before it
is reaped (see :meth:`CoordinatedDataManager._rejoin`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from abc import abstractmethod
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import ClassVar, Unpack

from rccrawler.config import setting_default
from rccrawler.data.sql import (
    HOST_COLUMNS,
    PAGE_COLUMNS,
    AlreadyStored,
    Claim,
    Conflict,
    Cursor,
    LeaseLost,
    SQLDataManager,
    StorageOptions,
    due_at,
    host_from_row,
    page_from_row,
    retry_conflicts,
    worker_key,
)
from rccrawler.exceptions import StateError
from rccrawler.policy import breadth_first_allows
from rccrawler.records import DownloadDemand, HostData, PageData, PageId, PageState

logger = logging.getLogger(__name__)

WORKERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS workers (
    owner TEXT PRIMARY KEY, lock_key BIGINT NOT NULL, machine TEXT NOT NULL,
    pid INTEGER NOT NULL, started_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS pages_owner ON pages (owner) WHERE owner <> '';
"""
"""The workers of the crawl, and what a dead one held (its pages, by owner)."""

STORAGE_WAIT_S: float = setting_default("storage_wait_s")
"""Seconds a worker waits out a lost storage unless told otherwise (the setting's
default, written once in ``config.Settings``)."""

SPARE_KEY = "spare"
"""The ``meta`` key (``spare:<owner>``) of a worker's idle downloading threads."""
SERVER_KEY = "server"
"""The ``meta`` key (``server:<owner>``) of the server start a worker's liveness lock
was taken on, and its ``storage_wait_s`` (see ``_reap_dead``)."""
WRITTEN_KEY = "written"
"""The ``meta`` key (``written:<owner>``) of the last of a worker's transactions sent
behind its calls (see ``postgres.WriteBehind``)."""


RESTART_GRACE_S = 3.0
"""Seconds beyond a worker's ``storage_wait_s`` that it is not reaped after a restart of
the server (from when another worker first sees it absent): its tries to reconnect are
spaced up to a second apart."""

LEASE_LOOK_S = (0.02, 0.1)
"""Seconds between two looks for a host to lease: at first, and at most once every host
is held by some worker (a dead worker's or a handed-over host is taken that soon)."""
LEASE_BATCH = 32
"""Hosts leased in one statement at most (a worker below its share of the hosts)."""
ROBOTS_BATCH = 16
"""robots.txt fetches taken in one statement at most, then handed to threads from memory
(one statement each, under the DataManager's lock, had sent the robots.txt of 300 polite
hosts over 0.9 s, and every host's first page waited for them)."""

HAS_WAITING = "EXISTS (SELECT 1 FROM pages p WHERE p.host = h.host AND p.state = 'waiting')"
"""SQL: the host ``h`` has pages waiting (work for whoever holds it)."""
FREE_HOST = f"owner = '' AND robots_state = 'ready' AND {HAS_WAITING}"
"""SQL: the host ``h`` is one a worker may lease: nobody holds it, its robots.txt is read,
and it has work."""

HINT_SPARE = "spare"
"""A worker's threads looked for a host to lease and found none: the others share
their hosts again now (see CoordinatedDataManager._hint)."""
HINT_FREE = "free"
"""A host with work went back to the queue: a worker with idle threads leases it now."""


IN_PROGRESS = frozenset((PageState.RUNNING, PageState.DOWNLOADED, PageState.PARSING))
"""The states of a page a worker has: taken, downloaded (waiting for its parse), parsed."""


def table_state(state: PageState) -> PageState:
    """The state a page's row shows while it is in ``state``: ``waiting`` from its take to
    its final store. The worker holding its host takes it in memory (nobody else hands
    out that host's pages) and a download waiting for its parse lives in its memory only
    (see ``SQLDataManager._hold_download``), so the row is written once, at the end; the
    counters follow the rows. (Marking it running at the take, then downloaded, was two
    more statements a page and two more versions of its row in every index.)"""
    return PageState.WAITING if state in IN_PROGRESS else state


@dataclass(slots=True)
class HeldHost:
    """A host this worker leased: its politeness and queue live here while it holds it."""

    data: HostData
    admitted: int
    queue: deque[PageData] = field(default_factory=deque)
    """Waiting pages claimed by this worker (owner set), not handed to a thread yet."""
    exhausted: bool = False
    """The last claim found no waiting page (until this worker queues new ones)."""
    levels: Counter[int] = field(default_factory=Counter)
    """Levels of this host's pages in progress here: the breadth-first barrier."""
    taken: set[PageId] = field(default_factory=set)
    """This host's pages in progress here: still waiting in the table (see table_state),
    so a claim leaves them out."""
    busy: int = 0
    """Pages of the host handed to a thread and not stored yet (download or parse)."""
    budget_hit: bool = False
    dry: bool = False
    """The last claim found nothing it may take now (the breadth-first barrier): do not
    ask again until a page of the host finishes or new ones are queued."""
    draining: bool = False
    """Being handed over to a worker that holds fewer hosts: no new page is handed out,
    and the host is given back once nothing of it is in progress here."""
    hashes: dict[str, PageId] | None = None
    """Every body of the host stored so far, by hash, with its first page: known when
    no page of it had a body when this worker leased it (all of them were stored here
    since), so a download's duplicate check needs no query. None: not known (see
    CoordinatedDataManager.hashes_kept)."""


def threads_wanted(held: HeldHost) -> int:
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


def host_takes(held: HeldHost) -> int:
    """Downloading threads a host takes at most at once: its limit, or one if it is polite
    (between two requests it takes none)."""
    return 1 if held.data.crawl_delay > 0 else max(1, held.data.max_downloads_at_time)


def fair_share(hosts: int, workers: int) -> int:
    """Hosts each of ``workers`` holds at most when ``hosts`` with work are shared out
    evenly (rounded up): what a worker leases up to at once, and hands over beyond; and
    its part of the hosts whose robots.txt is due (the pool's demand)."""
    return -(-hosts // max(1, workers))


def worth_one_more(short: bool, idle: int, limit: int) -> bool:
    """Whether a worker hands one of its hosts (``limit`` requests at once) to another with
    ``idle`` downloading threads: only when its own threads cannot serve its hosts at
    their limits (``short``), and the other has threads for half that host's limit at
    least. The rule of :meth:`CoordinatedDataManager._share_hosts`, and of the hint that
    asks for its look (``_on_hint``)."""
    return short and 2 * idle >= limit


class CoordinatedDataManager(SQLDataManager):
    """The SQL DataManager of one worker among the others of a shared crawl.

    What this process holds of the crawl (its hosts, their queues and politeness, the
    pages handed to its threads) lives in its memory while it holds it; every other
    worker sees it as ``owner`` columns. The dialect (:class:`PostgresDataManager`)
    supplies the connections: :meth:`_transaction` under this
    process's lock, :meth:`_reading` outside it, and the counters (:meth:`_count`).

    Args:
        download_slots: requests this worker may have in flight (its downloading
            threads): it leases hosts until their limits add up to this.
        storage_wait_s: seconds this worker waits out a lost connection (the dialect
            reconnects), and so how long the others leave it after a restart.
    """

    batch_size: ClassVar[int] = 16
    """Waiting pages of a held host claimed in one round trip."""
    hosts_per_thread: ClassVar[int] = 16
    """Hosts a worker holds at most, per downloading thread. Hosts with a crawl delay
    leave threads idle between requests, so a worker leases more of them until its
    threads are busy; each costs a queue of pages in memory and a look on every take,
    so not without bound (8 threads: 128 hosts, 128 requests/s at a delay of 1 s)."""
    hashes_kept: ClassVar[int] = 1 << 15
    """Hashes of stored bodies kept in memory (HeldHost.hashes), over all held hosts, at
    most (about 6 MB): beyond them a host's duplicate check asks the database. At 1 << 18
    (25 MB) a PostgreSQL soak of 200 hosts grew 160 KB per 1,000 pages for its first
    80,000 pages (issue 43); a site of a few thousand pages keeps all of its hashes."""
    reap_interval: ClassVar[float] = 0.25
    """Seconds between two looks for dead workers, and at how the hosts are shared."""
    schema: str
    """The crawl's schema (the dialect's): the roles' advisory locks are named after it."""

    def __init__(
        self, *, download_slots: int = 8, storage_wait_s: float = STORAGE_WAIT_S,
        **options: Unpack[StorageOptions],
    ) -> None:  # fmt: skip
        super().__init__(**options)
        self.storage_wait_s = storage_wait_s
        self._away_since: float | None = None
        """time.monotonic() when the storage was lost, while it is away: no new work."""
        self.download_slots = max(1, download_slots)
        self.max_pending_pages = self.download_slots
        self.owner = uuid.uuid4().hex
        """This worker's token: on its hosts, its pages and its row in ``workers``."""
        self.lock_key = random.randrange(1, 2**62)
        """The advisory lock this worker holds while its connection lives."""
        self._held: dict[str, HeldHost] = {}
        self._handed: dict[PageId, PageData] = {}
        """Pages handed to a downloading thread, until their download is stored."""
        self._hashes_kept = 0
        """Hashes in the HeldHost.hashes of the held hosts, in all."""
        self._orphaned: set[PageId] = set()
        """Pages this worker's threads held when it joined again as a new worker (see
        _join_again): their stores are dropped."""
        self._robots_pending = 1
        self._robots_taken: deque[HostData] = deque()
        """robots.txt fetches this worker took (robots_owner) and no thread started yet."""
        self._next_try = 0.0
        """time.monotonic() before which take_for_download need not look for a new host."""
        self._lease_look = LEASE_LOOK_S[0]
        """Seconds between two looks for a host to lease (see _lease_host)."""
        self._reaped_at = -1e9
        self._rotation = 0
        self._resting: list[tuple[float, str]] = []
        """Held hosts whose politeness holds their next request back, by when they are
        due (a heap): a take looks only at the others. Looking at every held host each
        time, 300 polite hosts cost a take 0.26 ms, 4.4 s of CPU a crawl of 6,000 pages."""
        self._awake: dict[str, None] = {}
        """The held hosts not resting, in the order they woke (a dict for its order): a
        take looks at these only, and at a draining host even while it rests (it goes
        back once idle). Picking them out of every held host at each take had still cost
        a take 0.09 ms with 300 polite hosts, 3 s of the lock a crawl of 6,000 pages."""
        self._handed_over: dict[str, float] = {}
        """Hosts handed over to other workers, and until when (monotonic) to leave them."""
        self._share = 1 << 30
        """Hosts this worker may hold while others would idle: its fair share of the
        hosts with work (see _balance), known after the first look."""
        self._spare_published = -1
        """The idle downloading threads this worker last told the others of."""
        self._wants_hosts = False
        """Its last look for a host to lease found none, and it has told the others
        (HINT_SPARE); a lease, or a host given back, ends that."""
        self._workers_seen = 0
        """Live workers of the crawl at the last look (see _balance); 0 before it."""
        self._looked_to_lease = False
        """Whether this worker looked at the others right before its first lease."""
        self._released = threading.Event()
        """A host was given back since a_site_may_have_ended() last looked."""
        self._balancing = threading.Lock()
        """Held by the one thread sharing the hosts out (the routine's look, or a hint)."""
        self._absent: dict[str, float] = {}
        """Workers whose liveness lock went with a restarted server, and when (monotonic)
        this one first saw them absent (see _absent_long_enough)."""

    # -- what the dialect supplies ----------------------------------------------------
    @abstractmethod
    def _reading(self, *, one_statement: bool = False) -> contextlib.AbstractContextManager[Cursor]:
        """A read outside this process's lock (it never waits behind its writes)."""

    @abstractmethod
    def _now(self) -> float:
        """This process's clock, which a held host's times are kept in."""

    @abstractmethod
    def _count(self, host: str, key: str, delta: int) -> None:
        """Change one of the crawl's counters with the open transaction."""

    def _invalidate_statistics(self) -> None:
        """The crawl's shape changed (a host given back): the next statistics() reads it."""

    def _in_doubt(self) -> bool:
        """Whether this thread's call runs again after a lost connection, whose last
        write may have committed unseen (the dialect knows)."""
        return False

    def _drop_unsent(self) -> None:
        """Forget the writes the dialect has not sent yet: they were this worker's as
        it was before it was reaped (see :meth:`_join_again`). No-op by default."""

    # -- joining and leaving ----------------------------------------------------------
    def _hold_liveness(self, cur: Cursor) -> None:
        """Take this worker's liveness lock on the connection it keeps for its life: held
        as long as the connection lives, so the others see a death at once."""
        cur.execute("SELECT pg_advisory_lock(%s)", (self.lock_key,))

    def _join(self, cur: Cursor, now: float) -> None:
        """Register this worker among the crawl's (its liveness lock is held)."""
        cur.execute(
            "INSERT INTO workers VALUES (%s, %s, %s, %s, %s)",
            (self.owner, self.lock_key, socket.gethostname(), os.getpid(), now),
        )
        self._set_meta(cur, worker_key(SPARE_KEY, self.owner), str(self.download_slots))
        self._spare_published = self.download_slots
        self._note_server(cur)

    def _note_server(self, cur: Cursor) -> None:
        """Note the server's start time as this worker holds its liveness lock on it, and
        how long it would wait for the server after a restart (see :meth:`_reap_dead`)."""
        cur.execute(
            "INSERT INTO meta SELECT %s, extract(epoch FROM pg_postmaster_start_time()) "
            "|| ' ' || %s ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (worker_key(SERVER_KEY, self.owner), repr(self.storage_wait_s)),
        )

    def _rejoin(self, cur: Cursor) -> bool:
        """Take this worker's place again on a new connection (its liveness lock held
        again), or join as a new worker if it was reaped while its connection was down
        (see :meth:`_join_again`): whether it did. A host it leased unseen, as the
        connection went, is given back, and so are the robots.txt fetches it holds (one
        taken unseen would wait for it forever; one its threads are fetching is stored
        all the same, and at worst fetched once more)."""
        cur.execute("SELECT 1 FROM workers WHERE owner = %s", (self.owner,))
        if cur.fetchone() is None:
            self._join_again(cur)
            return True
        self._note_server(cur)
        cur.execute(
            "UPDATE hosts SET owner = '' WHERE owner = %s AND host <> ALL(%s)",
            (self.owner, list(self._held)),
        )
        self._give_back_robots(cur, self.owner)
        return False

    def _join_again(self, cur: Cursor) -> None:
        """Join as a new worker after this one was reaped: a connection dropped with the
        server up is a death to the others (its lock went), who queued its work again.
        What it held is forgotten: a page its threads still hold is dropped when stored
        (LeaseLost, as after any takeover) and fetched again by the host's new holder.
        A new owner and liveness key, so no write of the old one can match."""
        logger.warning(
            "this worker was taken for dead while its connection was down: its work went "
            "back to the queue, and it joins the crawl again"
        )
        cur.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key,))
        with self._lock:
            self.owner = uuid.uuid4().hex
            self.lock_key = random.randrange(1, 2**62)
            # Pages its threads still hold are in the table as waiting (see table_state):
            # their stores are dropped, even once the same host is held here again.
            self._orphaned |= set(self._handed) | set(self._downloaded) | set(self._parsing)
            # What it remembers of pages may come from writes that were never sent (the
            # dialect drops them, see _drop_unsent): a page it inserted then is not in
            # the table, and a link to it must insert it again (3 of 200 pages had never
            # been fetched).
            self._url_pages.clear()
            self._held_hashes.clear()
            self._drop_unsent()
            self._held.clear()
            self._resting.clear()
            self._awake.clear()
            self._hashes_kept = 0
            self._handed.clear()
            self._handed_over.clear()
            self._absent.clear()
            self._robots_in_flight = 0
            self._robots_pending = 1
            self._robots_taken.clear()  # the old owner's: the others give them back
            self._next_try = 0.0
            self._hold_liveness(cur)
            self._join(cur, self._clock(cur))

    def _worker_keys(self, owner: str) -> list[str]:
        """The ``meta`` keys of a worker's own values, removed when it leaves or is reaped:
        its idle threads, its downloading threads, its server, its last write."""
        kinds = (SPARE_KEY, self.THREADS_KEY, SERVER_KEY, WRITTEN_KEY)
        return [worker_key(kind, owner) for kind in kinds]

    def _leave(self, cur: Cursor) -> None:
        """Give back what this process still holds, so nobody waits for it (closing)."""
        for held in self._held.values():
            self._save_held(cur, held)
        self._reclaim(cur, self.owner)
        cur.execute("DELETE FROM workers WHERE owner = %s", (self.owner,))
        cur.execute("DELETE FROM meta WHERE key = ANY(%s)", (self._worker_keys(self.owner),))

    def _coordinate(self) -> None:
        """Look for dead workers and share the hosts again, every ``reap_interval``
        (the statistics' caller, the routine thread, drives it)."""
        if time.monotonic() - self._reaped_at >= self.reap_interval:
            with self._lock:
                self._reap_dead()
            self._balance()

    def _holds_work(self) -> bool:
        """Whether this worker holds a host or a page in progress."""
        return bool(self._held or self._handed or self._downloaded or self._parsing)

    # -- counters and memory follow a page ------------------------------------------------
    def _on_move(
        self, page: PageData, new: PageState, *, error: str = "", duplicate: bool = False,
        alias: bool = False, size: int = 0,
    ) -> None:  # fmt: skip
        self._after_commit(
            partial(self._held_moved, page.host, page.id, page.state, page.level, new)
        )
        if new is PageState.DONE and not duplicate and not alias and page.content_hash:
            self._after_commit(partial(self._keep_hash, page.host, page.content_hash, page.id))

    def _on_admitted(self, cur: Cursor, host: str, count: int) -> None:
        self._after_commit(partial(self._held_admitted, host, count))

    def _on_reached(self, cur: Cursor, host: str, pages: Sequence[int], level: int) -> None:
        self._after_commit(partial(self._held_admitted, host, 0))  # its queue has work again

    # -- leases: hosts, and the pages of held hosts ------------------------------------
    @retry_conflicts
    def take_robots(self) -> HostData | None:
        if self.read_only or self._away_since is not None:
            return None
        if not self._robots_pending and not self._robots_taken:
            return None  # a hint, refreshed with the statistics snapshot
        with self._atomic() as cur:
            if not self._robots_taken and not self._take_robots_batch(cur):
                return None
            self._robots_in_flight += 1
            return self._robots_taken.popleft()

    def _take_robots_batch(self, cur: Cursor) -> bool:
        """Take up to :data:`ROBOTS_BATCH` robots.txt fetches due (lock held): whether any.
        A fetch taken and not started yet goes back with the others this worker holds
        (see _give_back_robots). The host's politeness counts from the request itself
        (mark_request_sent), however long it waited here."""
        now = self._clock(cur)
        cur.execute(
            "UPDATE hosts SET robots_state = 'fetching', robots_owner = %s, "
            "next_fetch_at = %s + crawl_delay "
            "WHERE host = ANY(ARRAY(SELECT host FROM hosts WHERE robots_state = 'pending' "
            "AND next_fetch_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)) "
            f"RETURNING {HOST_COLUMNS}",
            (self.owner, now, now, ROBOTS_BATCH),
        )
        rows = cur.fetchall()
        if not rows:
            cur.execute("SELECT count(*) FROM hosts WHERE robots_state = 'pending'")
            self._robots_pending = int((cur.fetchone() or (0,))[0])
            return False
        self._robots_taken.extend(map(host_from_row, rows))
        return True

    def _robots_stored(self) -> None:
        super()._robots_stored()
        # Its host may be leased now (hosts whose robots.txt came in together were
        # leased one a look, 20 ms apart).
        self._look_for_hosts_now()

    def _due_in(self) -> float:
        # The soonest held host due (a crawl delay of 5 ms waited out the look for a host
        # to lease instead, up to 0.05 s: the PostgreSQL docs took 54 s instead of 6),
        # or that look, whichever comes first.
        return min(super()._due_in(), max(0.001, min(0.05, self._next_try - time.monotonic())))

    @retry_conflicts
    def take_for_download(self) -> PageData | None:
        if self.read_only or self._pending_bytes > self.max_pending_bytes:
            return None
        if self._away_since is not None:
            return None  # the storage is lost: what was fetched waits to be stored
        with self._lock:
            if len(self._downloaded) + len(self._parsing) >= self.max_pending_pages:
                return None  # the parsers of this process are behind
            if self._below_share() and time.monotonic() >= self._next_try:
                # Its threads may all be busy with its hosts, and never find none due.
                self._next_try = time.monotonic() + self._lease_look
                if self._lease_host():
                    self._lease_look = LEASE_LOOK_S[0]
            page = self._take_from_held()
            if page is None and time.monotonic() >= self._next_try:
                self._next_try = time.monotonic() + LEASE_LOOK_S[0]
                if self._lease_host():
                    self._lease_look = LEASE_LOOK_S[0]
                    page = self._take_from_held()
            if page is not None:
                self._took()
            return page

    def _take_from_held(self) -> PageData | None:
        """A due page of a host this worker holds (lock held), running from now on (in
        memory: its row is written when it is stored, see table_state)."""
        now = self._now()
        self._start_due_count()
        self._wake_rested(now)
        names = list(self._awake)
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
            if self._held_back(data, now):
                del self._awake[name]
                self._rest(self._resting, data)
                continue
            if data.in_flight >= data.max_downloads_at_time:
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
            held.queue.popleft()
            held.taken.add(page.id)
            held.levels[page.level] += 1
            held.busy += 1
            data.in_flight += 1
            data.next_fetch_at = now + data.crawl_delay
            page.state = PageState.RUNNING
            self._handed[page.id] = page
            return replace(page)
        return None

    def _wake_rested(self, now: float) -> None:
        """Resting held hosts due at ``now`` wake (lock held); the soonest of the others
        counts for :meth:`_due_in`. A name may stay on the heap after its host left."""
        for name in self._due_rested(self._resting, now):
            if name in self._held:
                self._awake[name] = None

    def download_demand(self, limit: int) -> DownloadDemand:
        with self._lock:
            in_flight = len(self._handed) + self._robots_in_flight
            if self._pending_bytes > self.max_pending_bytes:
                return DownloadDemand(in_flight, in_flight)
            now = self._now()
            allowed = in_flight + len(self._robots_taken)
            for held in self._held.values():
                data = held.data
                if held.draining or held.dry or (held.exhausted and not held.queue):
                    continue
                if due_at(data) <= now:
                    allowed += max(0, data.max_downloads_at_time - data.in_flight)
            # This worker's part of what no worker holds yet: robots.txt files to fetch,
            # or the hosts it will lease up to its share (one request each, at first).
            if not self._workers_seen and self._away_since is None:
                with contextlib.suppress(Conflict, StateError):  # the lease looks again
                    self._first_look()  # the robots.txt files due at the start
            if self._workers_seen:
                allowed += max(
                    fair_share(self._robots_pending, self._workers_seen),
                    min(self._share, self.download_slots) - len(self._held),
                )
            else:
                allowed += min(self._robots_pending, 1)
            return DownloadDemand(in_flight, min(allowed, limit))

    def _threads_key(self) -> str:
        return worker_key(self.THREADS_KEY, self.owner)

    def _claim_batch(self, held: HeldHost, busy: Sequence[int]) -> None:
        """Read the next waiting pages of a held host, in one round trip, into its queue.

        Nothing is written: the host's lease already makes its waiting pages this
        worker's, since only the host's holder hands them out. (They were marked with
        an owner once; a dead worker's reclaim then rewrote every page it had queued,
        2,000 rows in 170 ms at a million pages, and every page was written once more.)
        The queue is read only when it is empty, so every page in it is still waiting;
        the pages in progress here are too, in the table, and are left out.
        """
        limit = min(busy) + 1 if busy else 1 << 30
        with self._transaction() as cur:
            cur.execute(
                f"SELECT {PAGE_COLUMNS} FROM pages WHERE host = %s AND state = 'waiting' "
                "AND level <= %s AND id <> ALL(%s) ORDER BY level, id LIMIT %s",
                (held.data.host, limit, sorted(held.taken), self.batch_size),
            )
            pages = [page_from_row(row) for row in cur.fetchall()]
        held.queue.extend(pages)
        held.exhausted = not pages and not busy
        held.dry = not pages

    def _threads_wanted_here(self) -> int:
        """The downloading threads this worker's hosts will keep busy (lock held)."""
        return sum(map(threads_wanted, self._held.values()))

    def _threads_short(self) -> bool:
        """Whether this worker's threads cannot serve its hosts at their limits (lock
        held): only then does handing one over speed anything up."""
        return self._threads_wanted_here() > self.download_slots

    def _look_for_hosts_now(self) -> None:
        """The next take looks for a host to lease at once, and a look in vain tells the
        others again (lock held): what this worker holds, or could lease, changed."""
        self._wants_hosts, self._lease_look, self._next_try = False, LEASE_LOOK_S[0], 0.0

    def _below_share(self) -> bool:
        """Whether this worker holds fewer hosts than its share of those with work (and
        than its threads: one worker of many hosts holds a host per thread at most)."""
        return len(self._held) < min(self._share, self.download_slots)

    def _hosts_to_lease(self) -> int:
        """How many hosts to lease now (lock held): up to its share at once, since each
        waits for nothing but its lease (300 polite hosts leased one a look, 46 a second,
        started over 6.5 s, and the crawl took 1.8 times its politeness limit); beyond
        it, as many as the threads its hosts leave idle would serve, each host counted
        as the most a held one takes (a polite host takes one only while in flight)."""
        room = self.hosts_per_thread * self.download_slots - len(self._held)
        if room <= 0:
            return 0  # polite hosts need no thread between requests, but memory
        if self._below_share():
            below = min(self._share, self.download_slots) - len(self._held)
            return min(room, below, LEASE_BATCH)
        # Below its share, even if the threads are spoken for: a host that waits for a
        # worker to be done with others starts late and ends the crawl alone at its
        # limit (8 hosts for 2 workers held 3 each, and two waited 2.4 s). Beyond it, one
        # host a look had left the 44 polite hosts of 300 beyond 256 threads to start
        # over 1.5 s, 20 ms apart, and the crawl ended with them.
        idle = self.download_slots - self._threads_wanted_here()
        each = max(map(host_takes, self._held.values()), default=1)
        return min(room, LEASE_BATCH, max(1, idle // each)) if idle > 0 else 0

    def _lease_host(self) -> bool:
        """Lease more hosts with waiting pages (see _hosts_to_lease), in one round trip
        and one more for what is known of them; whether any was leased."""
        if not self._looked_to_lease:
            self._looked_to_lease = True
            self._first_look()
        wanted = self._hosts_to_lease()
        if wanted <= 0:
            return False
        # A host this worker just handed over is left to the others for a while.
        now = time.monotonic()
        handed_over = [host for host, until in self._handed_over.items() if until > now]
        with self._transaction() as cur:
            cur.execute(
                "UPDATE hosts SET owner = %s WHERE host = ANY(ARRAY(SELECT host FROM hosts h "
                f"WHERE {FREE_HOST} AND host <> ALL(%s) "
                "ORDER BY next_fetch_at LIMIT %s FOR UPDATE SKIP LOCKED)) "
                f"RETURNING {HOST_COLUMNS}, budget_hit, "
                "next_fetch_at - extract(epoch FROM clock_timestamp()), "
                "retry_after_until - extract(epoch FROM clock_timestamp())",
                (self.owner, handed_over, wanted),
            )
            rows = cur.fetchall()
            if not rows:
                if not self._robots_pending:
                    if not self._wants_hosts and self._spare_threads() > 0:
                        # The first look in vain, not each; the others read its idle
                        # threads as they share their hosts out.
                        self._publish_spare(cur)
                        self._hint(cur, HINT_SPARE)
                    self._wants_hosts = True
                    # Every host is known and held: look again less often, up to 0.1 s
                    # (a transaction each time), until one is leased again.
                    self._lease_look = min(LEASE_LOOK_S[1], 2 * self._lease_look)
                    self._next_try = time.monotonic() + self._lease_look
                return False
            self._wants_hosts = False
            leased = sorted(rows, key=lambda row: row[-2])  # the soonest due first
            hosts = [host_from_row(row[:-3]) for row in leased]
            names = [data.host for data in hosts]
            # Whether a page of each has a body yet (its hashes sort after ''): if not,
            # every body of it is stored by this worker from now on, and kept in memory.
            cur.execute(
                "SELECT coalesce((SELECT sum(n) FROM counts c WHERE c.host = q.host "
                "AND c.key LIKE 'state:%%'), 0), "
                "EXISTS (SELECT 1 FROM pages p WHERE p.host = q.host AND p.content_hash > '') "
                "FROM unnest(%s::text[]) WITH ORDINALITY AS q (host, n) ORDER BY q.n",
                (names,),
            )
            known = cur.fetchall()
            hashes = self._read_hashes(cur, names, known)
            if not self._deep_links:
                cur.execute("SELECT EXISTS (SELECT 1 FROM deep_links WHERE host = ANY(%s))",
                            (names,))  # fmt: skip
                self._deep_links = bool((cur.fetchone() or (False,))[0])
        # From the database's clock to this process's (see _now).
        now = self._now()
        for data, row, (admitted, bodies) in zip(hosts, leased, known, strict=True):
            data.next_fetch_at, data.retry_after_until = now + row[-2], now + row[-1]
            data.in_flight = 0
            self._awake[data.host] = None
            self._held[data.host] = HeldHost(
                data, int(admitted), budget_hit=bool(row[-3]),
                hashes=hashes.get(data.host) if bodies else {},
            )  # fmt: skip
            self._hashes_kept += len(hashes.get(data.host, ()))
            logger.debug("leased %s", data.host)
        self._publish_spare()
        return True

    def _read_hashes(
        self, cur: Cursor, names: Sequence[str], known: Sequence[tuple[int, bool]]
    ) -> dict[str, dict[str, PageId]]:
        """The hashes of the bodies stored so far of the leased hosts that have some, as
        far as they fit in ``hashes_kept`` (lock held), read in one round trip: each
        download's duplicate check then needs no query. (A host taken over, or leased
        again on resume, had asked the database once a page, under this worker's lock:
        81 queries in the last 0.6 s of ``scale_out.py``'s 3 workers.) The first page of
        each hash is the one the query would find: the lowest id not a duplicate."""
        room = self.hashes_kept - self._hashes_kept
        wanted: list[str] = []
        for name, (admitted, bodies) in zip(names, known, strict=True):
            if bodies and int(admitted) <= room:  # admitted pages bound their bodies
                wanted.append(name)
                room -= int(admitted)
        if not wanted:
            return {}
        cur.execute(
            "SELECT host, content_hash, min(id) FROM pages WHERE host = ANY(%s) "
            "AND content_hash > '' AND replace_id IS NULL GROUP BY host, content_hash",
            (wanted,),
        )
        hashes: dict[str, dict[str, PageId]] = {name: {} for name in wanted}
        for host, content_hash, first in cur.fetchall():
            hashes[host][content_hash] = PageId(first)
        return hashes

    def _first_look(self) -> None:
        """Before this worker's first lease (lock held): the workers of the crawl, and so
        its share of the hosts with work, robots.txt read or not, until the routine's
        looks (see _share_hosts) take over. Workers started together join before any
        robots.txt is answered. (Leasing one host at a time until that first look, the
        first worker up had leased 6 hosts of 8 with two others up, and handed 3 over as
        their first pages came in.) Also at the pool's first look at the demand, for the
        robots.txt files due: the lease looks again, with the workers that joined since."""
        with self._reading(one_statement=True) as cur:
            cur.execute(
                "SELECT (SELECT count(*) FROM workers), "
                f"count(*) FILTER (WHERE owner <> '' OR {HAS_WAITING}), "
                "count(*) FILTER (WHERE robots_state = 'pending') FROM hosts h"
            )
            workers, hosts, robots = cur.fetchone() or (1, 0, 0)
        self._workers_seen = max(1, int(workers))
        self._share = fair_share(int(hosts), self._workers_seen)
        self._robots_pending = int(robots)

    def _release_host(self, held: HeldHost) -> None:
        """Give a host back: nothing of it is in progress here (its claimed pages, if
        it is handed over, go back to the queue)."""
        with self._transaction() as cur:
            self._save_held(cur, held)
            cur.execute(
                "UPDATE hosts SET owner = '' WHERE host = %s AND owner = %s",
                (held.data.host, self.owner),
            )
            if held.draining:
                self._hint(cur, HINT_FREE)  # handed over: the worker that lacks it takes it
        del self._held[held.data.host]
        self._awake.pop(held.data.host, None)
        self._look_for_hosts_now()  # its threads may take another
        logger.debug("gave %s back", held.data.host)
        self._hashes_kept -= len(held.hashes or ())
        self._publish_spare()
        # One idle thread leases what is due now, and wakes one more as it takes a page
        # (_took): waking them all, 300 polite hosts given back woke each thread 300 times.
        self._wake_downloaders += 1
        self._invalidate_statistics()  # the site may be over: the finisher should see it now
        self._released.set()

    def a_site_may_have_ended(self) -> bool:
        ended = self._released.is_set()
        self._released.clear()
        return ended

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

    # -- the pages and hosts this worker holds, as the shared statements see them ----

    def _claim(
        self, cur: Cursor, page_id: PageId, states: Sequence[PageState], known: PageData | None
    ) -> Claim:
        """The page and its held host, from this worker's memory when it can.

        A page this worker handed to a thread is its own for as long as it holds the
        page's host and its connection lives: only the host's holder hands its pages
        out, and another worker takes the host over only once this connection (and with
        it the advisory lock) is gone, and then this write cannot commit anyway. So no
        round trip is needed to check it; an unknown page is read and locked.
        """
        if page_id in self._orphaned:
            self._orphaned.discard(page_id)
            raise LeaseLost(page_id)
        handed = self._handed.get(page_id) if known is None else known
        doubt = self._in_doubt()  # the first run of this call may have committed unseen
        if handed is not None and not doubt:
            held = self._held.get(handed.host)
            if held is not None:
                if known is None:  # a conflict runs the call again: it is still handed
                    self._after_commit(partial(self._forget_handed, page_id))
                return Claim(replace(handed), held.data, held.admitted, self._now())
        wanted = sorted({str(table_state(s)) for s in states})
        cur.execute(
            f"SELECT {PAGE_COLUMNS} FROM pages WHERE id = %s AND state = ANY(%s) FOR UPDATE",
            (page_id, wanted),
        )
        found = cur.fetchone()
        if found is None and doubt:
            raise AlreadyStored(page_id)  # no other worker took it: this one was not reaped
        if found is None:
            logger.warning("page %d: another worker took it over", page_id)
            raise LeaseLost(page_id)
        page = page_from_row(found)
        held = self._held.get(page.host)
        if held is None:
            raise LeaseLost(page_id)  # the host went to another worker
        if known is None:
            self._after_commit(partial(self._forget_handed, page_id))
        # The table says 'waiting' where this worker knows better.
        page.state = known.state if known is not None else PageState.RUNNING
        return Claim(page, held.data, held.admitted, self._now())

    def _first_with_hash(
        self, cur: Cursor, host: str, content_hash: str, page_id: PageId
    ) -> PageId | None:
        held = self._held.get(host)
        if held is None or held.hashes is None:
            return super()._first_with_hash(cur, host, content_hash, page_id)
        first = self._held_hashes.get((host, content_hash)) or held.hashes.get(content_hash)
        return first if first != page_id else None

    def _keep_hash(self, host: str, content_hash: str, page_id: PageId) -> None:
        """A body stored (committed) of a held host whose hashes are known."""
        held = self._held.get(host)
        if held is None or held.hashes is None or content_hash in held.hashes:
            return
        if self._hashes_kept >= self.hashes_kept:
            self._hashes_kept -= len(held.hashes)
            held.hashes = None  # its duplicate checks ask the database from now on
            return
        held.hashes[content_hash] = page_id
        self._hashes_kept += 1

    def _forget_handed(self, page_id: PageId) -> None:
        self._handed.pop(page_id, None)

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

    def _save_held(self, cur: Cursor, held: HeldHost) -> None:
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

    def _held_moved(
        self, host: str, page_id: PageId, old: PageState, level: int, new: PageState
    ) -> None:
        """A page of a held host changed state (committed): its barrier and its queue."""
        held = self._held.get(host)
        if held is None:
            return
        was_busy, busy = old in IN_PROGRESS, new in IN_PROGRESS
        if was_busy and not busy:
            held.taken.discard(page_id)
            held.levels[level] -= 1
            held.busy -= 1
            if held.dry or held.draining or held.busy <= 0:
                # Its barrier may let a page go now, or the host go back (a take does
                # both): idle threads had looked only at their next timeout, up to
                # 0.05 s on, and the last host of a crawl went back 47 ms after its page.
                self._wake_downloaders += 1
            held.dry = False
        if new is PageState.WAITING:
            held.exhausted = False  # a retry or a redirect: back in the table's queue

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
                cur.execute(
                    "SELECT pg_try_advisory_xact_lock(%s), coalesce(split_part(value, ' ', 1)"
                    "::float8 <> extract(epoch FROM pg_postmaster_start_time()), false), "
                    "coalesce(split_part(value, ' ', 2)::float8, 0) "
                    "FROM (SELECT NULL) AS one LEFT JOIN meta ON key = %s",
                    (key, worker_key(SERVER_KEY, owner)),
                )
                free, restarted, wait_s = cur.fetchone() or (False, False, 0.0)
                if not free:
                    self._absent.pop(owner, None)
                    continue
                if restarted and not self._absent_long_enough(owner, float(wait_s)):
                    continue
                cur.execute("DELETE FROM workers WHERE owner = %s RETURNING owner", (owner,))
                if cur.fetchone() is None:
                    continue  # another worker reaped it first
                cur.execute("DELETE FROM meta WHERE key = ANY(%s)", (self._worker_keys(owner),))
                moved += self._reclaim(cur, owner)
                self._absent.pop(owner, None)
        if moved:
            logger.warning("%d pages of a worker that stopped were queued again", moved)
        return moved

    def _absent_long_enough(self, owner: str, wait_s: float) -> bool:
        """Whether a worker whose lock went with another server (a restart, a failover)
        has had its ``storage_wait_s`` to take it again, counted from when this worker
        first saw it absent: alive, it is back by then; if not, it gave up."""
        first = self._absent.setdefault(owner, time.monotonic())
        return time.monotonic() - first >= wait_s + RESTART_GRACE_S

    def _give_back_robots(self, cur: Cursor, owner: str) -> None:
        """The robots.txt fetches ``owner`` took go back to the queue."""
        if owner == self.owner:
            self._robots_taken.clear()
        cur.execute(
            "UPDATE hosts SET robots_state = 'pending', robots_owner = '' "
            "WHERE robots_state = 'fetching' AND robots_owner = %s",
            (owner,),
        )
        if cur.rowcount:
            self._robots_pending = 1

    def _reclaim(self, cur: Cursor, owner: str) -> int:
        """Put what ``owner`` held back: its robots.txt fetches, hosts and pages."""
        self._give_back_robots(cur, owner)
        cur.execute(
            "UPDATE hosts SET owner = '', next_fetch_at = greatest(next_fetch_at, "
            "extract(epoch FROM clock_timestamp()) + crawl_delay) WHERE owner = %s",
            (owner,),
        )
        given = cur.rowcount
        if given:
            self._hint(cur, HINT_FREE)
        if given and owner != self.owner:
            # Its pages in progress were waiting in the table all along (see table_state).
            logger.warning("%d hosts of a worker that stopped were given back: its pages "
                           "in progress are queued again", given)  # fmt: skip
        # Pages an older version marked running, counted in the statement.
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
        with self._balancing:
            self._share_hosts()

    def _share_hosts(self) -> None:
        """The body of :meth:`_balance` (``_balancing`` held)."""
        with self._lock:
            self._publish_spare()
            names = list(self._held)
        with self._reading() as cur:
            cur.execute(
                "SELECT w.owner, (SELECT count(*) FROM hosts h WHERE h.owner = w.owner), "
                "coalesce((SELECT m.value::int FROM meta m WHERE m.key = %s || w.owner), 0) "
                "FROM workers w",
                (worker_key(SPARE_KEY, ""),),
            )
            others = {owner: (int(n), int(idle)) for owner, n, idle in cur.fetchall()
                      if owner != self.owner}  # fmt: skip
            cur.execute(f"SELECT count(*) FROM hosts h WHERE {FREE_HOST}")
            free = int((cur.fetchone() or (0,))[0])
            waiting: dict[str, int] = {}
            if others and not free:  # what a hand-over is chosen by
                cur.execute(
                    "SELECT host, n FROM counts WHERE key = 'state:waiting' AND host = ANY(%s)",
                    (names,),
                )
                waiting = {host: int(n) for host, n in cur.fetchall()}
        with self._lock:
            mine = len(self._held)
            self._workers_seen = len(others) + 1
            held_elsewhere = sum(n for n, _idle in others.values())
            self._share = fair_share(mine + held_elsewhere + free, len(others) + 1)
            if free or not others:
                return  # a worker with idle threads leases a free host itself
            if any(h.draining for h in self._held.values()):
                return
            # Those with the fewest pages waiting first (the most recently leased first
            # among equals): a host handed over pauses, and the crawl ends with the host
            # that ends last. (The most recently leased went first: at the end of a
            # crawl, that was any host, and a busy one ended 0.15 s after the others.)
            candidates = sorted(
                (h for h in reversed(self._held.values()) if not h.exhausted),
                key=lambda h: waiting.get(h.data.host, 0),
            )
            if not candidates:
                return
            lacking = sum(max(0, self._share - n) for n, _idle in others.values())
            # Threads that serve every held host at its limit gain nothing from handing
            # one over, which only pauses it (at the end of a crawl, 3 hosts left among
            # 3 workers, one holding 2 at their limits handed one over, and it ended last).
            # Polite hosts want a thread only while in flight: that count cannot tell.
            starved = self._threads_short() or any(held.data.crawl_delay > 0 for held in candidates)
            if mine > self._share and lacking and starved:
                # As many as the others lack at once: the first worker up may hold a
                # few hundred polite hosts before the others join.
                given = candidates[: min(mine - self._share, lacking)]
                why = "fewer hosts than its share"
            elif worth_one_more(
                self._threads_short(),
                max(idle for _n, idle in others.values()),
                candidates[0].data.max_downloads_at_time,
            ):
                given = candidates[:1]
                why = "idle threads"
            else:
                return
            for held in given:
                held.draining = True
                self._awake[held.data.host] = None  # looked at even while it rests
            logger.info("handing %s over to a worker with %s",
                        ", ".join(held.data.host for held in given), why)  # fmt: skip

    def _spare_threads(self) -> int:
        """This worker's downloading threads its hosts leave idle (lock held)."""
        return max(0, self.download_slots - self._threads_wanted_here())

    def _publish_spare(self, cur: Cursor | None = None) -> None:
        """Tell the other workers how many of this worker's downloading threads its hosts
        leave idle, when that changed (lock held): with ``cur``'s transaction, or in one
        of its own."""
        spare = self._spare_threads()
        if spare == self._spare_published:
            return
        with self._transaction() if cur is None else contextlib.nullcontext(cur) as writing:
            self._set_meta(writing, worker_key(SPARE_KEY, self.owner), str(spare))
            self._after_commit(partial(setattr, self, "_spare_published", spare))

    # -- hints: what another worker would see at its next look, told at once -------------
    def _hint(self, cur: Cursor, kind: str) -> None:
        """Tell the other workers ``kind`` (HINT_SPARE, HINT_FREE) as this transaction
        commits, on the crawl's channel (NOTIFY), with the hosts this worker holds and
        its idle threads: each would see it at its next look, up to ``reap_interval``
        later (a worker whose hosts were done waited 0.21 and 0.26 s for two others to
        hand it one each). Only a hint: one lost while a worker reconnects costs that
        wait, nothing else (lock held)."""
        note = f"{kind} {self.owner} {len(self._held)} {self._spare_threads()}"
        cur.execute("SELECT pg_notify(%s, %s)", (self.schema, note))
        logger.debug("hint to the other workers: %s", note)

    def _on_hint(self, note: str) -> None:
        """Another worker's hint, on the dialect's listening thread: share the hosts out
        now (HINT_SPARE) if it could give that worker one, or look for a host to lease
        now, waking an idle thread for it (HINT_FREE). A failure is left to the next
        look, which would have done it."""
        parts = note.split()
        if len(parts) != 4 or not (parts[2] + parts[3]).isdigit():
            return  # not a hint of a worker of this crawl
        kind, sender, held, spare = parts[0], parts[1], int(parts[2]), int(parts[3])
        if sender == self.owner or self.read_only:
            return
        logger.debug("hint from worker %s: %s", sender[:8], note)
        if kind == HINT_SPARE:
            # Only what _share_hosts could act on (a polite crawl of 300 hosts on 3
            # workers hinted 226 times, and each hint cost the others a look).
            with self._lock:
                limits = [h.data.max_downloads_at_time for h in self._held.values()]
                short = self._threads_short()
            # A worker holding no host has none to give (min() of none had dropped the
            # listening connection, and the hints of the next 50 ms with it).
            if limits and (len(limits) > held + 1 or worth_one_more(short, spare, min(limits))):
                try:
                    with contextlib.suppress(Conflict, StateError):
                        self._balance()
                finally:
                    self._forget_unseen()  # as retry_conflicts does after a lost call
        elif kind == HINT_FREE:
            with self._lock:
                self._lease_look, self._next_try = LEASE_LOOK_S[0], 0.0
                if self._spare_threads() > 0:
                    self._wake_downloaders += 1
                    self._wake()

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

    # -- roles one worker plays for all (writing the output) -----------------------------

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

    def _lock_output(self, cur: Cursor) -> None:
        # The worker that writes the output holds this until it closes (see elected).
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self.schema}:unload",))

    @retry_conflicts
    def _elect(self, role: str) -> tuple[bool, str]:
        """(whether this worker holds ``role`` and has not done it for the crawl as it
        stands, the crawl as it stands: its counters by host and state)."""
        with self._atomic() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (f"{self.schema}:{role}",))
            if not (cur.fetchone() or (False,))[0]:
                return False, ""
            # The run too: a refresh that ends as the last run ended is not done yet.
            cur.execute(
                "SELECT (SELECT coalesce(max(run), 0) FROM runs) || ':' || "
                "coalesce(string_agg(host || ' ' || key || ' ' || n, ',' "
                "ORDER BY host, key), '') FROM counts WHERE key LIKE 'state:%%' AND n <> 0"
            )
            as_of = str((cur.fetchone() or ("",))[0])
            cur.execute("SELECT value FROM meta WHERE key = %s", (f"done:{role}",))
            row = cur.fetchone()
            return row is None or row[0] != as_of, as_of

    @retry_conflicts
    def _mark_done(self, role: str, as_of: str) -> None:
        with self._atomic() as cur:
            self._set_meta(cur, f"done:{role}", as_of)
