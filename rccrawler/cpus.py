"""Where the crawl's threads run: on one CPU core unless ``threads.one_core`` is false.

The crawl's Python runs one thread at a time (the GIL), handed over at every socket
read, SQLite step and lock. Between two threads on one core a handover is a switch;
between cores it is a wake-up of the other core, which on a virtual machine may first
have to be scheduled, and the GIL's and the data's cache lines move with it. On a
fast server (loopback) with small pages that made a crawl of the PostgreSQL docs take
1.2 to 1.35 times as long on two cores as on one (paired runs; docs/performance.md).

What one core would give up is work done outside the GIL in parallel, chiefly
lexbor's parse of a large page: a parsing thread leaves the core for the parse of a
page of :data:`LARGE_PARSE_BYTES` or more (the other core is worth a handover there)
and comes back for a small one.

The kernel cannot move kept threads, so the crawl places and moves them itself: the
:class:`CrawlCores` of a crawl starts on the core the scheduler ran the crawl's start
on (workers started together are spread already), then watches, every few seconds,
how busy each core was with work not its own (another crawl, a build) and moves all
its threads to a core that was clearly idler, twice in a row (:func:`better_place`).
Two crawls that start on one core so end up on two; three on two cores leave the
kernel to spread them, on every core, until a core is free again.

Linux only (``os.sched_setaffinity``); elsewhere the setting changes nothing. Only the
crawl's threads are kept: the main thread, and so every process the crawl starts from
it, keeps the CPUs it was given; a process started from a crawl thread (a search index
worker) calls :func:`use_the_crawl_process_cpus`.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = [
    "LARGE_PARSE_BYTES",
    "CrawlCores",
    "ThreadCores",
    "better_place",
    "cpu_busy_seconds",
    "crawl_cores",
    "current_cpu",
    "use_the_crawl_process_cpus",
]

logger = logging.getLogger(__name__)

LARGE_PARSE_BYTES = 65536
"""A body this large is parsed on any core: mostly lexbor's work, outside the GIL (the
PostgreSQL docs' pages average 14 KB, the Python and SQLAlchemy docs' about 100 and 140;
kept on one core throughout, those two crawled 1.04 and 1.08 times as long)."""

MOVE_MARGIN = 0.3
"""A crawl moves to another core when its own core was busier with others' work than
that one by this share of the time, at two looks in a row: above what a test server on
loopback adds (nginx serving the PostgreSQL docs: about 0.15), below what a second
busy crawl sharing the core takes from it (0.5)."""
LOOK_EVERY_S = 2.0
"""About how often a crawl looks at the cores' load (from 0.75 to 1.25 times this, at
random, so that two crawls sharing a core do not both move at the same moment)."""

_PROC_STAT = Path("/proc/stat")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_busy_seconds(proc_stat: Path = _PROC_STAT) -> dict[int, float]:
    """Seconds each CPU has been busy since boot (everything but idle and I/O wait),
    from Linux's ``/proc/stat``; empty where there is none."""
    try:
        lines = proc_stat.read_text().splitlines()
    except OSError:
        return {}
    busy: dict[int, float] = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 5:
            ticks = [int(value) for value in fields[:8]]
            idle = ticks[3] + ticks[4]  # idle, iowait (guest time is inside user)
            busy[int(name[3:])] = (sum(ticks) - idle) / _TICKS_PER_S
    return busy


def current_cpu() -> int | None:
    """The CPU the calling thread last ran on (Linux's ``/proc/thread-self/stat``), or
    None where it cannot be read."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[36])  # field 39, "processor"
    except (OSError, IndexError, ValueError):
        return None


def better_place(
    core: int | None, busy: Mapping[int, float], own: float, allowed: frozenset[int]
) -> int | None:
    """Where a crawl's threads should run: ``core`` (None: every core) to stay, another
    core to move there, None to leave them to the kernel on every core.

    ``busy`` is the share of a recent interval each CPU was busy, ``own`` the share the
    crawl's process used (counted as all on ``core``: its large parses elsewhere make
    its own core look idler, so it moves later, never sooner). A crawl moves to a core
    clearly idler than its own; when every core is as busy with others' work as its own
    (three crawls on two cores), one core is a cage, and the kernel spreads the load
    better; once the others' work leaves a whole core free, the crawl takes the idlest.
    """
    loads = {cpu: share for cpu, share in busy.items() if cpu in allowed}
    if len(loads) < 2 or (core is not None and core not in loads):  # nowhere else to go
        return core
    if core is None:
        others = sum(loads.values()) - own
    else:
        others = loads[core] = max(0.0, loads[core] - own)
    idlest = min(sorted(loads), key=loads.__getitem__)  # ties: the lowest numbered
    if core is None:
        return idlest if others < MOVE_MARGIN else None
    if loads[core] - loads[idlest] > MOVE_MARGIN:
        return idlest
    return None if loads[core] > MOVE_MARGIN else core


class CrawlCores:
    """The one core a crawl's threads share, and every thread kept on it.

    Threads join with :meth:`keep_this_thread`; the RoutineThread calls :meth:`look`,
    which moves them all where :func:`better_place` says. A thread that is parsing a
    large page at that moment is moved too; it returns to the crawl's core at its next
    small parse either way.
    """

    def __init__(
        self,
        allowed: frozenset[int],
        *,
        busy: Callable[[], dict[int, float]] = cpu_busy_seconds,
        own: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.all = allowed
        here = current_cpu()
        # Where the scheduler runs the crawl's start: two workers started together are
        # already spread. Elsewhere, not core 0, which takes most of the interrupts.
        self.core: int | None = here if here in allowed else max(allowed)
        """The crawl's core; None while its threads run on every core (crowded)."""
        self._busy, self._own, self._clock = busy, own, clock
        self._lock = threading.Lock()
        self._threads: dict[int, ThreadCores] = {}
        self._last = (self._clock(), self._busy(), self._own())
        self._next_look = self._last[0] + self._look_interval()
        self._wanted: int | None = self.core
        """Where the last look wanted the threads: a move needs two looks that agree, so
        that two crawls sharing a core do not both leave it for the same other one."""
        self.moves = 0
        """How often the crawl's threads were moved."""

    @property
    def one(self) -> frozenset[int]:
        """The CPUs of a kept thread: the crawl's core, or every core when crowded."""
        return self.all if self.core is None else frozenset({self.core})

    def keep_this_thread(self) -> ThreadCores | None:
        """Keep the calling thread on the crawl's core from now on; None if refused."""
        cores = ThreadCores(self)
        with self._lock:  # not between a move's choice of core and its moving the threads
            try:
                cores.keep()
            except OSError as exc:  # a container may forbid it: the crawl runs as without
                logger.warning("threads.one_core: a thread is not kept on one core: %s", exc)
                return None
            self._threads[threading.get_native_id()] = cores
        return cores

    def leave(self) -> None:
        """The calling thread ends: no longer moved with the others."""
        with self._lock:
            self._threads.pop(threading.get_native_id(), None)

    def look(self) -> bool:
        """If a look is due, compare the cores' load since the last one; move the crawl's
        threads when this look and the one before found the same better place. True
        when they moved."""
        now = self._clock()
        if now < self._next_look:
            return False
        then, busy_then, own_then = self._last
        busy_now, own_now = self._busy(), self._own()
        self._last = (now, busy_now, own_now)
        self._next_look = now + self._look_interval()
        seconds = now - then
        if seconds <= 0 or not busy_now:
            return False
        shares = {
            cpu: (busy_now[cpu] - busy_then.get(cpu, busy_now[cpu])) / seconds for cpu in busy_now
        }
        target = better_place(self.core, shares, (own_now - own_then) / seconds, self.all)
        wanted, self._wanted = self._wanted, target
        if target == self.core or target != wanted:
            return False
        self.move_to(target)
        return True

    def move_to(self, core: int | None) -> None:
        """Move every kept thread to ``core``, or to every core for None (a thread gone
        meanwhile is forgotten)."""
        logger.info("threads.one_core: the crawl's threads move from %s to %s (other work "
                    "on the cores)", _where(self.core), _where(core))  # fmt: skip
        with self._lock:
            self.core = core
            self.moves += 1
            for native_id in list(self._threads):
                try:
                    os.sched_setaffinity(native_id, self.one)
                except OSError as exc:  # the thread ended, or a container refuses
                    logger.debug("thread %d not moved: %s", native_id, exc)
                    del self._threads[native_id]

    @staticmethod
    def _look_interval() -> float:
        return LOOK_EVERY_S * random.uniform(0.75, 1.25)


def _where(core: int | None) -> str:
    return "every core" if core is None else f"core {core}"


class ThreadCores:
    """The CPUs of one crawl thread: its crawl's core, or all of them again for a large
    parse. A change is a system call, made only when the set changes."""

    def __init__(self, crawl: CrawlCores) -> None:
        self.crawl = crawl
        self._now = crawl.all

    def keep(self) -> None:
        """Run on the crawl's core from now on."""
        self._move(self.crawl.one)

    def place_parse(self, body_bytes: int) -> None:
        """Where to parse a body of ``body_bytes``: any core for a large one, else here."""
        try:
            self._move(self.crawl.all if body_bytes >= LARGE_PARSE_BYTES else self.crawl.one)
        except OSError as exc:  # a CPU taken away meanwhile: the thread parses where it is
            logger.debug("CPUs not changed for a parse: %s", exc)

    def _move(self, cpus: frozenset[int]) -> None:
        # A move by CrawlCores.move_to leaves _now behind: the next parse sets it again.
        if cpus != self._now:
            self._now = cpus  # asked once: a refusal is not asked again each page
            os.sched_setaffinity(0, cpus)


def crawl_cores() -> CrawlCores | None:
    """A crawl's :class:`CrawlCores`; None where there is no core to keep it on (not
    Linux, or a single CPU)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(os.getpid()))  # the main thread's: the crawl's
    if len(allowed) < 2:
        return None
    return CrawlCores(allowed)


def use_the_crawl_process_cpus() -> None:
    """Give this process the CPUs of the crawl that started it (its main thread's),
    not the one core of the crawl thread it was started from (a child inherits the
    starting thread's). The CPUs the crawl was given stay the bound: a crawl run under
    ``taskset`` keeps its children there too."""
    if not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(os.getppid()))
    except OSError as exc:  # the crawl is gone: this process ends soon anyway
        logger.debug("CPUs of the crawl's process not taken: %s", exc)
