"""When each phase of one crawl begins and ends, with the CPU seconds of the crawl's
process and of each child (the search task's index workers) at that moment.

    .venv/bin/python benchmarks/crawl_phases.py --config SEARCH/settings.yaml --fresh --no-tui -q

The arguments are rccrawler's own. ``search_bench.py --keep`` leaves the settings of a
web-graph and of a search crawl of the Python docs (``webgraph-1/``, ``search-1/``).
A search crawl's lines show how long the posting lists take after the last page, and
whether the workers or the crawl's process are the ones busy then.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from typing import Any

import common  # noqa: F401  (puts tests/ on sys.path, for support.processes)
from support.processes import child_pids

import plugins.search.index as search_index
import plugins.search.manager as search_manager
from rccrawler.commands.main import main as rccrawler_main
from rccrawler.manager import ApplicationManager

TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` from the third (state) on ([] once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cpu_seconds(pid: int | str) -> float:
    """User + system seconds of a process so far (-1 once it is gone)."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS if fields else -1.0


STARTED = int(stat_fields("self")[19]) / TICKS
"""When this process started, in seconds since boot: the imports count as start-up."""


def mark(what: str) -> None:
    others = " ".join(f"{pid}:{cpu_seconds(pid):.2f}" for pid in sorted(child_pids(os.getpid())))
    # One write a line: two threads mark at once (the lists and the graph files).
    sys.stderr.write(f"{time.clock_gettime(time.CLOCK_BOOTTIME) - STARTED:7.3f} s  crawl "
                     f"{cpu_seconds(os.getpid()):.2f} CPU s  {others}  {what}\n")  # fmt: skip
    sys.stderr.flush()


def timed(owner: Any, name: str) -> None:
    """Wrap ``owner.name`` so that its start and end are marked."""
    method = getattr(owner, name)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(f"{name} begins")
        try:
            return method(*args, **kwargs)
        finally:
            mark(f"{name} ends")

    setattr(owner, name, wrapper)


def main() -> int:
    for name in ("open", "create_threads", "wait_until_done", "join_threads", "unload"):
        timed(ApplicationManager, name)
    timed(search_manager.SearchManager, "unload")
    timed(search_index, "build_lists")
    search_manager.build_lists = search_index.build_lists  # the name the manager calls
    atexit.register(mark, "exit")
    mark("imported")
    return rccrawler_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
