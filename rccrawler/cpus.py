"""Where the crawl's threads run: on one CPU core when ``threads.one_core`` asks it.

The crawl's Python runs one thread at a time (the GIL), handed over at every socket
read, SQLite step and lock. Between two threads on one core a handover is a switch;
between cores it is a wake-up of the other core, which on a virtual machine may first
have to be scheduled, and the GIL's and the data's cache lines move with it. On a
fast server (loopback) with small pages that made a crawl of the PostgreSQL docs take
1.35 times as long on two cores as on one (paired runs; README, "Performance").

What one core would give up is work done outside the GIL in parallel, chiefly
lexbor's parse of a large page: a parsing thread leaves the core for the parse of a
page of :data:`LARGE_PARSE_BYTES` or more (the other core is worth a handover there)
and comes back for a small one. It is a setting, not the default: the kernel cannot
move kept threads, so two crawls on one machine would share one core.

Linux only (``os.sched_setaffinity``); elsewhere the setting changes nothing. Only the
crawl's threads are kept: the main thread, and so every process the crawl starts from
it, keeps the CPUs it was given; a process started from a crawl thread (a search index
worker) calls :func:`use_the_crawl_process_cpus`.
"""

from __future__ import annotations

import logging
import os

__all__ = ["LARGE_PARSE_BYTES", "ThreadCores", "thread_cores", "use_the_crawl_process_cpus"]

logger = logging.getLogger(__name__)

LARGE_PARSE_BYTES = 65536
"""A body this large is parsed on any core: mostly lexbor's work, outside the GIL (the
PostgreSQL docs' pages average 14 KB, the Python and SQLAlchemy docs' about 100 and 140;
kept on one core throughout, those two crawled 1.04 and 1.08 times as long)."""


class ThreadCores:
    """The CPUs of one crawl thread: one core (the highest numbered of those the thread
    may use, the same for every thread the crawl's main thread starts; core 0 takes most
    of a machine's interrupts), or all of them again for a large parse. A change is a
    system call, made only when the set changes."""

    def __init__(self) -> None:
        self.all = frozenset(os.sched_getaffinity(0))
        self.one = frozenset({max(self.all)})
        self._now = self.all

    def keep(self) -> None:
        """Run on the one core from now on."""
        self._move(self.one)

    def place_parse(self, body_bytes: int) -> None:
        """Where to parse a body of ``body_bytes``: any core for a large one, else here."""
        try:
            self._move(self.all if body_bytes >= LARGE_PARSE_BYTES else self.one)
        except OSError as exc:  # a CPU taken away meanwhile: the thread parses where it is
            logger.debug("CPUs not changed for a parse: %s", exc)

    def _move(self, cpus: frozenset[int]) -> None:
        if cpus != self._now:
            self._now = cpus  # asked once: a refusal is not asked again each page
            os.sched_setaffinity(0, cpus)


def thread_cores() -> ThreadCores | None:
    """The calling thread's :class:`ThreadCores`, kept on its core; None where there is
    no core to keep it on (not Linux, or a single CPU)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = ThreadCores()
    if len(cores.all) < 2:
        return None
    try:
        cores.keep()
    except OSError as exc:  # a container may forbid it: the crawl runs as it would without
        logger.warning("threads.one_core: a thread is not kept on one core: %s", exc)
        return None
    return cores


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
