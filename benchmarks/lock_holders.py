"""Who holds one worker's DataManager lock, and for how long, on many hosts.

    python benchmarks/lock_holders.py [--hosts 300] [--pages 20] [--latency 0.3]
        [--delay 1.0] [--storage postgresql://127.0.0.1:5432/test] [--top 12]

A worker's threads talk only through the DataManager, under one lock: what one holds
it for (a round trip to the database, say), every other waits for. This runs one
worker with default settings on ``--hosts`` loopback hosts of ``--pages`` pages (each
answer ``--latency`` seconds late, ``--delay`` seconds between two requests to a host),
its state in ``--storage`` ("sqlite" for SQLite), with the lock of ``rccrawler.data.sql``
replaced by one that times each hold and each wait by where it was taken (the three
innermost rccrawler frames). Printed: the lock's holders, most held first (holds, time
held, time waited, held a hold), the crawl's start-up, crawl phase and end from the test
server's log, how far apart two requests to one host came (median and 90th percentile;
at least ``--delay`` when polite), and how late hosts started: a host's first page
after its robots.txt (``--delay`` at best) and its span from first to last request.

The timing lock costs about a microsecond a hold: compare trees with it, not with the
other benchmarks' figures. To compare two trees, run it with ``PYTHONPATH=OTHER`` in
turn, from outside this checkout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import common  # noqa: F401  (puts tests/ on sys.path for support.*)
import yaml
from support.loopback import serve_sites
from support.sites import SlowSite

import rccrawler
from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings

PACKAGE = os.path.dirname(rccrawler.__file__) + os.sep


def where_taken() -> str:
    """The three innermost rccrawler functions of the caller's stack (innermost first)."""
    frame = sys._getframe(2)
    names: list[str] = []
    while frame is not None and len(names) < 3:
        if frame.f_code.co_filename.startswith(PACKAGE):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    return " < ".join(names)


def run_worker(config: str, report: str) -> None:
    """In the worker process: time the lock, run the crawl, write the holds to ``report``."""
    import rccrawler.data.sql as sql

    holds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    guard = threading.Lock()

    class TimingLock:
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._since = 0.0
            self._where = ""

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            asked = time.perf_counter()
            taken = self._lock.acquire(blocking, timeout)
            if taken:
                self._since, self._where = time.perf_counter(), where_taken()
                with guard:
                    holds[self._where][2] += self._since - asked
            return taken

        def release(self) -> None:
            held, where = time.perf_counter() - self._since, self._where
            self._lock.release()
            with guard:
                holds[where][0] += 1
                holds[where][1] += held

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc: object) -> None:
            self.release()

        def locked(self) -> bool:
            return self._lock.locked()

    timed = types.ModuleType("threading")
    timed.__dict__.update(threading.__dict__)
    timed.Lock = TimingLock  # type: ignore[attr-defined]
    sql.threading = timed  # type: ignore[attr-defined]
    sys.argv = ["rccrawler", "--config", config, "--no-tui", "-q"]
    try:
        runpy.run_module("rccrawler", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code:
            raise
    finally:
        Path(report).write_text(json.dumps(holds))


def ninetieth(ordered: list[float]) -> float:
    """The 90th percentile of ``ordered`` (sorted), the nearest rank below."""
    return ordered[int(0.9 * (len(ordered) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=20, help="pages of each host")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds each answer waits")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between two requests")
    parser.add_argument("--storage", default="postgresql://127.0.0.1:5432/test")
    parser.add_argument("--top", type=int, default=12, help="holders listed")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(*args.worker)
        return 0
    hosts = [f"h{n}.test" for n in range(args.hosts)]
    sites = {host: SlowSite(host, args.pages, args.latency) for host in hosts}
    with serve_sites(sites) as server, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        settings: dict[str, Any] = {
            "sites": hosts, "name": f"locks-{uuid.uuid4().hex}",
            "state_dir": str(folder / "state"), "output_dir": str(folder / "out"),
            "crawl": {"crawl_delay_ms": int(args.delay * 1000), "sitemaps": False,
                      "resolve": server.resolve},
        }  # fmt: skip
        if args.storage != "sqlite":
            settings["storage"] = args.storage
        config = folder / "settings.yaml"
        config.write_text(yaml.safe_dump(settings))
        report = folder / "holds.json"
        started = time.monotonic()
        try:
            subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--worker", str(config), str(report)],
                check=True, timeout=900, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            ended = time.monotonic()
        finally:
            if args.storage != "sqlite":
                discard_storage(load_settings(config)[1])
        holds = json.loads(report.read_text())
        arrivals: dict[str, list[float]] = defaultdict(list)
        robots: dict[str, float] = {}
        for hit in server.hits:
            arrivals[hit.host].append(hit.at)
            if hit.path == "/robots.txt":
                robots[hit.host] = min(hit.at, robots.get(hit.host, hit.at))
    first = min(min(times) for times in arrivals.values())
    last = max(max(times) for times in arrivals.values())
    gaps = sorted(
        b - a for times in arrivals.values() for a, b in itertools.pairwise(sorted(times))
    )
    # A host's first page after its robots.txt (the delay at best), and its span from
    # the first request to the last ((pages) x delay at best): how late hosts started.
    first_pages = sorted(sorted(times)[1] - robots[host] for host, times in arrivals.items()
                         if host in robots and len(times) > 1)  # fmt: skip
    spans = sorted(max(times) - min(times) for times in arrivals.values())
    print(f"{args.hosts} hosts × {args.pages} pages, latency {args.latency:g} s, delay "
          f"{args.delay:g} s, state in {args.storage}: {ended - started:.1f} s; start-up "
          f"{first - started:.2f} s, crawl phase {last - first + args.latency:.2f} s, end "
          f"{ended - last - args.latency:.2f} s; requests to one host "
          f"{statistics.median(gaps):.3f} s apart (median), "
          f"{ninetieth(gaps):.3f} s (90th percentile); a host's first page "
          f"{statistics.median(first_pages):.2f} s after its robots.txt (median; 90th "
          f"percentile {ninetieth(first_pages):.2f} s), its span "
          f"from first to last request {statistics.median(spans):.2f} s (median; longest "
          f"{spans[-1]:.2f} s)\n")  # fmt: skip
    print(f"the lock held {sum(h[1] for h in holds.values()):.2f} s in all\n")
    print("| taken in (innermost first) | holds | held s | waited s | held a hold, ms |")
    print("|---|--:|--:|--:|--:|")
    for where, (count, held, waited) in sorted(holds.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"| {where} | {count:.0f} | {held:.2f} | {waited:.1f} | "
              f"{1000 * held / max(1, count):.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
