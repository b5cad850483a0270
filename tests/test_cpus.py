"""threads.one_core: the crawl's threads on one CPU core (but for large parses), its
processes not (Linux)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from taskplugins import CpuRecorder
from webserver import Resource

from rccrawler.config import settings_from_mapping
from rccrawler.cpus import LARGE_PARSE_BYTES, CrawlCores
from rccrawler.exceptions import ConfigError
from rccrawler.workers import Worker

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs",
)


def site_with_a_large_page() -> dict[str, Resource]:
    """Small pages, and one over LARGE_PARSE_BYTES (lexbor's work, worth the other core)."""
    small = [f"/p{n}" for n in range(12)]
    links = "".join(f'<a href="{path}">{path}</a> ' for path in [*small, "/large"])
    site = {"/": Resource(f"<html><body>{links}</body></html>".encode())}
    for path in small:
        site[path] = Resource(f'<html><body><a href="/">home</a> {path}</body></html>'.encode())
    filler = "<p>words of a long page</p>" * (LARGE_PARSE_BYTES // 20)
    site["/large"] = Resource(f'<html><body><a href="/">home</a>{filler}</body></html>'.encode())
    return site


@pytest.mark.parametrize("one_core", [True, False])
def test_one_core_keeps_the_crawl_threads_on_one_cpu_but_large_parses(
    serve, crawler, one_core, monkeypatch
):
    from rccrawler import cpus

    # Where the crawl keeps its threads, not where it moves them (the tests below): on a
    # busy machine a slow crawl would look at the cores and might move.
    monkeypatch.setattr(cpus, "LOOK_EVERY_S", 3600.0)
    allowed = frozenset(os.sched_getaffinity(0))
    CpuRecorder.seen.clear()
    server = serve({"a.test": site_with_a_large_page()})
    result = crawler.run(
        ["a.test"], server.resolve,
        threads={"downloading": 3, "parsing": 2, "one_core": one_core},
        downloading_thread="taskplugins.CpuRecordingDownloader",
        parsing_thread="taskplugins.CpuRecordingParser",
    )  # fmt: skip
    assert len(result.graph("a.test").urls) == 14  # the crawl is whole either way
    seen = CpuRecorder.seen
    downloads = {cpus for (kind, _url), cpus in seen.items() if kind == "download"}
    assert len(downloads) == 1
    (one,) = downloads
    assert (len(one) == 1 and one <= allowed) if one_core else one == allowed
    assert seen[("parse", "http://a.test/large")] == allowed
    small = {cpus for (kind, url), cpus in seen.items() if kind == "parse" and "large" not in url}
    assert small == {one}  # back on the core after the large page, whichever thread had it
    assert frozenset(os.sched_getaffinity(0)) == allowed  # this (the main) thread: untouched


def test_a_process_started_from_a_kept_thread_takes_the_crawl_process_cpus():
    """A child inherits the CPUs of the thread that starts it: a search worker started
    by a parsing thread on one core would be on that core too, unless it asks."""
    allowed = sorted(os.sched_getaffinity(0))
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    asked = "from rccrawler.cpus import use_the_crawl_process_cpus as u; u(); " + show
    outputs: dict[str, str] = {}

    def kept_thread() -> None:
        from rccrawler.cpus import crawl_cores

        cores = crawl_cores()
        assert cores is not None and cores.keep_this_thread() is not None  # on one core
        outputs["core"] = str([cores.core])
        for name, code in (("inherited", show), ("asked", asked)):
            outputs[name] = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                check=True,
            ).stdout.strip()  # fmt: skip

    thread = threading.Thread(target=kept_thread)
    thread.start()
    thread.join(120)
    assert outputs["inherited"] == outputs["core"]
    assert outputs["asked"] == str(allowed)


def test_a_worker_spawned_from_a_kept_thread_runs_on_the_crawl_process_cpus():
    """A worker process a parsing thread starts as a fresh interpreter (the large pages'
    worker, a search worker once threads run) asks for the crawl's CPUs itself."""
    allowed = os.sched_getaffinity(0)
    seen: dict[str, object] = {}

    def kept_thread() -> None:
        from rccrawler.cpus import crawl_cores

        cores = crawl_cores()
        assert cores is not None and cores.keep_this_thread() is not None  # on one core
        worker = Worker(fork=False)
        try:
            seen["ready"] = worker.ready(wait=60)
            seen["cpus"] = worker.call(os.sched_getaffinity, 0)
        finally:
            worker.close()

    thread = threading.Thread(target=kept_thread)
    thread.start()
    thread.join(120)
    assert seen == {"ready": True, "cpus": allowed}


@pytest.mark.parametrize("value", [1, "yes", None])
def test_one_core_must_be_true_or_false(value):
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"sites": ["a.test"], "threads": {"one_core": value}})
    assert caught.value.key == "threads.one_core"


def test_one_core_is_on_unless_turned_off():
    assert settings_from_mapping({"sites": ["a.test"]}).one_core is True
    off = settings_from_mapping({"sites": ["a.test"], "threads": {"one_core": False}})
    assert off.one_core is False


def test_a_refused_core_leaves_the_thread_running_where_it_was(monkeypatch):
    """A container may forbid changing CPUs: the thread goes on unkept, nothing raises."""
    from rccrawler import cpus

    asked: list[object] = []

    def refuse(pid: int, mask: object) -> None:
        asked.append(mask)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(cpus.os, "sched_setaffinity", refuse)
    crawl = cpus.crawl_cores()
    assert crawl is not None
    assert crawl.keep_this_thread() is None
    cores = cpus.ThreadCores(crawl)
    cores.place_parse(cpus.LARGE_PARSE_BYTES - 1)  # refused: logged, not raised
    cores.place_parse(0)  # the same core: not asked again
    assert len(asked) == 2  # keep_this_thread() once, the first small parse once
    crawl.move_to(min(crawl.all))  # no thread kept: nothing to move, nothing raised
    assert len(asked) == 2


# -- moving to an idler core ------------------------------------------------------------


@pytest.mark.parametrize(
    ("core", "busy", "own", "expected"),
    [
        (1, {0: 0.05, 1: 1.0}, 0.95, 1),  # the crawl alone on its core: stay
        (1, {0: 0.15, 1: 1.0}, 0.85, 1),  # a test server's share: not worth a move
        (1, {0: 0.0, 1: 1.0}, 0.5, 0),  # a second crawl shares core 1, core 0 is idle
        (1, {0: 1.0, 1: 1.0}, 0.5, None),  # every core busy with others' work: every core
        (1, {0: 0.9, 1: 1.0}, 0.8, 1),  # others busy elsewhere only: stay
        (1, {0: 0.0, 1: 1.0}, 1.3, 1),  # large parses elsewhere: own counts more
        (1, {0: 0.6, 1: 1.0, 2: 0.1, 3: 0.1}, 0.3, 2),  # the idlest, the lowest first
        (None, {0: 1.0, 1: 1.0}, 1.0, None),  # on every core, still crowded: stay so
        (None, {0: 0.6, 1: 0.5}, 1.0, 1),  # the others left: the idlest core again
    ],
)
def test_a_crawl_moves_only_to_a_clearly_better_place(core, busy, own, expected):
    from rccrawler.cpus import better_place

    assert better_place(core, busy, own, frozenset(busy)) == expected
    assert better_place(1, {0: 0.0, 1: 1.0}, 0.0, frozenset({1})) == 1  # nowhere else


@contextlib.contextmanager
def kept_threads(crawl, count: int) -> Iterator[list[int]]:
    """``count`` threads kept on the crawl's core (their native ids) while in the block."""
    release = threading.Event()
    kept: list[int] = []
    ready = threading.Barrier(count + 1)

    def run() -> None:
        assert crawl.keep_this_thread() is not None
        kept.append(threading.get_native_id())
        ready.wait(30)
        release.wait(60)
        crawl.leave()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        ready.wait(30)
        yield kept
    finally:
        release.set()
        for thread in threads:
            thread.join(30)


def test_two_looks_that_agree_move_every_kept_thread():
    """The loads are given here (the rule's input); the moves are the kernel's."""
    from rccrawler.cpus import CrawlCores

    allowed = frozenset(os.sched_getaffinity(0))
    now = [0.0]

    busy_core: list[int] = []

    def busy() -> dict[int, float]:  # the crawl's first core always busy, the others idle
        return {cpu: (now[0] if cpu in busy_core else 0.0) for cpu in allowed}

    # The crawl uses half of its core: another process the other half.
    crawl = CrawlCores(allowed, busy=busy, own=lambda: now[0] / 2, clock=lambda: now[0])
    first = crawl.core
    busy_core.append(first)
    with kept_threads(crawl, 3) as kept:
        assert {frozenset(os.sched_getaffinity(tid)) for tid in kept} == {frozenset({first})}
        now[0] = 1.0
        assert crawl.look() is False  # too soon: no reading taken
        moved = []
        for second in (3.0, 6.0, 9.0):  # each look a few seconds on
            now[0] = second
            moved.append(crawl.look())
        target = min(allowed - {first})  # the idle ones tie: the lowest numbered
        assert moved == [False, True, False]  # the second look that agrees moves
        assert crawl.core == target and crawl.moves == 1
        assert {frozenset(os.sched_getaffinity(tid)) for tid in kept} == {frozenset({target})}


def test_a_crowded_crawl_runs_on_every_core_until_a_core_is_free():
    """Every core busy with others' work: the kept threads may run anywhere (the
    kernel spreads three crawls over two cores better than cages do); once the others
    are gone, they are kept on the idlest core again. Loads given, moves the kernel's."""
    from rccrawler.cpus import CrawlCores

    allowed = frozenset(os.sched_getaffinity(0))
    now, totals, own = [0.0], dict.fromkeys(allowed, 0.0), [0.0]

    def advance(seconds: float, rates: dict[int, float], own_rate: float) -> None:
        now[0] += seconds
        own[0] += own_rate * seconds
        for cpu in allowed:
            totals[cpu] += rates.get(cpu, 0.0) * seconds

    crawl = CrawlCores(allowed, busy=lambda: dict(totals), own=lambda: own[0],
                       clock=lambda: now[0])  # fmt: skip
    with kept_threads(crawl, 2) as kept:
        crowded = dict.fromkeys(allowed, 1.0)  # every core full, half of ours is ours
        looks = []
        for _ in range(2):
            advance(3.0, crowded, 0.5)
            looks.append(crawl.look())
        assert looks == [False, True] and crawl.core is None
        assert {frozenset(os.sched_getaffinity(tid)) for tid in kept} == {allowed}
        alone = {max(allowed): 0.9}  # the others ended; the crawl's own work remains
        looks = []
        for _ in range(3):
            advance(3.0, alone, 0.9)
            looks.append(crawl.look())
        assert looks == [False, True, False]
        idlest = min(allowed - {max(allowed)})
        assert crawl.core == idlest and crawl.moves == 2
        assert {frozenset(os.sched_getaffinity(tid)) for tid in kept} == {frozenset({idlest})}


ENDS_WITH_ITS_STDIN = """
import sys, threading
ended = threading.Event()  # set when the test closes this process's stdin
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
"""


@contextlib.contextmanager
def python_process(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``python -c`` of ``ENDS_WITH_ITS_STDIN`` and ``code``, its output piped; on the
    way out its stdin is closed, so it ends, and it is reaped (killed if it is late)."""
    process = subprocess.Popen(
        [sys.executable, "-c", ENDS_WITH_ITS_STDIN + code, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        process.stdout.close()


SPINNER = """
import os, time
os.sched_setaffinity(0, {int(sys.argv[1])})
print("spinning", flush=True)
end = time.monotonic() + 60
while not ended.is_set() and time.monotonic() < end:
    pass
"""


def test_a_crawl_leaves_a_core_another_process_keeps_busy(monkeypatch):
    """A busy process on the crawl's core, real loads from /proc/stat: the crawl's
    threads move to another core."""
    from rccrawler import cpus

    monkeypatch.setattr(cpus, "LOOK_EVERY_S", 0.2)
    crawl = cpus.crawl_cores()
    assert crawl is not None
    start = crawl.core
    pause = threading.Event()  # never set: polled looks, with a deadline
    with python_process(SPINNER, str(start)) as spinner, kept_threads(crawl, 2) as kept:
        assert spinner.stdout is not None and spinner.stdout.readline() == "spinning\n"
        deadline = time.monotonic() + 30
        while crawl.core == start and time.monotonic() < deadline:
            crawl.look()
            pause.wait(0.05)  # the loads of the next interval accumulate meanwhile
        assert crawl.core != start
        assert {frozenset(os.sched_getaffinity(tid)) for tid in kept} == {crawl.one}


class SharedMachine:
    """The cores as two busy crawls see them, without the rest of the machine: each
    crawl's work is one core's worth, run where the kernel keeps its threads (their real
    CPUs, read back from the kernel); crawls kept on one core share it, a crawl on every
    core takes the core fewest crawls are kept on. Its clock moves only when the test
    moves it, so the machine's real load (another test run beside this one) changes
    nothing that the crawls see."""

    def __init__(self, allowed: frozenset[int]) -> None:
        self.allowed = allowed
        self.now = 0.0
        self.busy = dict.fromkeys(allowed, 0.0)
        self.own: dict[int, float] = {}
        self.threads: dict[int, list[int]] = {}

    def crawl(self, number: int) -> CrawlCores:
        self.own[number] = 0.0
        return CrawlCores(self.allowed, busy=lambda: dict(self.busy),
                          own=lambda: self.own[number], clock=lambda: self.now)  # fmt: skip

    def where(self, number: int) -> frozenset[int]:
        """The CPUs of a crawl's kept threads, as the kernel has them (all alike)."""
        (cpus,) = {frozenset(os.sched_getaffinity(tid)) for tid in self.threads[number]}
        return cpus

    def advance(self, seconds: float) -> None:
        places = {number: self.where(number) for number in self.own}
        kept = {cpu: [n for n, cpus in places.items() if cpus == {cpu}] for cpu in self.allowed}
        for number, cpus in places.items():  # on every core: where fewest are kept
            if len(cpus) > 1:
                kept[min(sorted(cpus), key=lambda cpu: len(kept[cpu]))].append(number)
        for cpu, crawls in kept.items():
            if crawls:
                self.busy[cpu] += seconds
                for number in crawls:
                    self.own[number] += seconds / len(crawls)
        self.now += seconds


@pytest.mark.parametrize("trial", range(20))
def test_two_busy_crawls_started_on_one_core_end_on_two_cores(trial):
    """Both start on the same core; each sees the other's load there and moves. Each
    looks at its own random times, as a crawl does, and a move needs two looks that
    agree, so they part rather than move together (20 trials). The loads are those of
    the two crawls alone (:class:`SharedMachine`), so the test holds on a busy machine;
    the moves are the kernel's. Real loads move a crawl in the test above."""
    allowed = frozenset(os.sched_getaffinity(0))
    machine = SharedMachine(allowed)
    made: list[CrawlCores] = []

    def make_on_the_last_cpu() -> None:  # both crawls start on the core their start ran on
        os.sched_setaffinity(0, {max(allowed)})
        made.extend(machine.crawl(number) for number in (0, 1))

    maker = threading.Thread(target=make_on_the_last_cpu)
    maker.start()
    maker.join(30)
    first, second = made
    assert first.core == second.core == max(allowed)
    with kept_threads(first, 2) as one, kept_threads(second, 2) as other:
        machine.threads = {0: one, 1: other}
        for _ in range(600):  # a minute of looks, a tenth of a second apart
            machine.advance(0.1)
            first.look()
            second.look()
            if first.core != second.core and None not in (first.core, second.core):
                break
        assert first.core is not None and second.core is not None
        assert first.core != second.core
        assert machine.where(0) == {first.core} and machine.where(1) == {second.core}
    # Most part at the first move (94% of 2,000 trials); when both move at once they
    # try again, each time about one in ten, well within the minute.
    assert first.moves + second.moves >= 1


def test_a_crawl_starts_on_the_core_its_start_ran_on():
    """Workers started together are spread by the scheduler as they start: each keeps
    the core it was given rather than all taking the same one."""
    from rccrawler.cpus import crawl_cores

    allowed = sorted(os.sched_getaffinity(0))
    started: dict[int, int | None] = {}

    def start_on(cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only; the crawl is made here
        cores = crawl_cores()  # on the CPUs of the process (its main thread's)
        started[cpu] = None if cores is None else cores.core

    for cpu in allowed:
        thread = threading.Thread(target=start_on, args=(cpu,))
        thread.start()
        thread.join(30)
    assert started == {cpu: cpu for cpu in allowed}
