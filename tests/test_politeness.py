"""Politeness kept by the DataManager (SPEC §5), on a clock the test moves by hand.

The crawl delay is kept where pages are leased: a page of a host is handed out no sooner
than ``crawl_delay`` after the host's last lease or request, in the storage's clock. These
tests inject that clock, so they assert the exact schedule, whatever the machine's load;
the crawl tests show the same rules end to end from the server's log.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rccrawler.data.postgres import PostgresDataManager
from rccrawler.data.sql import SQLDataManager
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.records import DownloadResult, FoundLink, HostData, PageData

pytestmark = pytest.mark.both_backends

HOST = "a.test"
START = 1000.0


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


OpenData = Callable[[Clock], SQLDataManager]


@contextlib.contextmanager
def data_opener(storage: str, folder: Path) -> Iterator[OpenData]:
    """open_data(clock): a DataManager on ``storage``, all of them on one crawl."""
    schema = f"rc_test_{uuid.uuid4().hex[:12]}"
    opened: list[SQLDataManager] = []

    def open_one(clock: Clock) -> SQLDataManager:
        if storage == "sqlite":
            data: SQLDataManager = SQLiteDataManager(folder / "crawl.sqlite3", clock=clock)
        else:
            data = PostgresDataManager(storage, schema, clock=clock)
        data.open()
        opened.append(data)
        return data

    try:
        yield open_one
    finally:
        for data in opened:
            data.close()
        if storage != "sqlite":
            PostgresDataManager.drop(storage, schema)


@pytest.fixture
def open_data(storage: str, tmp_path: Path) -> Iterator[OpenData]:
    with data_opener(storage, tmp_path) as opener:
        yield opener


def start_site(
    data: SQLDataManager,
    clock: Clock,
    *,
    delay: float,
    robots_delay: float | None = None,
    pages: int = 6,
    in_flight: int = 3,
) -> None:
    """A site with its robots.txt read and ``pages`` pages waiting at level 1, due now."""
    site = HostData(host=HOST, crawl_delay=delay, max_downloads_at_time=in_flight)
    data.add_site(site, f"http://{HOST}/", f"http://{HOST}/")
    fetch_robots(data, robots_delay)
    urls = [f"http://{HOST}/{n}" for n in range(pages)]
    data.add_links(HOST, [FoundLink(url, url) for url in urls], level=1)
    wait = max(delay, robots_delay or 0.0)
    if wait:
        # robots.txt was a request: nothing before the delay (this take makes a
        # PostgreSQL worker hold the host, with the delay brought into its clock).
        assert take(data) is None
        clock.now += wait


def fetch_robots(data: SQLDataManager, robots_delay: float | None = None) -> None:
    """robots.txt of HOST as a DownloadingThread fetches it: taken, its request sent now,
    its answer (a 404, with ``robots_delay`` as its Crawl-delay) stored."""
    robots = data.take_robots()
    assert robots is not None and robots.host == HOST
    data.mark_request_sent(HOST)
    data.store_robots(HOST, 404, "", robots_delay, blocked=False)


def take(data: SQLDataManager) -> PageData | None:
    """take_for_download(), once the DataManager would look for a host to lease again: a
    PostgreSQL worker looks at most every 20 ms of real time, and a None that came from
    that pause would say nothing about the crawl delay."""
    looks_again_at: float = getattr(data, "_next_try", 0.0)
    if time.monotonic() < looks_again_at:
        threading.Event().wait(looks_again_at - time.monotonic())
    return data.take_for_download()


def test_a_host_s_pages_are_leased_a_crawl_delay_apart(open_data: OpenData) -> None:
    clock = Clock()
    data = open_data(clock)
    start_site(data, clock, delay=0.25, in_flight=5)
    leased = [take(data)]
    assert leased[0] is not None
    for _ in range(3):
        lease_at = clock.now
        assert take(data) is None  # five may be in flight, but none before the delay
        clock.now = lease_at + 0.249
        assert take(data) is None
        clock.now = lease_at + 0.25
        page = take(data)
        assert page is not None
        leased.append(page)
    assert len({page.id for page in leased if page is not None}) == 4


def test_an_idle_downloader_waits_until_the_host_is_due_and_no_longer(
    open_data: OpenData,
) -> None:
    """A take that finds the host held back by its delay says when the host is due, and
    an idle downloading thread waits no longer than that (``_due_in`` bounds its wait in
    ``wait_for_work``). A PostgreSQL worker waited for its next look for a host to lease
    instead, up to 50 ms: with a delay of 5 ms the PostgreSQL docs took 54 s, not 6."""
    clock = Clock()
    data = open_data(clock)
    start_site(data, clock, delay=0.25, in_flight=5)
    assert take(data) is not None
    lease_at = clock.now
    for before_due in (0.2, 0.01, 0.001):
        clock.now = lease_at + 0.25 - before_due
        assert take(data) is None
        assert 0 < data._due_in() <= before_due + 1e-9
    clock.now = lease_at + 0.25
    assert take(data) is not None


def test_the_delay_counts_from_the_request_sent_when_that_is_later(open_data: OpenData) -> None:
    clock = Clock()
    data = open_data(clock)
    start_site(data, clock, delay=0.25)
    assert take(data) is not None
    clock.now = sent_at = clock.now + 0.1
    data.mark_request_sent(HOST)  # the request left 0.1 s after its lease
    clock.now = sent_at + 0.15
    assert take(data) is None  # 0.25 s after the lease, 0.15 s after the request
    clock.now = sent_at + 0.25
    assert take(data) is not None


@pytest.mark.parametrize(
    ("robots_delay", "later_by"),
    [(None, 0.0), (1.0, 0.75)],
    ids=["the site's delay", "a larger one robots.txt names"],
)
def test_the_delay_after_robots_txt_counts_from_its_request_not_its_answer(
    open_data: OpenData, robots_delay: float | None, later_by: float
) -> None:
    """robots.txt is a request like a page: the host's next one is due a delay after it
    was sent, however late the answer came, and a larger delay robots.txt names counts
    from then too. Counted from the answer, every host's first page came a latency late
    (300 polite hosts with 0.3 s answers: 1.32 s after robots.txt, at a delay of 1 s).
    The host row is read back in the storage's own clock (PostgreSQL's, on PostgreSQL),
    so the answer's lateness here is the injected clock's and the few real milliseconds
    between the two calls."""
    clock = Clock()
    data = open_data(clock)
    url = f"http://{HOST}/"
    data.add_site(HostData(host=HOST, crawl_delay=0.25), url, url)
    assert data.take_robots() is not None
    data.mark_request_sent(HOST)
    sent = data.host(HOST)
    assert sent is not None
    clock.now += 0.2  # the answer comes 0.2 s after the request
    data.store_robots(HOST, 200, "User-agent: *\nAllow: /\n", robots_delay, blocked=False)
    stored = data.host(HOST)
    assert stored is not None
    assert stored.next_fetch_at == pytest.approx(sent.next_fetch_at + later_by, abs=1e-6)


@pytest.mark.parametrize(
    ("crawl_delay", "robots_delay"),
    [(0.01, 0.25), (0.25, 0.05)],
    ids=["a larger robots delay wins", "a smaller one does not lower it"],
)
def test_the_larger_of_the_two_delays_is_kept(
    open_data: OpenData, crawl_delay: float, robots_delay: float
) -> None:
    clock = Clock()
    data = open_data(clock)
    start_site(data, clock, delay=crawl_delay, robots_delay=robots_delay)
    host = data.host(HOST)
    assert host is not None and host.crawl_delay == 0.25
    lease_at = clock.now
    assert take(data) is not None
    clock.now = lease_at + 0.24
    assert take(data) is None
    clock.now = lease_at + 0.25
    assert take(data) is not None


def test_no_more_than_the_host_limit_is_in_flight(open_data: OpenData) -> None:
    clock = Clock()
    data = open_data(clock)
    start_site(data, clock, delay=0.0, in_flight=2)
    first, second = take(data), take(data)
    assert first is not None and second is not None
    clock.now += 60
    assert take(data) is None  # two in flight, however long it waits
    data.store_download(first.id, DownloadResult(status=404), "")
    assert take(data) is not None


def test_another_worker_waits_out_the_delay_of_the_host_s_last_request(
    postgresql: str, tmp_path: Path
) -> None:
    """Two workers of one crawl: only the one that holds a host leases its pages, and a
    worker that stops gives the host back a whole crawl delay ahead (it may have sent a
    request just then), which the next holder waits out.

    Each worker has its own clock; the host row carries "seconds from now" between them,
    so the real time between the two (well under the 10 s of margin) only shortens it.
    """
    clock_a, clock_b = Clock(), Clock()
    with data_opener(postgresql, tmp_path) as open_data:
        worker_a, worker_b = open_data(clock_a), open_data(clock_b)
        two_workers_share_a_host(worker_a, clock_a, worker_b, clock_b)


def two_workers_share_a_host(
    worker_a: SQLDataManager, clock_a: Clock, worker_b: SQLDataManager, clock_b: Clock
) -> None:
    start_site(worker_a, clock_a, delay=600.0, pages=2)
    page = take(worker_a)
    assert page is not None
    worker_a.mark_request_sent(HOST)
    assert take(worker_b) is None  # worker A holds the host
    worker_a.store_download(page.id, DownloadResult(status=404), "")
    worker_a.close()  # its host and its claimed pages go back
    assert take(worker_b) is None
    clock_b.now += 590
    assert take(worker_b) is None
    clock_b.now += 10
    assert take(worker_b) is not None
