"""The search task on the Python 3.11 docs served by nginx on loopback: indexing speed,
query latency under load, and ranking quality beside a SQLite FTS5 bm25 baseline.

    python benchmarks/search_bench.py [--runs 1] [--copies 22] [--clients 20] [--keep]

It reuses crawl_bench's set-up (python3.11-doc and nginx from Debian, nginx on its own
port) and prints, in one run:

* the wall time of a web-graph crawl and of a search crawl of the same site, alternated,
  and their ratio (issue 16's goal: at most 1.5), and documents indexed per second;
* median and p95 latency of ``GET /api/search`` from ``--clients`` concurrent clients
  against ``rccrawler serve`` on an index of the docs stored ``--copies`` times under
  distinct URLs (22 copies of 462 pages: over 10,000 documents);
* MRR@10 and Recall@10 of the judged queries below, per kind, for rccrawler and for an
  FTS5 table (title, body) of the same stored text ranked by bm25 (title weight 10).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import yaml
from common import write_settings
from crawl_bench import (
    SITES,
    Nginx,
    ensure_packages,
    log,
    machine,
    rccrawler_command,
    run_measured,
    warm_page_cache,
)

from plugins.search import SearchManager
from plugins.search.index import DOCS, TABLES, build_lists
from rccrawler.data.sqlite import STATE_FILE
from rccrawler.data.storage import create_storage
from rccrawler.manager import load_settings

KINDS = ("single word", "several words", "phrase", "Boolean", "wildcard")
HELD_OUT = ("several words, held out",)
"""Kinds printed apart and left out of "all": queries the ranking was never tuned on."""

JUDGED: list[tuple[str, str, tuple[str, ...]]] = [
    (kind, query, tuple(right))
    for kind, queries in yaml.safe_load(
        (Path(__file__).parent / "judged_queries.yaml").read_text(encoding="utf-8")
    ).items()
    for query, right in queries.items()
]
"""(kind, query, right pages), from ``judged_queries.yaml`` (judged by hand, before measuring)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="crawls of each task (alternated)")
    parser.add_argument("--copies", type=int, default=22, help="copies in the latency index")
    parser.add_argument("--clients", type=int, default=20, help="concurrent API clients")
    parser.add_argument("--requests", type=int, default=25, help="requests per client")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per crawl")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    if min(args.runs, args.copies, args.clients, args.requests) < 1:
        parser.error("--runs, --copies, --clients and --requests must be at least 1")
    return args


# --- crawling --------------------------------------------------------------------------


def crawl(url: str, folder: Path, manager: str | None, timeout: float) -> tuple[float, float, Path]:
    """One crawl as a child process; its wall and CPU seconds and its settings file."""
    folder.mkdir(parents=True)
    config = write_settings(folder, [url], obey_robots=True, max_depth=1000)
    if manager:
        settings = yaml.safe_load(config.read_text())
        config.write_text(yaml.safe_dump({**settings, "manager": manager}))
    cmd = [*rccrawler_command(), "--config", str(config), "--fresh", "--no-tui", "-q"]
    measure = run_measured(cmd, folder, folder / "crawler.out", timeout)
    if measure.exit_code != 0:
        sys.exit(f"search_bench: the crawl in {folder} failed (exit {measure.exit_code})")
    return measure.seconds, measure.cpu_s, config


# --- ranking quality -------------------------------------------------------------------


def site_path(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def ours(config: Path, query: str) -> list[str]:
    _cls, settings = load_settings(config)
    hits = SearchManager.search(settings, query, limit=10) or []
    return [site_path(str(hit["url"])) for hit in hits]


def fts5_table(config: Path, folder: Path) -> sqlite3.Connection:
    """An FTS5 (title, body) table of the same stored documents, Porter-stemmed."""
    _cls, settings = load_settings(config)
    source = sqlite3.connect(settings.state_dir / STATE_FILE)
    fts = sqlite3.connect(folder / "fts5.sqlite")
    fts.execute(
        "CREATE VIRTUAL TABLE docs USING fts5(url UNINDEXED, title, body, "
        "tokenize='porter unicode61')"
    )
    rows = source.execute("SELECT url, title, text FROM search_docs").fetchall()
    fts.executemany("INSERT INTO docs (url, title, body) VALUES (?, ?, ?)", rows)
    fts.commit()
    source.close()
    return fts


def baseline(fts: sqlite3.Connection, query: str) -> list[str]:
    rows = fts.execute(
        "SELECT url FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, 10.0, 1.0) LIMIT 10",
        (query,),
    ).fetchall()
    return [site_path(url) for (url,) in rows]


def scores(ranked: list[str], right: Sequence[str]) -> tuple[float, float]:
    """(reciprocal rank of the first right page within 10, recall within 10)."""
    top = ranked[:10]
    rank = next((i for i, path in enumerate(top, 1) if path in right), 0)
    return (1.0 / rank if rank else 0.0), len(set(top) & set(right)) / len(right)


def quality(config: Path, folder: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """system → kind → (MRR@10, Recall@10); misses are printed."""
    fts = fts5_table(config, folder)
    found: dict[str, dict[str, list[tuple[float, float]]]] = {"rccrawler": {}, "FTS5 bm25": {}}
    for kind, query, right in JUDGED:
        for system, ranked in (("rccrawler", ours(config, query)),
                               ("FTS5 bm25", baseline(fts, query))):  # fmt: skip
            mrr, recall = scores(ranked, right)
            found[system].setdefault(kind, []).append((mrr, recall))
            if mrr < 1.0:
                log(f"    {system:<10} {query!r}: RR {mrr:.2f}, top 3 {ranked[:3]}")
    fts.close()
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for system, kinds in found.items():
        table[system] = {}
        everything = [pair for kind in KINDS for pair in kinds[kind]]
        for kind, pairs in [*((k, kinds[k]) for k in (*KINDS, *HELD_OUT)), ("all", everything)]:
            table[system][kind] = (
                statistics.fmean(p[0] for p in pairs),
                statistics.fmean(p[1] for p in pairs),
            )
    return table


# --- latency under load ----------------------------------------------------------------


def big_index(config: Path, folder: Path, copies: int) -> tuple[Path, int]:
    """A state whose index holds the crawled documents ``copies`` times (distinct URLs):
    their rows written straight into a new SQLite state, its posting lists derived as a
    finished crawl derives them."""
    _cls, settings = load_settings(config)
    state = folder / "big" / "state"
    big = folder / "big" / "settings.yaml"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.write_text(yaml.safe_dump({"manager": "plugins.search.SearchManager",
                                   "sites": ["127.0.0.1"], "state_dir": str(state)}))  # fmt: skip
    target = create_storage(load_settings(big)[1], task_tables=TABLES)
    target.open()  # the schema, crawl tables and task tables alike
    target.close()
    source = sqlite3.connect(settings.state_dir / STATE_FILE)
    columns = ", ".join(name for name, _kind in DOCS.all_columns)
    docs = source.execute(f"SELECT {columns} FROM search_docs ORDER BY page_id").fetchall()
    source.close()
    count = 0
    marks = ", ".join("?" * len(DOCS.all_columns))
    with sqlite3.connect(state / STATE_FILE) as db:
        for copy in range(copies):
            for _page, url, *rest in docs:
                count += 1
                db.execute(f"INSERT INTO search_docs VALUES ({marks})",
                           (count, f"{url}?copy={copy}", *rest))  # fmt: skip
    target.open()  # the posting lists a finished crawl derives
    build_lists(target)
    target.close()
    return big, count


def latency(config: Path, clients: int, requests: int) -> tuple[list[float], int]:
    """Seconds per /api/search request from ``clients`` threads; and the errors."""
    server = subprocess.Popen(
        [*rccrawler_command(), "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[3].rsplit(":", 1)[1].strip("/"))
        queries = [query for _kind, query, _right in JUDGED]
        times: list[float] = []
        errors = [0]
        lock = threading.Lock()
        start = threading.Barrier(clients)

        def client(index: int) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            start.wait()
            for n in range(requests):
                query = queries[(index * requests + n) % len(queries)]
                began = time.perf_counter()
                connection.request("GET", "/api/search?" + urlencode({"q": query}))
                response = connection.getresponse()
                body = response.read()
                took = time.perf_counter() - began
                with lock:
                    times.append(took)
                    if response.status != 200 or "hits" not in json.loads(body):
                        errors[0] += 1
            connection.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return times, errors[0]
    finally:
        server.terminate()
        server.wait(10)


# --- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    site = SITES["python"]
    ensure_packages([site.package, "nginx"])
    log(f"machine: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="search_bench-"))
    try:
        with Nginx([site], work) as nginx:
            warm_page_cache(site.root)
            url = nginx.url(site)
            log(f"{site.title}: {url}")
            graph_s: list[float] = []
            search_s: list[float] = []
            cpu: dict[str, list[float]] = {"webgraph": [], "search": []}
            config = work / "none"
            for index in range(1, args.runs + 1):
                order = ("webgraph", "search") if index % 2 else ("search", "webgraph")
                for task in order:
                    manager = "plugins.search.SearchManager" if task == "search" else None
                    seconds, cpu_s, made = crawl(
                        url, work / f"{task}-{index}", manager, args.timeout
                    )
                    (search_s if task == "search" else graph_s).append(seconds)
                    cpu[task].append(cpu_s)
                    if task == "search":
                        config = made
                    log(
                        f"  {task:<8} crawl, run {index}: {seconds:.2f} s, {cpu_s:.2f} CPU s,"
                        f" load {os.getloadavg()[0]:.1f}"
                    )
        _cls, settings = load_settings(config)
        with SearchManager.open_index(settings) as data:
            documents = data.document_count()
        graph, search = statistics.median(graph_s), statistics.median(search_s)
        log(f"\nweb-graph crawl: {graph:.2f} s (median of {len(graph_s)}, "
            f"{min(graph_s):.2f}–{max(graph_s):.2f})")  # fmt: skip
        log(f"search crawl:    {search:.2f} s (median of {len(search_s)}, "
            f"{min(search_s):.2f}–{max(search_s):.2f})")  # fmt: skip
        log(f"ratio search/web-graph: {search / graph:.2f} (goal ≤ 1.5)")
        graph_cpu, search_cpu = statistics.median(cpu["webgraph"]), statistics.median(cpu["search"])
        log(f"CPU seconds: web-graph {graph_cpu:.2f}, search {search_cpu:.2f}, "
            f"ratio {search_cpu / graph_cpu:.2f} (less sensitive to a busy machine)")  # fmt: skip
        log(f"documents indexed: {documents}, {documents / search:.0f} per second of crawl")

        log("\nranking, judged queries (misses below):")
        table = quality(config, work)
        log(f"\n{'kind':<24} {'n':>3}  {'rccrawler MRR@10':>16} {'R@10':>6}   "
            f"{'FTS5 MRR@10':>11} {'R@10':>6}")  # fmt: skip
        for kind in (*KINDS, "all", *HELD_OUT):
            n = sum(1 for k, _q, _r in JUDGED if k == kind or (kind == "all" and k in KINDS))
            ours_mrr, ours_recall = table["rccrawler"][kind]
            fts_mrr, fts_recall = table["FTS5 bm25"][kind]
            log(f"{kind:<24} {n:>3}  {ours_mrr:>16.3f} {ours_recall:>6.3f}   "
                f"{fts_mrr:>11.3f} {fts_recall:>6.3f}")  # fmt: skip

        began = time.perf_counter()
        big, count = big_index(config, work, args.copies)
        log(f"\nlatency index: {count} documents ({args.copies} copies), "
            f"built in {time.perf_counter() - began:.0f} s")  # fmt: skip
        times, errors = latency(big, args.clients, args.requests)
        times.sort()
        p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
        log(f"1-minute load average after the clients: {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} cores")  # fmt: skip
        log(f"/api/search, {args.clients} concurrent clients, {len(times)} requests, "
            f"{errors} errors: median {statistics.median(times) * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms")  # fmt: skip
    finally:
        if args.keep:
            log(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
