"""A shared crawl of a million pages: what its per-call work costs on PostgreSQL (issue 10).

    python benchmarks/pg_large_state.py [--pages 250000 1000000] [--hosts 200] [--repeat 5]

Builds a synthetic crawl state straight in PostgreSQL (127.0.0.1:5432, database test):
--hosts sites, --pages pages spread evenly over them (80% done: the sites whose
number ends in 4 or 9 are all waiting), two arcs per done page, a skipped link per
two pages, and the counters that go with them. Then
times, as medians of --repeat calls with their range:

* ``statistics()`` (what status, the live view and the finisher call);
* taking a host batch (a new worker's first ``take_for_download()``: lease a host and
  claim a batch of its waiting pages);
* lease reclaim (a dead worker's 2,000 pages and its host put back: ``recover()``);
* writing the output files of every site (nodes, arcs, GraphML, skipped, report).

Each figure should stay flat as the crawl grows, except the output, which should grow
in proportion to its size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import yaml

from plugins.webgraph import WebGraphManager
from rccrawler.data.postgres import PostgresDataManager
from rccrawler.data.storage import create_storage, discard_storage
from rccrawler.manager import load_settings

PG_URL = "postgresql://127.0.0.1:5432/test"


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), min(times), max(times)


def build(settings_path: Path, pages: int, hosts: int) -> PostgresDataManager:
    _cls, settings = load_settings(settings_path)
    data = create_storage(settings)
    assert isinstance(data, PostgresDataManager)
    data.open()  # creates the crawl's schema
    data.check_identity("plugins.webgraph.manager.WebGraphManager")
    per_host = pages // hosts
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {data.schema}")
        conn.execute(
            "INSERT INTO hosts (host, scheme, base, crawl_delay, min_crawl_delay, "
            "max_downloads_at_time, robots_state, robots_status, robots_text, next_fetch_at, "
            "retry_after_until, in_flight, stop_reason, started_at, finished_at, admitted) "
            "SELECT 'h' || n || '.test', 'http', 'http://h' || n || '.test/', "
            "0, 0, 4, 'ready', 200, '', 0, 0, 0, '', 0, 0, %s FROM generate_series(0, %s - 1) n",
            (per_host, hosts),
        )
        # Page p of host h: done when p % 5 <> 4 (80%), else waiting.
        conn.execute(
            "INSERT INTO pages (id, host, url, normalized_url, level, state, http_status, "
            "content_type, content_hash, bytes, parsed, downloaded, out_degree) "
            "SELECT i, 'h' || (i %% %s) || '.test', 'http://h' || (i %% %s) || '.test/p/' || i, "
            "'http://h' || (i %% %s) || '.test/p/' || i, 1 + (i / %s) %% 6, "
            "CASE WHEN i %% 5 = 4 THEN 'waiting' ELSE 'done' END, "
            "CASE WHEN i %% 5 = 4 THEN NULL ELSE 200 END, 'text/html', md5(i::text), 4000, "
            "i %% 5 <> 4, i %% 5 <> 4, 2 FROM generate_series(1, %s) i",
            (hosts, hosts, hosts, hosts * 50, per_host * hosts),
        )
        conn.execute("SELECT setval('page_ids', %s)", (per_host * hosts,))
        conn.execute("INSERT INTO urls SELECT normalized_url, id FROM pages")
        conn.execute(
            "INSERT INTO arcs SELECT p.id, p.id + %s * k, p.host FROM pages p, "
            "generate_series(1, 2) k WHERE p.state = 'done' AND p.id + %s * k <= %s",
            (hosts, hosts, per_host * hosts),
        )
        conn.execute(
            "INSERT INTO skipped SELECT host, url || '?x', 'external', id FROM pages "
            "WHERE id % 2 = 0"
        )
        conn.execute(
            "INSERT INTO counts SELECT host, 'state:' || state, count(*) FROM pages "
            "GROUP BY host, state"
        )
        conn.execute("INSERT INTO counts SELECT host, 'bytes', sum(bytes) FROM pages GROUP BY host")
        conn.execute("ANALYZE")
    return data


def measure(pages: int, hosts: int, repeat: int, folder: Path) -> dict[str, tuple[float, ...]]:
    config = folder / f"settings-{pages}.yaml"
    config.write_text(yaml.safe_dump({
        "sites": ["h0.test"], "storage": PG_URL, "name": f"large-{uuid.uuid4().hex}",
        "state_dir": str(folder / f"state-{pages}"), "output_dir": str(folder / f"out-{pages}"),
    }))  # fmt: skip
    _cls, settings = load_settings(config)
    started = time.perf_counter()
    data = build(config, pages, hosts)
    print(f"{pages:,} pages over {hosts} hosts built in {time.perf_counter() - started:.1f} s",
          flush=True)  # fmt: skip
    figures: dict[str, tuple[float, ...]] = {}
    try:
        data.stats_max_age = 0.0
        figures["statistics()"] = timed(data.statistics, repeat)

        def take_a_batch() -> None:
            worker = create_storage(settings)
            assert isinstance(worker, PostgresDataManager)
            worker.open()
            try:
                started = time.perf_counter()
                page = worker.take_for_download()
                took.append((time.perf_counter() - started) * 1000)
                assert page is not None
            finally:
                worker.close()

        took: list[float] = []
        for _ in range(repeat):
            take_a_batch()
        figures["take a host batch"] = (statistics.median(took), min(took), max(took))

        def reclaim() -> None:
            # A worker that died holding a host and 2,000 of its pages: its lock key is
            # free, so the next look finds it dead.
            dead = uuid.uuid4().hex
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"SET search_path TO {data.schema}")
                conn.execute("INSERT INTO workers VALUES (%s, 424242, 'gone', 1, 0)", (dead,))
                conn.execute("UPDATE hosts SET owner = %s WHERE host = 'h4.test'", (dead,))
                conn.execute(
                    "UPDATE pages SET owner = %s, state = 'running' WHERE id IN (SELECT id "
                    "FROM pages WHERE host = 'h4.test' AND state = 'waiting' LIMIT 2000)",
                    (dead,),
                )
            started = time.perf_counter()
            moved = data.recover()
            took_reclaim.append((time.perf_counter() - started) * 1000)
            assert moved > 0

        took_reclaim: list[float] = []
        for _ in range(repeat):
            reclaim()
        figures["lease reclaim"] = (
            statistics.median(took_reclaim),
            min(took_reclaim),
            max(took_reclaim),
        )

        manager = WebGraphManager(settings)
        try:
            manager.data.close()
            manager.data = data
            manager.finished = True
            started = time.perf_counter()
            manager.unload()
            figures["write the output"] = ((time.perf_counter() - started) * 1000,)
        finally:
            manager.fetcher.close()
    finally:
        data.close()
        discard_storage(settings)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pages in args.pages:
            results[pages] = measure(pages, args.hosts, args.repeat, Path(tmp))
    print(f"\n| call | {' | '.join(f'{p:,} pages' for p in args.pages)} |")
    print("|---|" + "---:|" * len(args.pages))
    for name in results[args.pages[0]]:
        cells = []
        for pages in args.pages:
            figure = results[pages][name]
            cells.append(
                f"{figure[0]:.1f} ms ({figure[1]:.1f}–{figure[2]:.1f})"
                if len(figure) == 3
                else f"{figure[0] / 1000:.1f} s"
            )
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"medians of {args.repeat} calls (min–max); the output is written once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
