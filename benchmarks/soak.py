"""A long polite crawl of many sites on loopback: does the crawler's memory level off?

    python benchmarks/soak.py [--hosts 200] [--pages 1500] [--latency 0.05] [--delay 0.3]
                              [--threads 200] [--storage sqlite|postgresql://…]
                              [--tracemalloc [--frames N]]

Issue 43: a crawl that runs for days must hold its memory flat. This serves ``--hosts``
virtual hosts from the tests' loopback server (``crawl.resolve``), each a generated site
of ``--pages`` pages whose every answer takes ``--latency`` seconds, and crawls them with
``--delay`` seconds between two requests to a host (``crawl.crawl_delay_ms``): the shape
of the real web, many slow sites each fetched politely. The crawl runs as its own process
(``python -m rccrawler --no-tui``); at each of its progress lines (every 5 s) this reads
the crawl's ``RssAnon`` (``/proc/PID/status``: its heap, not the files it maps) beside
the pages done so far. It prints a table of pages done against MB, the peak resident set
(``VmHWM``, the output phase at the end included) and the slope of ``RssAnon`` over the
last half of the pages, a least-squares fit, in KB per 1,000 pages: a crawl that keeps
something per page done shows it here as a steady slope.

With ``--storage postgresql://…`` the crawl keeps its state in PostgreSQL (one worker,
in a schema of its own, dropped at the end). ``--tracemalloc`` runs the crawl under
``tracemalloc`` (``--frames`` deep: the deeper, the slower; the RSS then counts its traces)
and prints the allocation sites that grew most between snapshots at 50% and 90% of the
pages, both taken while crawling: where to look when the slope is not flat.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from dataclasses import dataclass
from pathlib import Path

import common  # noqa: F401  (puts tests/ on sys.path for support.*)
import yaml
from support.loopback import serve_sites
from support.sites import SlowSite

from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings

PROGRESS = "progress: "
"""The crawl's plain progress line (RoutineThread.log_progress), every 5 s."""

TRACED = """\
import os, runpy, sys, threading, time, tracemalloc
folder = sys.argv.pop(1)
tracemalloc.start(int(sys.argv.pop(1)))
def serve():
    while True:
        time.sleep(0.2)
        for wanted in sorted(name for name in os.listdir(folder) if name.endswith(".wanted")):
            name = wanted.removesuffix(".wanted")
            tracemalloc.take_snapshot().dump(os.path.join(folder, name + ".snapshot"))
            os.remove(os.path.join(folder, wanted))
threading.Thread(target=serve, daemon=True, name="soak-tracemalloc").start()
sys.argv[0] = "rccrawler"
runpy.run_module("rccrawler", run_name="__main__")
"""
"""The crawl's process under tracemalloc: it dumps a snapshot NAME.snapshot into a
folder when the soak creates NAME.wanted there."""

SNAPSHOTS_AT = {"half": 0.5, "end": 0.9}
"""Snapshots taken under --tracemalloc, at these shares of the pages: both while crawling."""


@dataclass(frozen=True, slots=True)
class Sample:
    seconds: float
    pages: int
    rss_anon_mb: float


def status_kb(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def slope_kb_per_1000(samples: list[Sample]) -> float:
    """Least-squares slope of RssAnon against pages done, in KB per 1,000 pages."""
    pages = [s.pages for s in samples]
    if len(set(pages)) < 2:
        return float("nan")
    slope, _ = statistics.linear_regression(pages, [s.rss_anon_mb * 1024 for s in samples])
    return slope * 1000


def write_settings(folder: Path, args: argparse.Namespace, hosts: list[str],
                   resolve: dict[str, str]) -> Path:  # fmt: skip
    settings = {
        "sites": hosts,
        "state_dir": str(folder / "state"),
        "output_dir": str(folder / "output"),
        "threads": {"downloading": args.threads, "parsing": 2},
        "crawl": {
            "crawl_delay_ms": round(args.delay * 1000),
            "timeout_s": 30,
            "sitemaps": False,
            "resolve": resolve,
        },
    }
    if args.storage != "sqlite":
        settings |= {"storage": args.storage, "name": f"soak-{uuid.uuid4().hex[:12]}"}
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def run_crawl(config: Path, args: argparse.Namespace, traces: Path) -> tuple[list[Sample], int]:
    """Crawl to the end, sampling at each progress line: (samples, peak VmHWM in kB)."""
    if args.tracemalloc:
        command = [sys.executable, "-c", TRACED, str(traces), str(args.frames)]
    else:
        command = [sys.executable, "-m", "rccrawler"]
    command += ["--config", str(config), "--no-tui"]
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    samples: list[Sample] = []
    wanted = dict(SNAPSHOTS_AT)
    peak = [0]
    done = threading.Event()

    def watch_peak() -> None:  # the output phase at the end has no progress line
        while not done.wait(1.0):
            peak[0] = max(peak[0], status_kb(proc.pid, "VmHWM"))

    watcher = threading.Thread(target=watch_peak, daemon=True)
    watcher.start()
    try:
        for line in proc.stderr:
            at = line.find(PROGRESS)
            if at < 0:
                if " WARNING " in line or " ERROR " in line or "Traceback" in line:
                    print(line.rstrip(), file=sys.stderr)
                continue
            pages = int(line[at + len(PROGRESS) :].split()[0])
            rss_mb = status_kb(proc.pid, "RssAnon") / 1024
            samples.append(Sample(time.monotonic() - started, pages, rss_mb))
            for name, share in list(wanted.items()):
                if args.tracemalloc and pages >= share * args.hosts * args.pages:
                    (traces / f"{name}.wanted").touch()
                    del wanted[name]
            if len(samples) % args.show_every == 1:
                print(f"  {samples[-1].seconds:6.0f} s {pages:8d} pages {rss_mb:6.1f} MB",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        if proc.poll() is None:  # interrupted: the crawl stops (and saves) before its state goes
            proc.terminate()
        proc.wait()
        done.set()
        watcher.join()
    if proc.returncode != 0:
        sys.exit(f"soak: the crawl exited {proc.returncode}")
    return samples, peak[0]


def print_growth(traces: Path, top: int = 15) -> None:
    """The allocation sites that grew most between the two snapshots (:data:`SNAPSHOTS_AT`)."""
    names = list(SNAPSHOTS_AT)
    paths = [traces / f"{name}.snapshot" for name in names]
    if not all(path.exists() for path in paths):
        print("tracemalloc: the crawl ended before both snapshots were taken")
        return
    first, last = (tracemalloc.Snapshot.load(str(path)) for path in paths)
    grown = last.compare_to(first, "traceback")
    total = sum(stat.size_diff for stat in grown) / 1024
    print(f"\ntracemalloc, {names[0]} → {names[1]} of the pages: {total:+.0f} KB in all; "
          "the sites that grew most:")  # fmt: skip
    for stat in grown[:top]:
        print(f"{stat.size_diff / 1024:+10.1f} KB {stat.count_diff:+8d} blocks "
              f"(now {stat.size / 1024:.1f} KB in {stat.count})")  # fmt: skip
        for line in stat.traceback.format(most_recent_first=True):
            print(f"      {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--pages", type=int, default=1500, help="pages per host")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    parser.add_argument("--delay", type=float, default=0.3, help="crawl delay per host, s")
    parser.add_argument("--threads", type=int, default=200, help="downloading threads")
    parser.add_argument("--storage", default="sqlite", help="sqlite or a postgresql:// URL")
    parser.add_argument("--rows", type=int, default=20, help="rows of the table, about")
    parser.add_argument("--show-every", type=int, default=12, help="live line every N samples")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run under tracemalloc; print what grew over the second half",
    )
    parser.add_argument("--frames", type=int, default=1,
                        help="frames of a traceback under tracemalloc (more: slower)")  # fmt: skip
    args = parser.parse_args()
    # SIGTERM ends the soak as Ctrl-C does: the crawl stops, its PostgreSQL schema is dropped.
    signal.signal(signal.SIGTERM, lambda _signal, _frame: sys.exit("soak: terminated"))
    hosts = [f"s{n}.test" for n in range(args.hosts)]
    sites = {host: SlowSite(host, args.pages, args.latency) for host in hosts}
    load_before = os.getloadavg()[0]
    with serve_sites(sites) as server, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        traces = folder / "traces"
        traces.mkdir()
        config = write_settings(folder, args, hosts, server.resolve)
        forget = threading.Event()

        def forget_hits() -> None:  # the server keeps every request it saw: not here
            while not forget.wait(10):
                server.reset()

        threading.Thread(target=forget_hits, daemon=True).start()
        try:
            samples, peak_kb = run_crawl(config, args, traces)
        finally:
            forget.set()
            if args.storage != "sqlite":
                discard_storage(load_settings(config)[1])
        if args.tracemalloc:
            print_growth(traces)
    if not samples:
        sys.exit("soak: the crawl printed no progress line")
    total = samples[-1].pages
    half = [s for s in samples if s.pages >= total / 2]
    storage = args.storage.split("@")[-1] + (", tracemalloc" if args.tracemalloc else "")
    print(f"\n{args.hosts} hosts x {args.pages} pages, {args.latency * 1000:.0f} ms answers, "
          f"{args.delay * 1000:.0f} ms crawl delay, {args.threads} downloading threads, "
          f"storage {storage}; 1-minute load {load_before:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print("| seconds | pages done | pages/s | RssAnon MB |")
    print("|---:|---:|---:|---:|")
    step = max(1, len(samples) // args.rows)
    shown = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    previous = Sample(0.0, 0, 0.0)
    for sample in shown:
        rate = (sample.pages - previous.pages) / max(1e-9, sample.seconds - previous.seconds)
        print(
            f"| {sample.seconds:.0f} | {sample.pages:,} | {rate:.0f} | {sample.rss_anon_mb:.1f} |"
        )
        previous = sample
    print(f"slope over the last half ({half[0].pages:,} to {total:,} pages, {len(half)} samples): "
          f"{slope_kb_per_1000(half):.1f} KB per 1,000 pages; peak RssAnon "
          f"{max(s.rss_anon_mb for s in samples):.1f} MB while crawling; peak RSS (VmHWM) "
          f"{peak_kb / 1024:.1f} MB, the output included")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
