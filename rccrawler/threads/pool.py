"""DownloadingPool: the crawl's DownloadingThreads, a fixed number or as many as politeness
allows right now (``threads.downloading: auto``, the default).

A polite crawl of many sites far away is bound by politeness: each host answers one
request per crawl delay, and every answer takes a few hundred milliseconds. Its
downloads then wait on the network, and it needs about as many threads as there are
requests politeness allows at once: hosts that are due × their ``max_downloads_at_time``
(300 hosts at a delay of 1 s and answers of 0.3 s kept 8 threads busy for 250 s, 300
threads for 23 s). A crawl of one fast site is bound by the CPU (the GIL): there more
threads only queue for it. So the pool asks the DataManager what politeness allows now
(:meth:`~rccrawler.data.base.DataManager.download_demand`), a few times a second, and:

* starts at that size (many sites all due at once each need a thread for their
  robots.txt now: a pool grown from its floor delayed every site's first request, and so
  its last, by up to a second);
* grows towards it (and a sixteenth more) at once, doubling at most per look, while
  the process has CPU to spare: not when the crawl's Python already keeps its core busy;
* shrinks once it has been larger than that for :data:`SHRINK_AFTER_S` (the demand of
  polite hosts comes in waves, one per crawl delay), or when the crawl is CPU-bound;
* never goes below :data:`AUTO_FLOOR` nor above ``threads.max_downloading``, the
  machine's open-file limit, and what memory holds (every downloader may hold a body
  of ``crawl.max_body_bytes``).

A thread retires after the step it is in (:meth:`CrawlerThread.retire`): the page it
holds is stored as usual, so shrinking never loses or repeats a page. New threads are
the task's own class, started like the first ones (kept on the crawl's core with
``threads.one_core``).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rccrawler.data.base import DataManager
    from rccrawler.threads.base import CrawlerThread

__all__ = ["AUTO_FLOOR", "DownloadingPool", "memory_cap"]

logger = logging.getLogger(__name__)

AUTO_FLOOR = 8
"""The fewest threads of an automatic pool: a fixed pool's old default, which a crawl of
one fast site on loopback needs (its politeness allows 8 at most in the benchmarks)."""
LOOK_EVERY_S = 0.1
"""Seconds between two looks at the demand."""
SHRINK_AFTER_S = 3.0
"""An automatic pool keeps the largest size wanted in this many seconds: polite hosts
come due in waves, one per crawl delay, and a thread started for each wave anew costs more
than one kept waiting."""
HEADROOM = 16
"""The pool is the demand plus a sixteenth of it, so that a host coming due finds a
thread waiting rather than one that ends a request first. Nothing for a demand within
the floor: one site allowing 8 requests at once gets the 8 threads a fixed pool had (11
had cost 12% more CPU on the Python docs)."""
CPU_WINDOW_S = 0.5
"""Seconds over which the process's CPU use is measured."""
CPU_BOUND = 0.85
"""A process that used this share of a core (the GIL runs its Python on one at a time)
gets no more threads: they would queue for the interpreter, not for the network."""
CPU_SATURATED = 0.95
"""At this share, a pool above its floor shrinks by a quarter a look."""
MEMORY_SHARE = 0.25
"""The share of the memory available at the start that the downloaders' bodies may take."""
THREAD_BYTES = 256 * 1024
"""What a thread costs besides its body: its stack as used, its socket's buffers."""


def memory_cap(max_body_bytes: int, available: int | None = None) -> int:
    """The most downloading threads whose bodies fit :data:`MEMORY_SHARE` of the memory
    available (``/proc/meminfo``; all of it where that cannot be read)."""
    if available is None:
        available = _available_memory()
    return max(1, int(available * MEMORY_SHARE) // (max_body_bytes + THREAD_BYTES))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 * 2**30


class DownloadingPool:
    """The DownloadingThreads of one crawl process; the manager owns it.

    Args:
        create: makes the DownloadingThread numbered ``index`` (not started).
        data: the crawl's storage, asked what politeness allows now.
        fixed: a fixed number of threads; None for an automatic pool.
        cap: the most threads of an automatic pool.
        floor: the fewest threads of an automatic pool (at most ``cap``).
        clock: monotonic time (tests pass their own).
        cpu_clock: this process's CPU seconds (tests pass their own).
    """

    def __init__(
        self,
        create: Callable[[int], CrawlerThread],
        data: DataManager,
        *,
        fixed: int | None,
        cap: int,
        floor: int = AUTO_FLOOR,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.create = create
        self.data = data
        self.fixed = fixed
        self.cap = max(1, cap)
        self.floor = max(1, min(floor, self.cap))
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.live: list[CrawlerThread] = []
        """The threads that are not retiring, oldest first."""
        self.retired: list[CrawlerThread] = []
        """Retired threads that may still be finishing their step."""
        self.peak = 0
        """The most threads the pool ran at once."""
        self._made = 0
        self._next_look = 0.0
        self._wanted: deque[tuple[float, int]] = deque()
        self._cpu_at = (clock(), cpu_clock())
        self.cpu_share = 0.0
        """The share of a core the process used in the last measured window."""

    @property
    def automatic(self) -> bool:
        return self.fixed is None

    def first_threads(self) -> list[CrawlerThread]:
        """The threads to start with (not started): the fixed number, or what politeness
        allows at the start (the floor at least)."""
        if self.fixed is not None:
            return self._make(self.fixed)
        demand = self.data.download_demand(self.cap)
        return self._make(self.size_for(demand.allowed, self.clock()))

    def _make(self, count: int) -> list[CrawlerThread]:
        made = [self.create(self._made + i) for i in range(count)]
        self._made += count
        self.live += made
        self.peak = max(self.peak, len(self.live))
        return made

    def adjust(self) -> list[CrawlerThread]:
        """Look at the demand if a look is due; retire threads the pool no longer needs.

        Returns:
            New threads for the manager to start (none for a fixed pool).
        """
        now = self.clock()
        if now < self._next_look:
            return []
        self._next_look = now + LOOK_EVERY_S
        # A retired thread that crashed stays, for the manager to report.
        self.retired = [t for t in self.retired if t.is_alive() or t.error is not None]
        demand = self.data.download_demand(self.cap)
        self._measure_cpu(now)
        self.data.note_download_threads(min(demand.in_flight, len(self.live)), len(self.live))
        if self.fixed is not None:
            return []
        size = len(self.live)
        target = self.size_for(demand.allowed, now)
        if self.cpu_share >= CPU_SATURATED:
            target = min(target, max(self.floor, size - size // 4))
        elif target > size:
            if self.cpu_share >= CPU_BOUND:
                return []
            made = self._make(min(target, 2 * size) - size)
            logger.debug("downloading threads: %d -> %d (%d requests allowed now)",
                         size, len(self.live), demand.allowed)  # fmt: skip
            return made
        if target < size:
            self._retire(size - target)
            logger.debug("downloading threads: %d -> %d (%d requests allowed now, CPU %.2f)",
                         size, target, demand.allowed, self.cpu_share)  # fmt: skip
        return []

    def size_for(self, allowed: int, now: float) -> int:
        """The pool wanted for ``allowed`` requests now: that and some headroom, the largest
        wanted in the last :data:`SHRINK_AFTER_S`, within the floor and the cap."""
        wanted = min(self.cap, max(self.floor, allowed + allowed // HEADROOM))
        while self._wanted and self._wanted[0][0] <= now - SHRINK_AFTER_S:
            self._wanted.popleft()
        self._wanted.append((now, wanted))
        return max(w for _t, w in self._wanted)

    def _measure_cpu(self, now: float) -> None:
        then, cpu_then = self._cpu_at
        if now - then >= CPU_WINDOW_S:
            cpu = self.cpu_clock()
            self.cpu_share = (cpu - cpu_then) / (now - then)
            self._cpu_at = (now, cpu)

    def _retire(self, count: int) -> None:
        """Retire the ``count`` newest threads (each ends after its current step)."""
        leaving, self.live = self.live[-count:], self.live[:-count]
        for thread in leaving:
            thread.retire()
        self.retired += leaving

    def threads(self) -> list[CrawlerThread]:
        """Every thread of the pool that may still run: live, then retiring."""
        return self.live + self.retired
