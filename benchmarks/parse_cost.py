"""What one parse of every page of the Debian doc packages costs, and how much of it is
the nesting guard (``crawl.max_html_depth``), in this process, without the network.

    .venv/bin/python benchmarks/parse_cost.py          # --runs N (5), --sites python,...

For each site: a links-only parse (what a web-graph crawl does) with the guard and
without it, and a full parse (what the search task's workers do). The guard scans the
markup of a page with many tags for its depth before the tree is built (a tree
builder pays depth² for deep markup): on the large pages of Sphinx-built docs that
scan cost more than their parse. Each figure is the fastest of ``--runs`` passes over
all the pages, so a busy machine shows less.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rccrawler.config import CrawlSettings
from rccrawler.web.html import parse_html

SITES = {
    "python": Path("/usr/share/doc/python3.11/html"),
    "postgres": Path("/usr/share/doc/postgresql-doc-15/html"),
    "sqlalchemy": Path("/usr/share/doc/python-sqlalchemy-doc/html"),
}
"""Where Debian's python3.11-doc, postgresql-doc-15 and python-sqlalchemy-doc put them."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="passes over the pages")
    parser.add_argument("--sites", default=",".join(SITES), help="comma-separated")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    unknown = set(args.sites.split(",")) - set(SITES)
    if unknown:
        parser.error(f"unknown sites: {', '.join(sorted(unknown))}")
    return args


def fastest(
    runs: int, pages: list[tuple[str, bytes]], parse: Callable[[bytes, str], object]
) -> float:
    """Seconds of the fastest of ``runs`` passes of ``parse`` over the pages."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for url, body in pages:
            parse(body, url)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    depth = CrawlSettings().max_html_depth
    print(f"fastest of {args.runs} passes; the guard flattens markup deeper than {depth}")
    print("| site | pages | MB | links-only | of it the guard | full |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.sites.split(","):
        root = SITES[name]
        files = sorted(root.rglob("*.html"))
        if not files:
            print(f"{name}: no pages under {root} (apt-get install the doc package)")
            continue
        pages = [
            (f"http://127.0.0.1/{path.relative_to(root)}", path.read_bytes()) for path in files
        ]
        size = sum(len(body) for _, body in pages) / 1e6
        links = fastest(
            args.runs, pages, lambda body, url: parse_html(body, url, "text/html", max_depth=depth)
        )
        bare = fastest(args.runs, pages, lambda body, url: parse_html(body, url, "text/html"))
        full = fastest(
            args.runs,
            pages,
            lambda body, url: parse_html(body, url, "text/html", full=True, max_depth=depth),
        )
        print(f"| {name} | {len(pages)} | {size:.1f} | {1000 * links:.0f} ms "
              f"| {1000 * (links - bare):.0f} ms | {1000 * full:.0f} ms |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
