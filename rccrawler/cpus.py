"""Where the crawl's threads run: on one CPU core when ``threads.one_core`` asks it.

The crawl's Python runs one thread at a time (the GIL), handed over at every socket
read, SQLite step and lock. Between two threads on one core a handover is a switch;
between cores it is a wake-up of the other core, which on a virtual machine may first
have to be scheduled, and the GIL's and the data's cache lines move with it. On a
fast server (loopback) with small pages that made a crawl of the PostgreSQL docs take
1.35 times as long on two cores as on one (paired runs; README, "Performance"). What one
core gives up is the work done outside the GIL in parallel: lexbor's parse of large
pages, so sites of large pages crawl a few per cent slower that way. Hence a setting.

Linux only (``os.sched_setaffinity``); elsewhere the setting changes nothing. Only the
crawl's threads are kept: the main thread, and so every process the crawl starts from
it, keeps the CPUs it was given; a process started from a crawl thread (a search index
worker) calls :func:`use_the_crawl_process_cpus`.
"""

from __future__ import annotations

import logging
import os

__all__ = ["keep_this_thread_on_one_core", "use_the_crawl_process_cpus"]

logger = logging.getLogger(__name__)


def keep_this_thread_on_one_core() -> None:
    """Run the calling thread on one core of those it may use: the highest numbered,
    the same for every thread the crawl's main thread starts (core 0 takes most of a
    machine's interrupts)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    allowed = os.sched_getaffinity(0)
    if len(allowed) > 1:
        os.sched_setaffinity(0, {max(allowed)})


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
