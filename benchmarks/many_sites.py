"""Crawl thousands of small sites at once on loopback; print the whole crawl's seconds.

    python benchmarks/many_sites.py [--sites 2000] [--pages 5] [--runs 3] [--against TREE]

A crawl of "a set of sites" may start from thousands of seeds. Every
site here is a host of its own on the tests' loopback server (``crawl.resolve``), with
``--pages`` generated pages (the tests' ``generated_site``: the start page links to all
the others), so the crawl makes ``sites × (pages + 1)``
requests (robots.txt included). The crawler runs as its own process
(``python -m rccrawler``), the server in this one. With ``--against TREE`` (another
checkout of rccrawler) each run of this tree is paired with one of that tree, A B A B,
and the medians, their ranges and the ratio of the medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import vm_hwm_kb
from support.loopback import serve_sites
from support.sites import generated_site

REPO = Path(__file__).resolve().parents[1]


def crawl_once(tree: Path, folder: Path, settings: Path) -> dict[str, float]:
    """One fresh crawl with the rccrawler of ``tree``: its seconds and peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "rccrawler", "--config", str(settings), "--fresh",
               "--no-tui", "-q"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, vm_hwm_kb(proc.pid) / 1024)
        time.sleep(0.05)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"the crawl of {tree} exited {proc.returncode}")
    report = json.loads((folder / "output" / "report.json").read_text())
    done = sum(site["pages_done"] for site in report["sites"].values())
    return {"seconds": seconds, "pages": done, "peak_rss_mb": peak}


def summary(label: str, runs: list[dict[str, float]]) -> str:
    seconds = [run["seconds"] for run in runs]
    rss = statistics.median(run["peak_rss_mb"] for run in runs)
    return (f"{label}: {statistics.median(seconds):.2f} s ({min(seconds):.2f}–{max(seconds):.2f}),"
            f" {runs[0]['pages']:.0f} pages, peak RSS {rss:.0f} MB")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=5, help="pages of each site")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, run in turn")
    args = parser.parse_args()
    hosts = [f"s{n}.test" for n in range(args.sites)]
    trees = [("this tree", REPO)]
    if args.against is not None:
        trees.append((str(args.against), args.against.resolve()))
    with (
        serve_sites(
            {host: generated_site(host, args.pages, fanout=args.pages) for host in hosts}
        ) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        folder = Path(tmp)
        settings = folder / "settings.yaml"
        settings.write_text(yaml.safe_dump({
            "sites": hosts,  # not sites_file: a tree before it came reads these too
            "state_dir": "state", "output_dir": "output",
            "threads": {"downloading": 8, "parsing": 2},
            "crawl": {"crawl_delay_ms": 0, "resolve": server.resolve, "sitemaps": False},
        }))  # fmt: skip
        results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
        for _ in range(args.runs):
            for label, tree in trees:  # A B A B: a slow moment hits both alike
                results[label].append(crawl_once(tree, folder, settings))
    print(f"{args.sites} sites of {args.pages} pages, {args.runs} runs each, medians (min–max):")
    for label, runs in results.items():
        print(summary(label, runs))
    if args.against is not None:
        this, other = (
            statistics.median(r["seconds"] for r in results[label]) for label, _ in trees
        )
        print(f"this tree takes {this / other:.2f}× the time of {args.against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
