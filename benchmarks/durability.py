"""The cost of durability: how the crawl commits its state, and whether it fsyncs.

    python benchmarks/durability.py [--pages 1500] [--runs 3]

rccrawler groups the DataManager calls of many pages in one transaction,
committed every 5 ms or 64 calls (and when a thread idles); a site's queue is
leased 32 pages a commit. With WAL and synchronous=NORMAL a commit reaches the
OS at once, so `kill -9` of the crawler loses nothing that was committed; FULL
also fsyncs every commit, which survives a power cut too. The per-call modes
commit each call alone (three commits a page: lease, download, links and arcs),
the per-statement modes every SQL statement (every link and arc of a page):
what grouping saves. Runs alternate so
every mode sees the same machine load; the crawler and the loopback server
share this process.
"""

from __future__ import annotations

import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import count_args  # first: it puts tests/ on sys.path for support.*
from support.loopback import serve_sites
from support.sites import generated_site

from plugins.webgraph import WebGraphManager
from rccrawler.config import settings_from_mapping
from rccrawler.data.sqlite import SQLiteDataManager


class PerStatementDataManager(SQLiteDataManager):
    """Commits every SQL statement on its own: what the batching saves."""

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        yield self.db.cursor()  # no BEGIN: the connection autocommits each statement


class PerCallDataManager(SQLiteDataManager):
    """Commits every DataManager call on its own, and leases one page at a time."""

    group_commit_calls = 1
    front_batch = 1


class Batched(WebGraphManager):
    """The default: group commit, no fsync."""

    label = "group commit, synchronous=NORMAL (default)"


class PerCall(WebGraphManager):
    label = "one commit per call, synchronous=NORMAL"
    sqlite_data_manager_cls = PerCallDataManager


class PerStatement(WebGraphManager):
    label = "one commit per statement, synchronous=NORMAL"
    sqlite_data_manager_cls = PerStatementDataManager


def with_fsync(mode: type[WebGraphManager]) -> type[WebGraphManager]:
    """The same way of committing with synchronous=FULL: an fsync per commit."""
    label = mode.label.split(", synchronous=")[0] + ", synchronous=FULL (fsync)"
    return type(f"{mode.__name__}Fsync", (mode,), {"label": label, "sqlite_synchronous": "FULL"})


MODES: tuple[type[WebGraphManager], ...] = tuple(
    variant for mode in (Batched, PerCall, PerStatement) for variant in (mode, with_fsync(mode))
)


def crawl_once(manager_cls: type[WebGraphManager], resolve: dict[str, str], host: str) -> float:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        raw: dict[str, Any] = {
            "sites": [f"http://{host}/"],
            "state_dir": f"{tmp}/state",
            "output_dir": f"{tmp}/out",
            "threads": {"downloading": 8, "parsing": 2},
            "crawl": {"crawl_delay_ms": 0, "max_downloads_at_time": 8, "resolve": resolve},
        }
        manager = manager_cls(settings_from_mapping(raw))
        started = time.monotonic()
        assert manager.run()
        elapsed = time.monotonic() - started
        return manager.report["sites"][host]["pages_done"] / elapsed


def main() -> None:
    args = count_args(__doc__, pages=1500, runs=3)
    host = "durable.test"
    rates: dict[type[WebGraphManager], list[float]] = {cls: [] for cls in MODES}
    with serve_sites({host: generated_site(host, args.pages, fanout=10)}) as server:
        for _ in range(args.runs):
            for cls in MODES:
                rates[cls].append(crawl_once(cls, server.resolve, host))
    base = statistics.median(rates[Batched])
    for cls, values in rates.items():
        median = statistics.median(values)
        runs = " ".join(f"{v:.0f}" for v in values)
        print(f"{cls.label:52} {runs:>16}  median {median:4.0f} pages/s  {median / base:.2f}x")


if __name__ == "__main__":
    main()
