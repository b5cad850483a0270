"""A polite crawl of many slow sites: how close each crawler comes to the politeness limit.

    python benchmarks/polite_many.py [--hosts 300] [--pages 20] [--latency 0.3]
        [--delay 1.0] [--runs 3] [--fixed N] [--no-scrapy] [--https HANDSHAKE]
        [--postgresql URL [--workers 3] [--only-postgresql]]

The web's real shape, on loopback: ``--hosts`` virtual hosts of the tests' loopback
server (``crawl.resolve`` routes each name to it), each of ``--pages`` pages (the start
page links to all the others) and a robots.txt, every answer sent ``--latency`` seconds
late. Every crawler is polite alike: one request at a time per host, ``--delay`` seconds
between two, robots.txt obeyed. A host then takes at least ``pages × delay + latency``
seconds (robots.txt at 0, a page every delay after it, the last one answered latency
later): the **politeness limit**, which nothing polite beats, whatever the machine.

With ``--https HANDSHAKE`` the sites are served over TLS (a self-signed certificate, not
verified), each new connection waiting HANDSHAKE seconds before its handshake, like a
host far away; a column then counts the TLS handshakes of each run: a new connection for
a request, where one per host would do, costs the host a handshake and the crawl its
round trips.

Rows, run in turn (A B C A B C …) so a slow moment hits all alike:

* rccrawler with default settings (no ``threads:`` key: the automatic pool);
* rccrawler with a fixed pool, ``threads: {downloading: --fixed}`` (default: one per host);
* Scrapy at equal concurrency (``CONCURRENT_REQUESTS`` = the fixed pool, 1 per domain,
  ``DOWNLOAD_DELAY`` = delay, not randomized), where Scrapy is installed (the bench extra);
* with ``--postgresql URL``: rccrawler with default settings and its state in that
  database, one worker, then ``--workers`` of them sharing the crawl (the wall time
  until the last exits; the largest peak RSS of one). ``--only-postgresql`` leaves out
  the fixed pool and Scrapy.

rccrawler reads no sitemaps here (Scrapy does not); both parse every page for links. Each
crawler is a child process; its wall time and peak RSS are its own. Printed: the medians
with their range (min–max), the median against the limit, the pages crawled, and the
1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from common import vm_hwm_kb
from support.loopback import TEXT, Resource, serve_sites
from support.sites import GeneratedSite
from webserver import make_tls_context

from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings

REPO = Path(__file__).resolve().parents[1]
SPIDER = Path(__file__).resolve().with_name("scrapy_spider.py")
ROBOTS = b"User-agent: *\nAllow: /\n"


class SlowSite(GeneratedSite):
    """A generated site with a robots.txt, every answer ``latency`` seconds late."""

    def __init__(self, host: str, pages: int, latency: float) -> None:
        super().__init__(host, pages, fanout=pages)
        self.latency = latency

    def __getitem__(self, path: str) -> Resource:
        if path == "/robots.txt":
            return Resource(ROBOTS, 200, TEXT, delay=self.latency)
        return dataclasses.replace(super().__getitem__(path), delay=self.latency)

    def __contains__(self, path: object) -> bool:
        return path == "/robots.txt" or super().__contains__(path)


@dataclasses.dataclass
class Run:
    seconds: float
    peak_rss_mb: float
    pages: int
    cpu_s: float
    """The crawler's own CPU seconds (user + system): what the machine's load does not
    change much, unlike the wall time on a shared machine."""
    handshakes: int = 0
    """TLS handshakes the server made during the run (``--https``)."""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def watch(
    command: list[str], cwd: Path, timeout: float, copies: int = 1
) -> tuple[float, float, float, int]:
    """Run ``copies`` of ``command`` at once; the wall seconds until the last ends, the
    largest peak RSS of one (MB, sampled), their CPU seconds and the worst exit code."""
    cpu_before = children_cpu()
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(copies)
    ]
    peak = 0.0
    while any(proc.poll() is None for proc in procs):
        for proc in procs:
            if proc.poll() is None:
                peak = max(peak, vm_hwm_kb(proc.pid) / 1024)
                if time.monotonic() - started > timeout:
                    proc.kill()
        time.sleep(0.05)
    seconds = time.monotonic() - started
    for proc in procs:
        stderr = proc.stderr.read() if proc.stderr is not None else ""
        if proc.returncode != 0:
            print(f"{command[:3]} exited {proc.returncode}: {stderr[-2000:]}", file=sys.stderr)
    return seconds, peak, children_cpu() - cpu_before, max(proc.returncode for proc in procs)


def rccrawler_run(folder: Path, hosts: list[str], resolve: dict[str, str],
                  args: argparse.Namespace, threads: dict[str, int] | None,
                  storage: str = "", workers: int = 1) -> Run:  # fmt: skip
    """One fresh crawl by rccrawler with ``threads`` (None: the default, no key), its
    state in SQLite, or in ``storage`` (a PostgreSQL URL) shared by ``workers``."""
    raw: dict[str, object] = {
        "sites": [f"https://{host}/" for host in hosts] if args.https is not None else hosts,
        "state_dir": "state", "output_dir": "output",
        "crawl": {"crawl_delay_ms": args.delay * 1000, "max_downloads_at_time": 1,
                  "resolve": resolve, "sitemaps": False, "timeout_s": 30,
                  "verify_tls": args.https is None},
    }  # fmt: skip
    if threads is not None:
        raw["threads"] = threads
    if storage:
        raw.update(storage=storage, name=f"polite-{uuid.uuid4().hex[:12]}")
    folder = folder / uuid.uuid4().hex[:12]  # its own state and output
    folder.mkdir()
    settings = folder / "settings.yaml"
    settings.write_text(yaml.safe_dump(raw))
    command = [sys.executable, "-m", "rccrawler", "--config", str(settings), "--no-tui", "-q"]
    try:
        seconds, peak, cpu, code = watch(command, folder, args.timeout, workers)
    finally:
        if storage:
            discard_storage(load_settings(settings)[1])
    if code != 0:
        sys.exit(f"polite_many: rccrawler exited {code}")
    report = yaml.safe_load((folder / "output" / "report.json").read_text())
    pages = sum(site["pages_done"] for site in report["sites"].values())
    return Run(seconds, peak, pages, cpu)


def scrapy_run(folder: Path, urls: list[str], args: argparse.Namespace) -> Run:
    """One crawl by Scrapy at the fixed pool's concurrency, one request a host at a time."""
    listing = folder / "urls.txt"
    listing.write_text("".join(f"{url}\n" for url in urls))
    out = folder / "scrapy-pages.txt"
    command = [sys.executable, str(SPIDER), "--delay", str(args.delay),
               "--concurrency", str(args.fixed), "--per-host", "1", "--loopback",
               f"@{listing}", str(out)]  # fmt: skip
    seconds, peak, cpu, _code = watch(command, folder, args.timeout)
    pages = len(out.read_text().split()) if out.exists() else 0
    return Run(seconds, peak, pages, cpu)


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--pages", type=int, default=20, help="pages of each host")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds each answer waits")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between two requests")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fixed", type=int, help="the fixed pool (default: one per host)")
    parser.add_argument("--no-scrapy", action="store_true", help="leave Scrapy out")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a crawl may take")
    parser.add_argument("--https", type=float, metavar="HANDSHAKE",
                        help="serve the sites over TLS, each handshake this late")  # fmt: skip
    parser.add_argument("--postgresql", metavar="URL", default="",
                        help="rows with the state in this PostgreSQL database: one worker, "
                             "and --workers of them")  # fmt: skip
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--only-postgresql",
        action="store_true",
        help="only the PostgreSQL rows (and the SQLite default to compare)",
    )
    args = parser.parse_args()
    args.fixed = args.fixed or args.hosts
    hosts = [f"h{n}.test" for n in range(args.hosts)]
    limit = args.pages * args.delay + args.latency
    scrapy = not args.no_scrapy and importlib.util.find_spec("scrapy") is not None
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        tls: dict[str, Any] = {}
        if args.https is not None:
            context, _cert = make_tls_context(folder, tuple(hosts))
            tls = {"ssl_context": context, "handshake_delay": args.https}
        sites = {host: SlowSite(host, args.pages, args.latency) for host in hosts}
        server = stack.enter_context(serve_sites(sites, **tls))
        rows: dict[str, Callable[[], Run]] = {
            "rccrawler, default settings": lambda: rccrawler_run(
                folder, hosts, server.resolve, args, None
            ),
            f"rccrawler, threads: {{downloading: {args.fixed}}}": lambda: rccrawler_run(
                folder, hosts, server.resolve, args, {"downloading": args.fixed}
            ),
        }
        if args.postgresql:
            for workers in (1, args.workers):
                label = f"rccrawler on PostgreSQL, default settings, {workers} worker" + (
                    "s" if workers > 1 else ""
                )
                rows[label] = functools.partial(
                    rccrawler_run, folder, hosts, server.resolve, args, None,
                    args.postgresql, workers,
                )  # fmt: skip
            if args.only_postgresql:
                del rows[f"rccrawler, threads: {{downloading: {args.fixed}}}"]
                scrapy = False
        if scrapy:
            urls = [f"{server.scheme}://{host}:{server.server_port}/" for host in hosts]
            label = (f"Scrapy, CONCURRENT_REQUESTS: {args.fixed}, 1 per domain, "
                     f"DOWNLOAD_DELAY: {args.delay:g}")  # fmt: skip
            rows[label] = lambda: scrapy_run(folder, urls, args)
        results: dict[str, list[Run]] = {label: [] for label in rows}
        labels = list(rows)
        for index in range(args.runs):
            # A B C, then B C A...: no row always runs first after the pause between runs.
            for label in labels[index % len(labels) :] + labels[: index % len(labels)]:
                before = len(server.handshakes)
                run = rows[label]()
                run.handshakes = len(server.handshakes) - before
                results[label].append(run)
                print(f"  run {index + 1}: {label}: {run.seconds:.1f} s, CPU {run.cpu_s:.1f} s,"
                      f" load {load():.1f}", file=sys.stderr, flush=True)  # fmt: skip
    print(f"{args.hosts} hosts × {args.pages} pages, latency {args.latency:g} s, delay "
          f"{args.delay:g} s: politeness limit {limit:.1f} s; {args.runs} runs each, "
          f"interleaved; load {load_before:.2f} before, {load():.2f} after "
          f"({os.cpu_count()} CPUs)\n")  # fmt: skip
    shake = " TLS handshakes |" if args.https is not None else ""
    print("| run | seconds, median (min–max) | against the limit | CPU s, median (min–max) "
          f"| pages | peak RSS |{shake}")  # fmt: skip
    print("|---|--:|--:|--:|--:|--:|" + ("--:|" if shake else ""))
    for label, runs in results.items():
        seconds = [run.seconds for run in runs]
        median = statistics.median(seconds)
        rss = statistics.median(run.peak_rss_mb for run in runs)
        cpu = [run.cpu_s for run in runs]
        against = f"{median / limit:.2f}×" if limit else "no limit"  # no latency, no delay
        handshakes = statistics.median(run.handshakes for run in runs)
        print(f"| {label} | {median:.1f} s ({min(seconds):.1f}–{max(seconds):.1f}) | "
              f"{against} | {statistics.median(cpu):.1f} ({min(cpu):.1f}–"
              f"{max(cpu):.1f}) | {runs[0].pages} | {rss:.0f} MB |"
              + (f" {handshakes:.0f} |" if shake else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
