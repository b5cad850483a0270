"""The cost of durability: the same crawl with SQLite synchronous=NORMAL (the default) and FULL.

    python benchmarks/durability.py [--pages 1500] [--runs 3]

Every DataManager call is one committed transaction (a page's links and arcs
are written together). With WAL and synchronous=NORMAL a commit reaches the
OS at once, so `kill -9` of the crawler loses nothing that was committed; FULL
also fsyncs every commit, which survives a power cut too. Runs alternate so
both modes see the same machine load; the crawler and the loopback server
share this process.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from plugins.webgraph import WebGraphManager
from rccrawler.config import settings_from_mapping
from rccrawler.loopback import serve_sites
from rccrawler.sample_sites import generated_site


class FullSyncManager(WebGraphManager):
    """The web-graph task with an fsync on every commit."""

    sqlite_synchronous = "FULL"


class NormalSyncManager(WebGraphManager):
    sqlite_synchronous = "NORMAL"


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
    rates: dict[str, list[float]] = {"NORMAL": [], "FULL": []}
    with serve_sites({host: generated_site(host, args.pages, fanout=10)}) as server:
        for _ in range(args.runs):
            for cls in (NormalSyncManager, FullSyncManager):
                rates[cls.sqlite_synchronous].append(crawl_once(cls, server.resolve, host))
    for mode, values in rates.items():
        print(
            f"synchronous={mode:6} pages/s "
            + " ".join(f"{v:.0f}" for v in values)
            + f"  median {statistics.median(values):.0f}"
        )
    ratio = statistics.median(rates["FULL"]) / statistics.median(rates["NORMAL"])
    print(f"FULL / NORMAL = {ratio:.2f}")


if __name__ == "__main__":
    main()
