"""threads.downloading: auto: the DownloadingThreads follow the requests politeness allows.

No test here reads a clock: the loopback server holds answers until it has seen enough
requests at once (a fixed pool of 8 would never get there), and the crawl's own threads
are counted while a page is being answered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from crawling import wait_until
from webserver import Request, Resource

from rccrawler.records import DownloadDemand
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.pool import AUTO_FLOOR, CPU_BOUND, SHRINK_AFTER_S, DownloadingPool

HOSTS = 60
GATE_S = 20.0
"""How long a gated answer waits at most (a bound, not a measure: a pool that does not
grow only makes the test slow before it fails)."""


def open_when(reached: Callable[[], bool]) -> Callable[[Request], Resource]:
    """A start page answered once ``reached()`` held at any request, for good."""
    opened = threading.Event()

    def answer(request: Request) -> Resource:
        if reached():
            opened.set()
        opened.wait(GATE_S)
        return Resource(b"<p>a page</p>")

    return answer


def pool_size() -> int:
    """The crawl's DownloadingThreads that run and are not retiring (one retiring may be
    the very thread waiting for the page being answered)."""
    return sum(
        isinstance(t, DownloadingThread) and t.is_alive() and not t.retiring
        for t in threading.enumerate()
    )


def each_once(server) -> None:
    """Every (host, path) was requested once: none lost, none taken twice."""
    twice = [(h.host, h.path, h.at) for h in server.hits
             if sum(o.host == h.host and o.path == h.path for o in server.hits) > 1]  # fmt: skip
    assert not twice, twice


def slow_hosts(server_ref: list, concurrent: int) -> dict:
    gate = open_when(lambda: server_ref[0].total_in_flight() >= concurrent)
    return {f"h{n}.test": {"/": gate} for n in range(HOSTS)}


@pytest.mark.both_backends
def test_the_pool_grows_past_8_when_many_slow_hosts_are_due(serve, crawler):
    ref: list = []
    server = serve(slow_hosts(ref, AUTO_FLOOR + 4))
    ref.append(server)
    result = crawler.run(list(server.sites), server.resolve, threads={"parsing": 2},
                         crawl={"max_downloads_at_time": 1, "timeout_s": 3 * GATE_S})  # fmt: skip
    assert result.finished
    assert server.peak_total_in_flight > AUTO_FLOOR
    assert result.manager.pool.peak > AUTO_FLOOR
    assert sum(site["pages_done"] for site in result.report["sites"].values()) == HOSTS
    each_once(server)


def test_the_pool_never_exceeds_max_downloading(serve, crawler):
    ref: list = []
    server = serve(slow_hosts(ref, 12))
    ref.append(server)
    result = crawler.run(list(server.sites), server.resolve,
                         threads={"parsing": 2, "max_downloading": 12},
                         crawl={"max_downloads_at_time": 1, "timeout_s": 3 * GATE_S})  # fmt: skip
    assert result.finished
    assert result.manager.pool.peak == 12  # it got there (the gate opened at 12)...
    assert server.peak_total_in_flight <= 12  # ...and never past it


def test_the_pool_shrinks_back_when_hosts_run_out(serve, crawler):
    ref: list = []
    sites = slow_hosts(ref, AUTO_FLOOR + 4)
    seen: list[int] = []

    def last_page(request: Request) -> Resource:
        # Every other host is done: wait (bounded) for the pool to retire its threads.
        wait_until(lambda: seen.append(pool_size()) or seen[-1] <= AUTO_FLOOR,
                   GATE_S, interval=0.05)  # fmt: skip
        return Resource(b"the last page")

    first_page = Resource(b"<a href='/last'>last</a>")

    sites["long.test"] = {"/": first_page, "/last": last_page}
    server = serve(sites)
    ref.append(server)
    # long.test's last page waits for a parse of its start page: by then the other hosts
    # may still be answered; the last page is held until the pool is back at its floor.
    result = crawler.run(list(server.sites), server.resolve, threads={"parsing": 2},
                         crawl={"max_downloads_at_time": 1, "timeout_s": 3 * GATE_S})  # fmt: skip
    assert result.finished
    assert result.manager.pool.peak > AUTO_FLOOR
    assert seen and seen[-1] <= AUTO_FLOOR, seen
    assert result.report["sites"]["long.test"]["pages_done"] == 2
    each_once(server)


class Demand:
    """What a DataManager tells the pool (the numbers under test are the pool's)."""

    def __init__(self) -> None:
        self.allowed = 0
        self.noted: tuple[int, int] = (0, 0)

    def download_demand(self, limit: int) -> DownloadDemand:
        return DownloadDemand(0, min(limit, self.allowed))

    def note_download_threads(self, busy: int, total: int) -> None:
        self.noted = (busy, total)


class Clocks:
    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0

    def advance(self, seconds: float, cpu_share: float = 0.1) -> None:
        self.now += seconds
        self.cpu += seconds * cpu_share


class Idle(threading.Thread):
    """A thread the pool can retire (never started)."""

    error = None
    retiring = False

    def retire(self) -> None:
        self.retiring = True


def test_an_automatic_pool_doubles_towards_the_demand_and_keeps_the_recent_peak():
    data, clocks = Demand(), Clocks()
    pool = DownloadingPool(lambda i: Idle(), data, fixed=None, cap=100,  # type: ignore[arg-type]
                           clock=lambda: clocks.now, cpu_clock=lambda: clocks.cpu)  # fmt: skip
    assert len(pool.first_threads()) == AUTO_FLOOR
    data.allowed = 60
    sizes = []
    for _ in range(5):
        clocks.advance(0.6)
        pool.adjust()
        sizes.append(len(pool.live))
    assert sizes == [16, 32, 63, 63, 63]  # doubling, up to 60 and its headroom (60/16)
    assert data.noted == (0, 63)
    data.allowed = 0  # the hosts ran out: kept for a while, then back to the floor
    clocks.advance(0.6)
    pool.adjust()
    assert len(pool.live) == 63
    clocks.advance(SHRINK_AFTER_S)
    pool.adjust()
    assert len(pool.live) == AUTO_FLOOR
    assert all(t.retiring for t in pool.retired) and len(pool.retired) == 63 - AUTO_FLOOR


def test_an_automatic_pool_starts_at_what_politeness_allows_at_the_start():
    data, clocks = Demand(), Clocks()
    data.allowed = 300  # 300 sites, each with its robots.txt due now
    pool = DownloadingPool(lambda i: Idle(), data, fixed=None, cap=256,  # type: ignore[arg-type]
                           clock=lambda: clocks.now, cpu_clock=lambda: clocks.cpu)  # fmt: skip
    assert len(pool.first_threads()) == 256  # the cap, not the floor
    data.allowed = 3
    small = DownloadingPool(lambda i: Idle(), data, fixed=None, cap=256,  # type: ignore[arg-type]
                            clock=lambda: clocks.now, cpu_clock=lambda: clocks.cpu)  # fmt: skip
    assert len(small.first_threads()) == AUTO_FLOOR


def test_a_cpu_bound_crawl_gets_no_more_threads_and_gives_back_those_it_has():
    data, clocks = Demand(), Clocks()
    pool = DownloadingPool(lambda i: Idle(), data, fixed=None, cap=256,  # type: ignore[arg-type]
                           clock=lambda: clocks.now, cpu_clock=lambda: clocks.cpu)  # fmt: skip
    pool.first_threads()
    data.allowed = 400
    clocks.advance(0.6, cpu_share=0.2)
    pool.adjust()
    assert len(pool.live) == 16
    clocks.advance(0.6, cpu_share=CPU_BOUND)
    pool.adjust()
    assert len(pool.live) == 16  # the interpreter is busy: more threads would queue for it
    clocks.advance(0.6, cpu_share=1.0)
    pool.adjust()
    assert len(pool.live) == 12  # saturated: a quarter fewer a look, down to the floor
    for _ in range(5):
        clocks.advance(0.6, cpu_share=1.0)
        pool.adjust()
    assert len(pool.live) == AUTO_FLOOR


def test_a_fixed_pool_stays_as_it_is():
    data, clocks = Demand(), Clocks()
    pool = DownloadingPool(lambda i: Idle(), data, fixed=3, cap=256,  # type: ignore[arg-type]
                           clock=lambda: clocks.now, cpu_clock=lambda: clocks.cpu)  # fmt: skip
    assert len(pool.first_threads()) == 3
    data.allowed = 400
    clocks.advance(1.0)
    assert pool.adjust() == []
    assert len(pool.live) == 3 and data.noted == (0, 3)
