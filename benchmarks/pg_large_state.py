"""A shared crawl of a million pages: what its per-call work costs on PostgreSQL (issue 10).

    python benchmarks/pg_large_state.py [--pages 250000 1000000] [--hosts 200] [--repeat 5]
                                        [--no-output]

Builds a synthetic crawl state straight in PostgreSQL (127.0.0.1:5432, database test):
--hosts sites, --pages pages spread evenly over them (80% done: the sites whose
number ends in 4 or 9 are all waiting), two arcs per done page, a skipped link per
two pages, and the counters that go with them, then VACUUM (ANALYZE) as autovacuum
would. Then times, as medians of --repeat calls with their range:

* ``statistics()`` (what status, the live view and the finisher call);
* taking a host batch (a new worker's first ``take_for_download()``: lease a host and
  claim a batch of its waiting pages);
* lease reclaim (``recover()``): a dead worker's hosts and pages put back, as much as
  one worker can hold (8 hosts, 16 pages in progress), and the case of one host with
  2,000 pages in progress;
* writing the output files of every site (nodes, arcs, GraphML, skipped, report);
* the storage's part of it: each read of every site, per 1,000 rows it returns.

Each figure should stay flat as the crawl grows, except the output, which should grow
in proportion to its size (flat per page, and per 1,000 rows read).
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
    url = str(settings.storage)
    data = create_storage(settings)
    assert isinstance(data, PostgresDataManager)
    data.open()  # creates the crawl's schema
    data.check_identity("plugins.webgraph.manager.WebGraphManager")
    per_host = pages // hosts
    with psycopg.connect(url, autocommit=True) as conn:
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
        # What autovacuum does to a real crawl's tables as they grow (this server runs
        # without it): hint bits, the visibility map (index-only scans), statistics. A
        # bulk load left unvacuumed makes the first reads write every page they touch.
        conn.execute("VACUUM (ANALYZE) hosts, pages, urls, arcs, skipped, counts")
    return data


def measure(
    pages: int, hosts: int, repeat: int, folder: Path, *, output: bool = True, url: str = PG_URL
) -> dict[str, tuple[float, ...]]:
    config = folder / f"settings-{pages}.yaml"
    config.write_text(yaml.safe_dump({
        "sites": ["h0.test"], "storage": url, "name": f"large-{uuid.uuid4().hex}",
        "state_dir": str(folder / f"state-{pages}"), "output_dir": str(folder / f"out-{pages}"),
    }))  # fmt: skip
    _cls, settings = load_settings(config)
    started = time.perf_counter()
    data = build(config, pages, hosts)
    print(f"{pages:,} pages over {hosts} hosts built in {time.perf_counter() - started:.1f} s",
          flush=True)  # fmt: skip
    figures: dict[str, tuple[float, ...]] = {}
    try:
        data.stats_max_age = data.idle_stats_max_age = 0.0  # each call reads the counters
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

        def reclaim(hosts: int, per_host: int, running: int) -> float:
            # A worker that died holding hosts, a claimed batch of each and pages in
            # progress: its lock key is free, so the next look finds it dead.
            dead = uuid.uuid4().hex
            held = [f"h{n}.test" for n in range(4, 200, 5)][:hosts]  # sites with waiting pages
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"SET search_path TO {data.schema}")
                conn.execute("INSERT INTO workers VALUES (%s, 424242, 'gone', 1, 0)", (dead,))
                conn.execute("UPDATE hosts SET owner = %s WHERE host = ANY(%s)", (dead, held))
                conn.execute(
                    "UPDATE pages SET owner = %s WHERE id IN (SELECT id FROM hosts h, LATERAL "
                    "(SELECT id FROM pages p WHERE p.host = h.host AND p.state = 'waiting' "
                    "AND p.owner = '' LIMIT %s) claimed WHERE h.owner = %s)",
                    (dead, per_host, dead),
                )
                conn.execute(
                    "UPDATE pages SET state = 'running' WHERE id IN (SELECT id FROM pages "
                    "WHERE owner = %s LIMIT %s)",
                    (dead, running),
                )
            started = time.perf_counter()
            moved = data.recover()
            assert 0 < moved <= running  # a site of the 250,000 has 1,250 pages
            return (time.perf_counter() - started) * 1000

        # What one worker can hold: the hosts it leased (as many as its 8 threads
        # take at 1 in flight each) and its pages in progress (8 downloading, 8 bodies
        # waiting for its parsers); its queued pages have no owner, the host's lease
        # covers them. Then the case the last session measured: one host and 2,000 of
        # its pages in progress (all its 1,250 of the 250,000-page crawl).
        shapes = {
            "lease reclaim (8 hosts, 16 pages in progress)": (8, 2, 16),
            "lease reclaim (1 host, up to 2,000 pages in progress)": (1, 2000, 2000),
        }
        for name, shape in shapes.items():
            took = [reclaim(*shape) for _ in range(repeat)]
            figures[name] = (statistics.median(took), min(took), max(took))

        if output:
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
        # The storage's part of the output: each read of every site, per 1,000 rows
        # (flat when the reads are linear in what they return).
        for read in ("iter_pages", "iter_arcs", "iter_skipped"):
            started, rows = time.perf_counter(), 0
            for n in range(hosts):
                rows += sum(1 for _row in getattr(data, read)(f"h{n}.test"))
            elapsed = (time.perf_counter() - started) * 1000
            figures[f"{read}, every site, per 1,000 rows"] = (elapsed / rows * 1000, rows)
    finally:
        data.close()
        discard_storage(settings)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--no-output", action="store_true", help="skip writing the output (minutes at 1M pages)"
    )
    parser.add_argument("--storage", default=PG_URL, help="the PostgreSQL database to use")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pages in args.pages:
            results[pages] = measure(
                pages,
                args.hosts,
                args.repeat,
                Path(tmp),
                output=not args.no_output,
                url=args.storage,
            )
    print(f"\n| call | {' | '.join(f'{p:,} pages' for p in args.pages)} |")
    print("|---|" + "---:|" * len(args.pages))
    for name in results[args.pages[0]]:
        cells = []
        for pages in args.pages:
            figure = results[pages][name]
            if len(figure) == 3:
                cells.append(f"{figure[0]:.1f} ms ({figure[1]:.1f}–{figure[2]:.1f})")
            elif len(figure) == 2:
                cells.append(f"{figure[0]:.1f} ms ({figure[1]:,} rows)")
            else:
                cells.append(f"{figure[0] / 1000:.1f} s ({figure[0] / pages:.3f} ms a page)")
        print(f"| {name} | {' | '.join(cells)} |")
    print(
        f"medians of {args.repeat} calls (min–max); the output is written once, then each "
        "read of every site is timed alone"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
