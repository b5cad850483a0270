"""Which worker of a shared crawl sends how many requests, and when hosts change hands.

    python benchmarks/handovers.py [--workers 3] [--hosts 8] [--pages 150] [--latency 0.05]

One crawl of ``scale_out.py``'s shape by ``--workers`` worker processes, each writing
its ``-v`` log. Printed from the logs (``leased``, ``gave … back``, ``handing … over``,
the hints) and the test server's log, in seconds from the first request:

* each host's holders, and when each took and gave it back;
* the requests each worker sent per 100 ms (its threads' share of the crawl: 8 threads
  at 50 ms answers send 16), so a worker idling, a hand-over's pause and the tail show;
* all the workers' requests per 100 ms against what their threads and the hosts'
  limits allow.

The tool that found where 3 workers' crawl phase lost its time (docs/performance.md,
"Hand-overs told at once"). To compare two trees, run it with ``PYTHONPATH=OTHER`` in
turn, from outside this checkout.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import scale_out
from support.loopback import serve_sites
from support.sites import SlowSite

LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+\s+\S+ (.*)")
BIN_S = 0.1


def events(log: Path, offset: float) -> list[tuple[float, str]]:
    """(monotonic time, message) of each line of a worker's log (its clock is the wall
    clock: ``offset`` is wall time minus monotonic time)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if match is not None:
            wall = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp()
            found.append((wall + int(match[2]) / 1000 - offset, match[3]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--pages", type=int, default=150, help="pages per host")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    args = parser.parse_args()
    hosts = [f"h{n}.test" for n in range(args.hosts)]
    sites = {host: SlowSite(host, args.pages, args.latency) for host in hosts}
    with serve_sites(sites) as server, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "crawl"
        offset = time.time() - time.monotonic()
        started, ended = scale_out.crawl(folder, hosts, server.resolve, args.workers, logs=True)
        hits = sorted(server.hits, key=lambda hit: hit.at)
        first = hits[0].at
        holders: dict[str, list[list[float | int]]] = defaultdict(list)
        print(f"start-up {first - started:.2f} s, crawl phase "
              f"{hits[-1].at - first + args.latency:.2f} s, end "
              f"{ended - hits[-1].at - args.latency:.2f} s\n")  # fmt: skip
        for worker in range(args.workers):
            for at, message in events(folder / f"worker{worker}.log", offset):
                if (leased := re.match(r"leased (\S+)", message)) is not None:
                    holders[leased[1]].append([at - first, float("inf"), worker])
                elif (gave := re.match(r"gave (\S+) back", message)) is not None:
                    for held in holders[gave[1]]:
                        if held[2] == worker and held[1] == float("inf"):
                            held[1] = at - first
                if message.startswith(("handing", "hint to")):
                    print(f"{at - first:6.3f} worker {worker}: {message[:90]}")
    print("\nholders (from, to, worker):")
    for host in hosts:
        spans = ", ".join(f"{start:.2f}–{end:.2f} w{w}" for start, end, w in holders[host])
        print(f"  {host}: {spans}")
    bins = int((hits[-1].at - first) / BIN_S) + 1
    sent = [[0] * bins for _ in range(args.workers)]
    unknown = [0] * bins
    for hit in hits:
        if hit.path == "/robots.txt":
            continue
        at = hit.at - first
        slot = int(at / BIN_S)
        holder = next((int(w) for start, end, w in holders[hit.host]
                       if start - 0.01 <= at <= end + 0.01), None)  # fmt: skip
        if holder is None:
            unknown[slot] += 1
        else:
            sent[holder][slot] += 1
    full = scale_out.THREADS * BIN_S / args.latency
    print(f"\nrequests per {BIN_S * 1000:.0f} ms by worker ({full:.0f}: its threads all busy):")
    for worker, row in enumerate(sent):
        print(f"  w{worker}", " ".join(f"{n:2d}" for n in row))
    allowed = min(args.workers * scale_out.THREADS, args.hosts * scale_out.MAX_DOWNLOADS)
    total = [sum(column) + u for *column, u in zip(*sent, unknown, strict=True)]
    print(
        "  all",
        " ".join(f"{n:2d}" for n in total),
        f"(at most {allowed * BIN_S / args.latency:.0f})",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
