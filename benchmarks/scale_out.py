"""Several PostgreSQL workers on one crawl: does the crawl go faster with more of them?

    python benchmarks/scale_out.py [--workers 1 2 3 4] [--hosts 8] [--pages 150]
                                   [--latency 0.05] [--rounds 3]

Issue 10: a loopback server with 8 hosts whose answers take 50 ms, crawled by 1, 2, 3
and 4 worker processes sharing one crawl through PostgreSQL (127.0.0.1:5432, database
test). Each round runs every worker count once, in turn, so the counts are compared
under the same load. Printed per count: the median wall time and pages/s with their
range, the speed-up against 1 worker, and politeness: the peak of requests in flight
per host (never above max_downloads_at_time) and URLs requested twice (none).

The wall time counts each worker's start (about 0.6 s of imports, longer when the
workers start together on a busy machine) and the output, written once at the end.
The crawl phase, from the first request the server saw to the end of the last, is
the part more workers can speed up; it is printed too, with its own speed-up, and so
are the two parts around it: start-up (until the first request) and the end (from
the last answer until the last worker exits: seeing that the crawl is over, and the
elected worker's output). So are the CPU seconds of all the workers together (user
+ system, medians): the figure a loaded machine disturbs least, and what the
workers' share of the cores limits. The machine's load average is printed with them.

The crawl phase's floor is printed beside it: every page one answer's latency, as many
at once as the workers' threads and the hosts' limits allow (1 worker: 7.5 s, 3: 2.5 s).
Then what the whole run could at best be against 1 worker with this run's start-ups and
ends, were the crawl phase at its floor: the ceiling that fixed costs leave.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import common  # noqa: F401  (puts tests/ on sys.path for support.*)
import yaml
from support.loopback import serve_sites
from support.sites import SlowSite

from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings

PG_URL = "postgresql://127.0.0.1:5432/test"
MAX_DOWNLOADS = 4
THREADS = 8


def workers_cpu() -> float:
    """CPU seconds of the worker processes that ended so far (user + system)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def crawl(
    folder: Path, hosts: list[str], resolve: dict[str, str], workers: int, *, logs: bool = False
) -> tuple[float, float]:
    """Run ``workers`` worker processes on one new crawl: (when they started, when the
    last one ended), in time.monotonic(). With ``logs``, each writes its ``-v`` log to
    ``folder / f"worker{n}.log"``."""
    folder.mkdir(parents=True)
    settings = {
        "sites": hosts, "storage": PG_URL, "name": f"scale-{uuid.uuid4().hex}",
        "state_dir": str(folder / "state"), "output_dir": str(folder / "out"),
        "threads": {"downloading": THREADS, "parsing": 2},
        "crawl": {"crawl_delay_ms": 0, "max_downloads_at_time": MAX_DOWNLOADS, "sitemaps": False,
                  "timeout_s": 30, "resolve": resolve},
    }  # fmt: skip
    config = folder / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    started = time.monotonic()
    try:
        command = [sys.executable, "-m", "rccrawler", "--config", str(config), "--no-tui"]
        quiet = [[*command, "-q"] for _ in range(workers)]
        logged = [[*command, "-v", "--log-file", str(folder / f"worker{n}.log")]
                  for n in range(workers)]  # fmt: skip
        procs = [
            subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if logs else None
            )
            for args in (logged if logs else quiet)
        ]
        for proc in procs:
            if proc.wait(timeout=600) != 0:
                sys.exit(f"scale_out: a worker exited with {proc.returncode}")
        ended = time.monotonic()
    finally:
        discard_storage(load_settings(config)[1])  # its schema, even when a worker failed
    return started, ended


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--pages", type=int, default=150, help="pages per host")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    hosts = [f"h{n}.test" for n in range(args.hosts)]
    sites = {host: SlowSite(host, args.pages, args.latency) for host in hosts}
    total = args.hosts * args.pages
    times: dict[int, list[float]] = {n: [] for n in args.workers}
    phases: dict[int, list[float]] = {n: [] for n in args.workers}
    cpu: dict[int, list[float]] = {n: [] for n in args.workers}
    starts: dict[int, list[float]] = {n: [] for n in args.workers}
    ends: dict[int, list[float]] = {n: [] for n in args.workers}
    peaks: dict[int, int] = {n: 0 for n in args.workers}
    twice: dict[int, int] = {n: 0 for n in args.workers}
    with serve_sites(sites) as server, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for workers in args.workers:
                server.hits.clear()
                server.peak_in_flight.clear()
                folder = Path(tmp) / f"r{round_}w{workers}"
                before = workers_cpu()
                started, ended = crawl(folder, hosts, server.resolve, workers)
                times[workers].append(ended - started)
                cpu[workers].append(workers_cpu() - before)
                paths = Counter((hit.host, hit.path) for hit in server.hits)
                arrivals = [hit.at for hit in server.hits]
                phases[workers].append(max(arrivals) - min(arrivals) + args.latency)
                # Start-up: until the first request; the end: from the last answer to
                # the last worker's exit (seeing the crawl is over, the elected unload).
                starts[workers].append(min(arrivals) - started)
                ends[workers].append(ended - max(arrivals) - args.latency)
                pages = sum(1 for (_h, p) in paths if p != "/robots.txt")
                if pages != total:
                    sys.exit(f"scale_out: {pages} pages fetched, not {total}")
                twice[workers] += sum(1 for n in paths.values() if n > 1)
                peaks[workers] = max(peaks[workers], max(server.peak_in_flight.values()))
                print(f"round {round_ + 1}: {workers} workers {times[workers][-1]:.2f} s: start-up "
                      f"{starts[workers][-1]:.2f} s, crawl phase {phases[workers][-1]:.2f} s, end "
                      f"{ends[workers][-1]:.2f} s; workers' CPU {cpu[workers][-1]:.2f} s",
                      flush=True)  # fmt: skip
    base = statistics.median(times[args.workers[0]])
    phase_base = statistics.median(phases[args.workers[0]])

    def floor(workers: int) -> float:
        """The shortest crawl phase: every page one answer's latency, as many at once as
        the workers' threads and the hosts' limits allow."""
        return total * args.latency / min(workers * THREADS, args.hosts * MAX_DOWNLOADS)

    def around(workers: int) -> float:
        return statistics.median(starts[workers]) + statistics.median(ends[workers])

    print(f"\n{args.hosts} hosts x {args.pages} pages, {args.latency * 1000:.0f} ms answers, "
          f"{THREADS} downloading threads a worker, max_downloads_at_time {MAX_DOWNLOADS}, "
          f"medians of {args.rounds} interleaved rounds, load average "
          f"{' '.join(f'{n:.1f}' for n in os.getloadavg())} at the end")  # fmt: skip
    print(
        "| workers | seconds (range) | pages/s (range) | speed-up | start-up s | "
        "crawl phase s (range) | its pages/s | its speed-up | its floor s | end s | "
        "workers' CPU s | peak in flight per host | URLs fetched twice |"
    )
    print("|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for workers in args.workers:
        runs, crawling = times[workers], phases[workers]
        med, phase = statistics.median(runs), statistics.median(crawling)
        print(f"| {workers} | {med:.2f} ({min(runs):.2f}–{max(runs):.2f}) | {total / med:.0f} "
              f"({total / max(runs):.0f}–{total / min(runs):.0f}) | {base / med:.2f}× | "
              f"{statistics.median(starts[workers]):.2f} | "
              f"{phase:.2f} ({min(crawling):.2f}–{max(crawling):.2f}) | {total / phase:.0f} | "
              f"{phase_base / phase:.2f}× | {floor(workers):.2f} | "
              f"{statistics.median(ends[workers]):.2f} | "
              f"{statistics.median(cpu[workers]):.2f} | "
              f"{peaks[workers]} (limit {MAX_DOWNLOADS}) | {twice[workers]} |")  # fmt: skip
    # What the start-up and the end leave of the speed-up, even with a crawl phase at
    # its floor: they do not shrink with more workers (on a small machine they grow).
    one = args.workers[0]
    print("\nthe most a crawl phase at its floor would give, with these start-ups and ends: "
          + ", ".join(f"{n} workers {base / (around(n) + floor(n)):.2f}×"
                      for n in args.workers if n != one))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
