"""Crawl big generated sites on loopback; print pages/s and the crawler's peak RSS.

    python benchmarks/large_site.py [--pages 10000] [--frontier 10000 100000]

Part 1 crawls a generated site of --pages pages to completion. Part 2 grows the
frontier: every page carries 500 links to pages that do not exist yet, and the
crawl is stopped (rccrawler stop) once that many URLs are waiting; the peak RSS
at each frontier size shows whether memory grows with the frontier. The
crawler runs as its own process (`python -m rccrawler`), the server in this one.
The peak RSS is the crawl's process's; beside it, the most private memory of the
processes it started, if any (forks, whose RSS would count the pages they share with
the crawl again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import children_private_kb, vm_hwm_kb, write_settings
from support.loopback import serve_sites
from support.sites import generated_site

Peaks = dict[str, float]


def sample_peaks(pid: int, peaks: Peaks) -> None:
    """Raise ``peaks["crawl"]`` to the crawl's process's VmHWM, and ``peaks["helper"]`` to
    the private memory of the processes it started (MB). A fork shares the crawl's
    pages, which its RSS counts again: only what is its own is its cost."""
    peaks["crawl"] = max(peaks.get("crawl", 0.0), vm_hwm_kb(pid) / 1024)
    peaks["helper"] = max(peaks.get("helper", 0.0), children_private_kb(pid) / 1024)


def crawler(config: Path, *args: str) -> list[str]:
    crawl_only = [] if args else ["--no-tui"]  # the other commands have no live view
    return [sys.executable, "-m", "rccrawler", *args, "--config", str(config), *crawl_only, "-q"]


def full_crawl(pages: int) -> dict[str, float]:
    host = "big.test"
    with (
        serve_sites({host: generated_site(host, pages, fanout=10)}) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config = write_settings(Path(tmp), [f"http://{host}/"], resolve=server.resolve)
        started = time.monotonic()
        proc = subprocess.Popen(crawler(config, "crawl"), stdout=subprocess.DEVNULL)
        peaks: Peaks = {}
        while proc.poll() is None:
            sample_peaks(proc.pid, peaks)
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        report = json.loads((Path(tmp) / "output" / "report.json").read_text())
        done = report["sites"][host]["pages_done"]
    return {
        "pages": done,
        "seconds": elapsed,
        "pages_per_s": done / elapsed,
        "peak_rss_mb": peaks.get("crawl", 0.0),
        "helper_rss_mb": peaks.get("helper", 0.0),
    }


def frontier_growth(target: int) -> dict[str, float]:
    host = "wide.test"
    site = generated_site(host, 100_000, fanout=10, extra_unvisited_links=500)
    with serve_sites({host: site}) as server, tempfile.TemporaryDirectory() as tmp:
        config = write_settings(Path(tmp), [f"http://{host}/"], resolve=server.resolve)
        proc = subprocess.Popen(crawler(config, "crawl"), stdout=subprocess.DEVNULL)
        peaks: Peaks = {}
        waiting = 0
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            sample_peaks(proc.pid, peaks)
            status = subprocess.run(
                crawler(config, "status", "--json"), capture_output=True, text=True
            )
            # A status taken while the crawl starts may list no site yet.
            sites = json.loads(status.stdout)["sites"] if status.returncode == 0 else []
            if sites:
                waiting = sites[0]["waiting"]
                if waiting >= target:
                    subprocess.run(crawler(config, "stop"), capture_output=True)
                    break
            time.sleep(0.5)
        while proc.poll() is None:
            sample_peaks(proc.pid, peaks)
            time.sleep(0.1)
    return {
        "frontier": waiting,
        "peak_rss_mb": peaks.get("crawl", 0.0),
        "helper_rss_mb": peaks.get("helper", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--frontier", type=int, nargs="*", default=[10_000, 100_000])
    args = parser.parse_args()
    result = full_crawl(args.pages)
    print(
        f"full crawl: {result['pages']:.0f} pages in {result['seconds']:.1f} s = "
        f"{result['pages_per_s']:.0f} pages/s, peak RSS {result['peak_rss_mb']:.0f} MB "
        f"(+ {result['helper_rss_mb']:.0f} MB its children's own)"
    )
    for target in args.frontier:
        growth = frontier_growth(target)
        print(
            f"frontier of {growth['frontier']:.0f} waiting URLs: "
            f"peak RSS {growth['peak_rss_mb']:.0f} MB "
            f"(+ {growth['helper_rss_mb']:.0f} MB its children's own)"
        )


if __name__ == "__main__":
    main()
