"""What storing a crawl costs in CPU a page, call by call, with no HTTP and no threads.

    .venv/bin/python benchmarks/store_cost.py [postgres] [--runs 3] [--one-thread]

Replays a crawl of one of crawl_bench's sites against the SQLite DataManager in one
thread: each HTML page of the site is read from disk and parsed once beforehand (its
links, classified as a ParsingThread classifies them, less the robots and scope rules,
which allow everything here); then, breadth-first from the start page, each page is
leased (``take_for_download``), stored as downloaded (``store_download``, with the
file's body and its hash, which is the downloader's work and not counted), taken for
parsing and stored with its links
(``store_parse``), as the threads of a crawl would, one page at a time. Each figure is
the thread CPU a call of the fastest of ``--runs`` replays, each on a fresh state.

With ``fetch_cost.py`` (the HTTP exchange) and ``parse_cost.py`` (the parse), it gives
the floor of each part of a page's CPU. ``--one-thread`` does the whole of each page
in one thread as well, with the site served by nginx as crawl_bench.py serves it: the
request (``Fetcher.download``), the hash, the parse, the link rules above and the four
calls, one page after another. That is what a crawl would cost with no thread ever
waiting for another, the floor of the threaded design. Issue 14 asks what stands
between the crawl and wget.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from crawl_bench import SITES, Nginx, Site, warm_page_cache

from rccrawler.config import CrawlSettings
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.records import DownloadResult, FoundLink, HostData, SkippedLink, SkipReason
from rccrawler.threads.downloading import content_hash
from rccrawler.web.fetch import Fetcher
from rccrawler.web.html import parse_html
from rccrawler.web.urls import host_of, link_scope, normalize_url, request_url

CALLS = ("take_for_download", "store_download", "take_for_parsing", "store_parse")
Links = tuple[list[FoundLink], list[SkippedLink]]


def classify(links: tuple[str, ...], host: str) -> Links:
    """A page's links as a ParsingThread classifies them (no robots or scope rules)."""
    found: list[FoundLink] = []
    skipped: list[SkippedLink] = []
    for link in links:
        scope = link_scope(link, host)
        normalized = normalize_url(link)
        if scope is not None or normalized is None:
            skipped.append(SkippedLink(normalized or link, SkipReason(scope or "scheme")))
        else:
            found.append(FoundLink(request_url(link), normalized))
    return found, skipped


def site_pages(root: Path, base: str) -> dict[str, tuple[bytes, Links]]:
    """Every HTML page of the site by normalized URL: its body and its classified links."""
    host = host_of(base)
    pages = {}
    for path in sorted(root.rglob("*.html")):
        url = base + str(path.relative_to(root))
        body = path.read_bytes()
        links = classify(parse_html(body, url, "text/html", full=False).links, host)
        pages[normalize_url(url) or url] = (body, links)
    index = normalize_url(base + "index.html") or ""
    pages.setdefault(normalize_url(base) or base, pages.get(index, (b"", ([], []))))
    return pages


@contextmanager
def fresh_crawl(base: str) -> Iterator[SQLiteDataManager]:
    """A new crawl state of one site at ``base``, its robots.txt stored (none)."""
    host = host_of(base)
    with tempfile.TemporaryDirectory(prefix="store-cost-") as folder:
        data = SQLiteDataManager(Path(folder) / "crawl.sqlite3")
        data.open()
        try:
            site = HostData(host=host, crawl_delay=0.0, max_downloads_at_time=8)
            data.add_site(site, base, normalize_url(base) or base)
            data.store_robots(host, 404, "", None, blocked=False)
            yield data
            data.flush()
        finally:
            data.close()


class CallClock:
    """Thread CPU seconds and calls, by DataManager method."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __call__(self, method: Callable[..., Any], *args: Any) -> Any:
        started = time.thread_time()
        outcome = method(*args)
        self.spent[method.__name__] += time.thread_time() - started
        self.calls[method.__name__] += 1
        return outcome


def replay(pages: dict[str, tuple[bytes, Links]], base: str) -> tuple[CallClock, int]:
    """One crawl of ``pages`` on a fresh state: its calls timed, and the pages parsed."""
    timed = CallClock()
    parsed = 0
    with fresh_crawl(base) as data:
        while (page := timed(data.take_for_download)) is not None:
            body, (links, skipped) = pages.get(page.normalized_url, (b"", ([], [])))
            result = (
                DownloadResult(status=200, content_type="text/html", body=body)
                if body
                else DownloadResult(status=404, content_type="text/html")
            )
            timed(data.store_download, page.id, result, content_hash(body) if body else "")
            item = timed(data.take_for_parsing)
            if item is None:
                continue  # not HTML, or a duplicate body: no parse
            timed(data.store_parse, item[0].id, links, skipped)
            parsed += 1
    return timed, parsed


def one_thread_crawl(base: str) -> tuple[float, float, int]:
    """The whole crawl of the site at ``base`` in this thread, page after page: thread
    CPU seconds, wall seconds and the pages parsed."""
    host = host_of(base)
    fetcher = Fetcher(CrawlSettings(cookies=False))
    cpu, wall, parsed = time.thread_time(), time.perf_counter(), 0
    try:
        with fresh_crawl(base) as data:
            while (page := data.take_for_download()) is not None:
                result = fetcher.download(page.url)
                digest = content_hash(result.body) if result.status == 200 else ""
                data.store_download(page.id, result, digest)
                item = data.take_for_parsing()
                if item is None:
                    continue
                taken, body = item
                parsed_page = parse_html(body, taken.url, taken.content_type, full=False)
                data.store_parse(taken.id, *classify(parsed_page.links, host))
                parsed += 1
    finally:
        fetcher.close()
    return time.thread_time() - cpu, time.perf_counter() - wall, parsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default="postgres", choices=sorted(SITES))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one-thread", action="store_true", help="the whole page work too")
    args = parser.parse_args()
    site = SITES[args.site]
    if not site.root.is_dir():
        raise SystemExit(f"store_cost: {site.root} is missing (apt install {site.package})")
    if args.one_thread:
        return print_one_thread(site, args.runs)
    base = "http://127.0.0.1:8102/"
    pages = site_pages(site.root, base)
    best: dict[str, float] = {}
    counts: dict[str, int] = {}
    parsed = 0
    for _ in range(args.runs):
        timed, parsed = replay(pages, base)
        for name in CALLS:
            per_call = timed.spent[name] / max(timed.calls[name], 1)
            best[name] = min(best.get(name, per_call), per_call)
            counts[name] = timed.calls[name]
    print(f"{site.title}: {parsed} pages parsed and stored, fastest of {args.runs} replays")
    print("| call | calls | CPU µs a call |")
    print("|---|--:|--:|")
    for name in CALLS:
        print(f"| {name} | {counts[name]} | {best[name] * 1e6:.0f} |")
    per_page = sum(best[name] * counts[name] for name in CALLS) / max(parsed, 1)
    print(f"| all four, a parsed page | | {per_page * 1e6:.0f} |")
    return 0


def print_one_thread(site: Site, runs: int) -> int:
    """Serve ``site`` with nginx and crawl it ``runs`` times in this thread."""
    warm_page_cache(site.root)
    with (
        tempfile.TemporaryDirectory(prefix="store-cost-") as work,
        Nginx([site], Path(work)) as nginx,
    ):
        print(f"{site.title}: the whole crawl in one thread, {runs} runs")
        print("| run | pages | CPU µs a page | crawl s | pages/s |")
        print("|---|--:|--:|--:|--:|")
        for run in range(1, runs + 1):
            cpu, wall, parsed = one_thread_crawl(nginx.url(site))
            print(f"| {run} | {parsed} | {cpu / parsed * 1e6:.0f} | {wall:.2f} | "
                  f"{parsed / wall:.0f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
