"""The cost of durability: how the crawl commits its state, and whether it fsyncs.

    python benchmarks/durability.py [--pages 1500] [--runs 3]

rccrawler commits once per DataManager call: a page costs three commits (its
lease, its download, its links and arcs together). With WAL and
synchronous=NORMAL a commit reaches the OS at once, so `kill -9` of the crawler
loses nothing that was committed; FULL also fsyncs every commit, which
survives a power cut too. The per-statement modes commit every SQL statement
alone (every link and arc of a page): what batching saves. Runs alternate so
every mode sees the same machine load; the crawler and the loopback server
share this process.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plugins.webgraph import WebGraphManager
from rccrawler.config import settings_from_mapping
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.loopback import serve_sites
from rccrawler.sample_sites import generated_site


class PerStatementDataManager(SQLiteDataManager):
    """Commits every SQL statement on its own: what the batching saves."""

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        yield self.db  # no BEGIN: the connection autocommits each statement


class Batched(WebGraphManager):
    """The default: one transaction per DataManager call, no fsync."""

    label = "one commit per call, synchronous=NORMAL (default)"


class BatchedFsync(WebGraphManager):
    label = "one commit per call, synchronous=FULL (fsync)"
    sqlite_synchronous = "FULL"


class PerStatement(WebGraphManager):
    label = "one commit per statement, synchronous=NORMAL"
    sqlite_data_manager_cls = PerStatementDataManager


class PerStatementFsync(PerStatement):
    label = "one commit per statement, synchronous=FULL (fsync)"
    sqlite_synchronous = "FULL"


MODES: tuple[type[WebGraphManager], ...] = (Batched, BatchedFsync, PerStatement, PerStatementFsync)


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
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
