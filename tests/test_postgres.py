"""storage: postgresql:// (SPEC §9): several processes share one crawl.

The crawl rules themselves run on both backends in test_crawl.py, test_resume.py,
test_hostile.py and test_search.py (the ``both_backends`` mark of conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from crawling import CrawlResult, CrawlRunner, wait_until
from support.sites import generated_site
from webserver import Resource, SiteServer

from plugins.webgraph import WebGraphManager
from rccrawler.data.coordination import (
    HINT_FREE,
    HINT_SPARE,
    LEASE_BATCH,
    ROBOTS_BATCH,
    worth_one_more,
)
from rccrawler.data.postgres import PostgresDataManager, schema_for
from rccrawler.manager import load_settings
from rccrawler.records import DownloadResult, FoundLink, HostData, PageData

TESTS = Path(__file__).parent


class OtherManager(WebGraphManager):
    """Another crawl task, to show a shared crawl refuses a worker of another task."""


@pytest.fixture
def pg_crawler(tmp_path: Path, postgresql: str) -> Iterator[CrawlRunner]:
    """A CrawlRunner whose crawls live in PostgreSQL (skipped if it is unreachable, not in CI)."""
    runner = CrawlRunner(tmp_path / "pg", storage=postgresql)
    yield runner
    runner.discard()


# -- several worker processes -----------------------------------------------------------


def start_workers(path: Path, count: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.getcwd()])}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "rccrawler", "--config", str(path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(count)
    ]


def worker_settings(
    pg_crawler: CrawlRunner, server: SiteServer, downloading: int, parsing: int, **crawl: Any
) -> Path:
    """The settings of a shared crawl of a.test: each worker's threads and ``crawl:`` keys."""
    threads = {"downloading": downloading, "parsing": parsing}
    return pg_crawler.settings_file(["a.test"], server.resolve, threads=threads, crawl=crawl)


def wait_all(workers: list[subprocess.Popen[bytes]], timeout: float = 60) -> list[str]:
    """Each worker's log, once all have exited with 0."""
    logs = []
    for worker in workers:
        _out, err = worker.communicate(timeout=timeout)
        logs.append(err.decode(errors="replace"))
        assert worker.returncode == 0, logs[-1][-3000:]
    return logs


def graph_by_url(result: CrawlResult, host: str) -> tuple[set[str], set[tuple[str, str]]]:
    """A site's nodes and arcs as URLs, so two crawls compare whatever their page ids."""
    graph = result.graph(host)
    url_of = {int(n["id"]): n["url"] for n in graph.nodes}
    return graph.urls, {(url_of[f], url_of[t]) for f, t in graph.arcs}


def load_result(path: Path) -> CrawlResult:
    _manager_cls, settings = load_settings(path)
    return CrawlResult(True, settings.output_dir, {}, None)  # type: ignore[arg-type]


def test_three_workers_share_one_crawl(serve, pg_crawler, tmp_path):
    site = generated_site("a.test", 600, fanout=5)
    server = serve({"a.test": site})
    path = worker_settings(pg_crawler, server, 4, 2, max_downloads_at_time=4)
    started = time.monotonic()
    logs = wait_all(start_workers(path, 3))
    elapsed_3 = time.monotonic() - started
    # One worker, elected, writes the output files (a slower one, finding the crawl
    # over after the first had closed, once wrote them all again).
    writers = [log for log in logs if "report.json" in log]
    assert len(writers) == 1, [log[-600:] for log in logs]
    paths = Counter(server.paths_for("a.test"))
    pages = [p for p in paths if p != "/robots.txt"]
    assert len(pages) == 600
    assert max(paths.values()) == 1, [p for p, n in paths.items() if n > 1][:10]
    assert server.peak_in_flight["a.test"] <= 4
    pg_nodes, pg_arcs = graph_by_url(load_result(path), "a.test")
    status = subprocess.run(
        [sys.executable, "-m", "rccrawler", "status", "--json", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    (site_status,) = json.loads(status.stdout)["sites"]
    assert site_status["done"] == 600 and site_status["waiting"] == 0
    assert site_status["stop_reason"] == "no waiting links left"

    server.hits.clear()
    started = time.monotonic()
    single = CrawlRunner(tmp_path / "sqlite").run(
        ["a.test"], server.resolve, threads={"downloading": 4, "parsing": 2},
        crawl={"max_downloads_at_time": 4},
    )  # fmt: skip
    elapsed_1 = time.monotonic() - started
    sqlite_nodes, sqlite_arcs = graph_by_url(single, "a.test")
    assert len(sqlite_nodes) == 600
    assert pg_nodes == sqlite_nodes
    assert pg_arcs == sqlite_arcs
    print(f"600 pages: 3 PostgreSQL workers {elapsed_3:.2f} s, 1 SQLite process {elapsed_1:.2f} s")


def test_three_workers_keep_the_host_limit(serve, pg_crawler):
    # Which worker holds a host, and the crawl delay its next holder waits out, are
    # asserted on injected clocks (test_politeness.py); the server's arrival stamps
    # drift with the machine's load, so here the log is read for what cannot drift.
    server = serve({"a.test": generated_site("a.test", 40, fanout=4)})
    path = worker_settings(pg_crawler, server, 3, 1, crawl_delay_ms=100, max_downloads_at_time=2)
    wait_all(start_workers(path, 3))
    hits = server.hits_for("a.test")
    assert len(hits) == 41  # robots.txt and every page, once
    assert len({h.path for h in hits}) == 41
    assert hits[0].path == "/robots.txt"
    assert server.peak_in_flight["a.test"] <= 2


def test_the_output_reads_a_finished_crawl_with_statistics_of_it(serve, pg_crawler):
    # The statistics the crawl took as it grew were of pages mostly waiting (or, for a
    # small crawl, there were none): the join of the graph's arcs was then planned for
    # a handful of finished pages, and once took 0.45 s instead of 0.01 s.
    server = serve({"a.test": generated_site("a.test", 60, fanout=4)})
    result = pg_crawler.run(["a.test"], server.resolve)
    assert len(result.graph("a.test").urls) == 60
    _manager_cls, settings = load_settings(pg_crawler.written[-1])
    with psycopg.connect(settings.storage, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema_for(settings.crawl_name)}")
        for table in ("pages", "arcs", "urls"):
            (rows,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone() or (0,)
            (known,) = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (table,)
            ).fetchone() or (-1,)
            assert rows > 0 and known == rows, table
        (done,) = conn.execute("SELECT count(*) FROM pages WHERE state = 'done'").fetchone() or (0,)
        (plan,) = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT id FROM pages WHERE state = 'done'"
        ).fetchone() or ([],)
        assert done == 60 and plan[0]["Plan"]["Plan Rows"] == done


def live_worker_rows(path: Path) -> int:
    """Workers that joined the crawl of these settings and did not leave (its table)."""
    _manager_cls, settings = load_settings(path)
    with psycopg.connect(settings.storage, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = 'workers'",
            (schema_for(settings.crawl_name),),
        ).fetchone()
        if not row or not row[0]:
            return 0
        conn.execute(f"SET search_path TO {schema_for(settings.crawl_name)}")
        return int((conn.execute("SELECT count(*) FROM workers").fetchone() or (0,))[0])


def test_a_killed_worker_s_pages_are_taken_over_at_once(serve, pg_crawler):
    site = generated_site("a.test", 200, fanout=4)
    slow = {p: Resource(r.body, r.status, r.headers, delay=0.15) for p, r in site.items()}
    server = serve({"a.test": slow})
    path = worker_settings(pg_crawler, server, 4, 1, max_downloads_at_time=4)
    (victim,) = start_workers(path, 1)
    server.wait_for_hits(12, "a.test", timeout=20, alive=lambda: victim.poll() is None)
    # The others are up before the kill (they wait: the victim holds the only host),
    # so what is measured is the takeover, not how long a worker takes to start.
    survivors = start_workers(path, 2)
    assert wait_until(lambda: live_worker_rows(path) == 3, timeout=60, interval=0.05)
    victim.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.communicate(timeout=5)  # reaps it and closes its pipe
    wait_all(survivors)
    hits = server.hits_for("a.test")
    before = Counter(h.path for h in hits if h.at <= killed_at)
    again = Counter(h.path for h in hits if h.at > killed_at)
    assert again, "the crawl was over before the kill"
    twice = [p for p in again if before[p]]
    assert twice, "the killed worker had nothing in flight"
    # Only what was in flight or waiting for a parser in the dead worker is fetched
    # again: at most (downloading + parsing threads) x 2 pages.
    assert len(twice) <= (4 + 1) * 2, twice
    assert max((before + again).values()) == 2
    # Its connection went with it, and with it its advisory lock: taken over at once
    # (the survivors look every 0.5 s), not after a lease timeout.
    first_again = min(h.at for h in hits if h.at > killed_at and h.path in twice)
    assert first_again - killed_at < 5.0
    nodes, _arcs = graph_by_url(load_result(path), "a.test")
    assert len(nodes) == 200


def test_stop_resume_identity_and_fresh(serve, pg_crawler):
    server = serve({"a.test": generated_site("a.test", 300, fanout=5)})
    # A crawl delay keeps the crawl going for at least 300 x 15 ms whatever the load, so
    # the stop comes while it runs (without one, a loaded machine let it finish first).
    path = pg_crawler.settings_file(["a.test"], server.resolve, crawl={"crawl_delay_ms": 15})
    (worker,) = start_workers(path, 1)
    server.wait_for_hits(60, timeout=20, alive=lambda: worker.poll() is None)
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert len(server.hits) < 301, "the crawl finished before it was stopped"
    # Another crawl task on the same state is refused, and changes nothing.
    other = path.with_name("other.yaml")
    other.write_text(path.read_text() + "manager: test_postgres.OtherManager\n")
    (refused,) = start_workers(other, 1)
    _out, err = refused.communicate(timeout=30)
    assert refused.returncode == 2
    # Other workers may share this crawl: the way out is another name, never --fresh.
    assert b"belongs to manager" in err and b"name:" in err and b"--fresh" not in err
    # Resuming repeats nothing (a clean stop leaves no page leased).
    wait_all(start_workers(path, 1))
    assert max(Counter(server.paths_for("a.test")).values()) == 1
    nodes, _arcs = graph_by_url(load_result(path), "a.test")
    assert len(nodes) == 300
    # --fresh drops the crawl's schema: everything is fetched once more.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.getcwd()])}
    fresh = subprocess.run(
        [sys.executable, "-m", "rccrawler", "--config", str(path), "--fresh"],
        env=env, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    assert set(Counter(server.paths_for("a.test")).values()) == {2}


def test_rccrawler_stop_reaches_every_worker_through_the_database(serve, pg_crawler):
    site = generated_site("a.test", 300, fanout=5)
    server = serve({"a.test": site})
    path = pg_crawler.settings_file(["a.test"], server.resolve, crawl={"crawl_delay_ms": 20})
    workers = start_workers(path, 2)
    assert server.wait_for_hits(20, timeout=30), "the workers did not start crawling"
    stop = subprocess.run([sys.executable, "-m", "rccrawler", "stop", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert stop.returncode == 0, stop.stderr
    assert "every worker" in stop.stdout
    wait_all(workers)  # both exit 0 on their own, within a few seconds
    stopped_at = len(server.hits)
    assert stopped_at < 250
    # A worker started after the request is not stopped by it: it finishes the crawl.
    wait_all(start_workers(path, 1))
    paths = Counter(server.paths_for("a.test"))
    assert len([p for p in paths if p != "/robots.txt"]) == 300
    assert max(paths.values()) == 1, "a clean stop hands back its leases: nothing twice"
    assert len(graph_by_url(load_result(path), "a.test")[0]) == 300


def bfs_levels(nodes: dict[int, str], arcs: list[tuple[int, int]], root: int) -> dict[int, int]:
    """Shortest distances from the root along the graph's arcs."""
    children: dict[int, list[int]] = {}
    for source, target in arcs:
        children.setdefault(source, []).append(target)
    levels, frontier = {root: 0}, [root]
    while frontier:
        following = []
        for node in frontier:
            for child in children.get(node, []):
                if child not in levels:
                    levels[child] = levels[node] + 1
                    following.append(child)
        frontier = following
    return levels


@pytest.mark.parametrize("max_depth", [100, 3])
def test_levels_are_shortest_distances_whatever_order_workers_find_links(
    serve, pg_crawler, tmp_path, max_depth
):
    site = generated_site("a.test", 300, fanout=3, seed=5)
    rng = random.Random(7)
    # Uneven answer times shuffle the order in which pages are parsed, across workers.
    uneven = {p: Resource(r.body, r.status, r.headers, delay=rng.choice((0, 0, 0.02, 0.08)))
              for p, r in site.items()}  # fmt: skip
    server = serve({"a.test": uneven})
    options = {"threads": {"downloading": 4, "parsing": 2},
               "crawl": {"max_downloads_at_time": 4, "max_depth": max_depth}}  # fmt: skip
    path = pg_crawler.settings_file(["a.test"], server.resolve, **options)
    wait_all(start_workers(path, 3))
    shared = load_result(path).graph("a.test")
    single = CrawlRunner(tmp_path / "sqlite").run(["a.test"], server.resolve, **options)
    alone = single.graph("a.test")
    level_of = {n["url"]: int(n["level"]) for n in shared.nodes}
    assert level_of == {n["url"]: int(n["level"]) for n in alone.nodes}
    assert graph_by_url(load_result(path), "a.test") == graph_by_url(single, "a.test")
    # And each level is the shortest distance from the start page along the arcs.
    ids = {int(n["id"]): n["url"] for n in shared.nodes}
    root = next(i for i, url in ids.items() if url == "http://a.test/")
    distances = bfs_levels(ids, shared.arcs, root)
    assert {ids[i]: d for i, d in distances.items()} == level_of


def test_workers_survive_status_and_a_late_joiner(serve, pg_crawler):
    server = serve({"a.test": generated_site("a.test", 400, fanout=4)})
    # A crawl delay keeps the crawl going for at least 400 x 15 ms, whatever the load,
    # so `status` runs many times beside the workers and the fourth one joins midway.
    path = worker_settings(pg_crawler, server, 4, 1, max_downloads_at_time=4, crawl_delay_ms=15)
    workers = start_workers(path, 3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.getcwd()])}
    late: list[subprocess.Popen[bytes]] = []
    statuses = 0
    deadline = time.monotonic() + 60
    try:
        while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
            status = subprocess.run(
                [sys.executable, "-m", "rccrawler", "status", "--json", "--config", str(path)],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            # Before the first worker made the crawl's schema there is nothing to show.
            assert status.returncode == 0 or "no saved crawl" in status.stdout, status.stderr
            statuses += status.returncode == 0
            if statuses == 2 and not late:
                late = start_workers(path, 1)  # a fourth worker joins a running crawl
            time.sleep(0.2)
    finally:
        for worker in workers + late:
            if worker.poll() is None and time.monotonic() >= deadline:
                worker.kill()
    wait_all(workers + late)
    assert statuses >= 3
    paths = Counter(server.paths_for("a.test"))
    assert len([p for p in paths if p != "/robots.txt"]) == 400
    assert max(paths.values()) == 1, [p for p, n in paths.items() if n > 1][:10]


def test_a_deadlock_is_rolled_back_and_the_write_runs_again(postgresql):
    """A real deadlock between a worker's write and another session: PostgreSQL rolls the
    worker's transaction back (40P01) and the worker runs it again, memory untouched."""
    data = PostgresDataManager(postgresql, schema_for(f"deadlock-{uuid.uuid4().hex}"))
    data.open()
    other = psycopg.connect(postgresql, autocommit=True)
    try:
        data.check_identity("plugins.webgraph.manager.WebGraphManager")
        data.add_site(HostData(host="a.test", crawl_delay=0.0), "http://a.test/", "http://a.test/")
        assert data.take_robots() is not None
        data.store_robots("a.test", 404, "", None, blocked=False)
        page = data.take_for_download()
        assert page is not None
        result = DownloadResult(status=200, content_type="text/html", body=b"<p>x</p>")
        data.store_download(page.id, result, "hash-x")
        taken = data.take_for_parsing()
        assert taken is not None and taken[0].id == page.id
        other.execute(f"SET search_path TO {data.schema}")
        # The worker's side checks for the deadlock first (1 s by default): it is the
        # transaction PostgreSQL rolls back.
        other.execute("SET deadlock_timeout = '60s'")
        failures: list[BaseException] = []

        def store() -> None:
            try:
                data.store_parse(page.id, [], [])
            except BaseException as exc:  # reported by the test's thread below
                failures.append(exc)

        writer = threading.Thread(target=store)
        with other.transaction():
            other.execute("SELECT * FROM counts WHERE host = 'a.test' FOR UPDATE")
            writer.start()
            # The worker's write (sent behind the call, by its writer thread) is one
            # statement: it changes its page's row (the statement's main query), then
            # waits for the counters' rows, locked here.
            waiting = (
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity "
                "WHERE %s = ANY(pg_blocking_pids(pid)))"
            )
            assert wait_until(
                lambda: (other.execute(waiting, (other.info.backend_pid,)).fetchone() or [0])[0],
                timeout=30, interval=0.005,
            ), "the worker's write never waited"  # fmt: skip
            # This session now waits for the page's row: each waits for the other.
            other.execute("UPDATE pages SET bytes = bytes WHERE id = %s", (page.id,))
        writer.join(30)
        assert not writer.is_alive() and not failures, failures
        data.hosts()  # a read of this worker sees its writes: they are sent by then
        # Once at least: the write run again may win the counters before this session
        # and meet the same deadlock again; the backoff lets this session through then.
        assert data.conflicts >= 1, "PostgreSQL did not roll the worker's write back"
        # Stored once, and what lives in memory moved once: the page is done, with its
        # answer, and counted once.
        row = other.execute("SELECT state, bytes FROM pages WHERE id = %s", (page.id,)).fetchone()
        assert row == ("done", 8)
        counts = dict(other.execute("SELECT key, n FROM counts WHERE host = 'a.test'").fetchall())
        assert (counts["state:waiting"], counts["state:done"], counts["bytes"]) == (0, 1, 8)
        assert data.bodies_waiting() == 0
        assert data.take_for_parsing() is None
    finally:
        other.close()
        data.close()
        PostgresDataManager.drop(postgresql, data.schema)


def take_when_due(data: PostgresDataManager) -> PageData | None:
    """take_for_download() once the worker would look for a new host again (it looks at
    most every 20 ms): a None must come from the crawl, not from that pause."""
    wait_until(lambda: time.monotonic() >= data._next_try, timeout=5, interval=0.005)
    return data.take_for_download()


def add_ready_hosts(
    data: PostgresDataManager, count: int, *, links: int, crawl_delay: float, limit: int
) -> list[str]:
    """Sites h0.test, h1.test, ... whose robots.txt is fetched (404), each with a start
    page and ``links`` pages at level 1 waiting."""
    hosts = [f"h{n}.test" for n in range(count)]
    for host in hosts:
        site = HostData(host=host, crawl_delay=crawl_delay, max_downloads_at_time=limit)
        data.add_site(site, f"http://{host}/", f"http://{host}/")
        assert data.take_robots() is not None
        data.store_robots(host, 404, "", None, blocked=False)
        urls = [f"http://{host}/{n}" for n in range(links)]
        data.add_links(host, [FoundLink(url, url) for url in urls], level=1)
    return hosts


def take_and_store(data: PostgresDataManager, count: int) -> list[str]:
    """The hosts of the first ``count`` pages taken, each stored (a 404) before the next
    is taken, as a downloading thread does; taken as they come due."""
    fetched: list[str] = []

    def one_more() -> bool:
        page = data.take_for_download()
        if page is not None:
            data.store_download(page.id, DownloadResult(status=404), "")
            fetched.append(page.host)
        return len(fetched) == count

    assert wait_until(one_more, timeout=20, interval=0.005), fetched
    return fetched


def hosts_of(conn: psycopg.Connection[Any], owner: str) -> set[str]:
    rows = conn.execute("SELECT host FROM hosts WHERE owner = %s", (owner,)).fetchall()
    return {host for (host,) in rows}


@contextlib.contextmanager
def two_workers(postgresql: str, name: str, download_slots: int) -> Iterator[
    tuple[PostgresDataManager, PostgresDataManager, psycopg.Connection[Any]]
]:  # fmt: skip
    """Two workers of a new crawl (the second not opened yet) and a connection to its
    schema; all closed, and the schema dropped, after the block."""
    schema = schema_for(f"{name}-{uuid.uuid4().hex}")
    first = PostgresDataManager(postgresql, schema, download_slots=download_slots)
    first.open()
    second = PostgresDataManager(postgresql, schema, download_slots=download_slots)
    conn = psycopg.connect(postgresql, autocommit=True)
    try:
        conn.execute(f"SET search_path TO {schema}")
        first.check_identity("plugins.webgraph.manager.WebGraphManager")
        yield first, second, conn
    finally:
        conn.close()
        second.close()
        first.close()
        PostgresDataManager.drop(postgresql, schema)


def test_a_worker_hands_a_host_over_to_one_that_has_fewer(postgresql):
    """The first worker up leases every host its threads will take; a worker joining
    later would idle to the end. So the one holding more hosts than its threads can
    serve hands one over: no new page of it goes out, and once its pages in progress
    are stored, the host is the newcomer's."""
    with two_workers(postgresql, "balance", download_slots=8) as (first, second, conn):
        hosts = add_ready_hosts(first, 3, links=10, crawl_delay=0.0, limit=4)
        # Alone, the first worker takes all three hosts (3 x 4 requests for 8 threads).
        taken = [page for page in iter(lambda: take_when_due(first), None)]
        assert hosts_of(conn, first.owner) == set(hosts)
        assert Counter(page.host for page in taken) == {host: 4 for host in hosts}
        second.open()
        first.statistics()  # its look for dead workers, and at how the hosts are shared
        for page in taken:
            first.store_download(page.id, DownloadResult(status=404), "")
        # The host it hands over gets no new request from it...
        again = [page for page in iter(lambda: take_when_due(first), None)]
        kept = hosts_of(conn, first.owner)
        assert len(kept) == 2 and {page.host for page in again} == kept
        # ...and is leased by the worker that had none.
        (given,) = set(hosts) - kept
        page = take_when_due(second)
        assert page is not None and page.host == given
        assert hosts_of(conn, second.owner) == {given}
        # Nothing was lost on the way: every page is still waiting or failed (a page in
        # flight is written when it is stored: until then it is waiting in the table).
        states = dict(conn.execute("SELECT state, count(*) FROM pages GROUP BY state").fetchall())
        assert states == {"error": 12, "waiting": 3 * 11 - 12}
        in_flight = {p.id for p in again} | {page.id}
        assert len(in_flight) == len(again) + 1


def test_a_host_taken_over_checks_duplicates_against_its_bodies_without_a_query(
    postgresql, monkeypatch
):
    """A host leased with bodies already stored (taken over from another worker, or
    leased again on resume) had each of its downloads ask the database for a page of the
    same hash, under the worker's lock (81 queries in the last 0.6 s of scale_out.py's 3
    workers). Its hashes are read with the lease now: a duplicate of a body the other
    worker stored is still found, and no download asks."""
    with two_workers(postgresql, "hashes", download_slots=4) as (first, second, conn):
        add_ready_hosts(first, 1, links=3, crawl_delay=0.0, limit=4)
        root = take_when_due(first)
        assert root is not None and root.level == 0
        html = DownloadResult(status=200, content_type="text/html")
        first.store_download(root.id, html, "hash-of-root")
        assert first.take_for_parsing() is not None
        first.store_parse(root.id, [], [])
        first.close()  # its host goes back to the queue, bodies stored
        second.open()
        sent = statements_sent(monkeypatch)
        copy, new = take_when_due(second), take_when_due(second)
        assert copy is not None and new is not None and copy.level == new.level == 1
        second.store_download(copy.id, html, "hash-of-root")
        second.store_download(new.id, html, "hash-of-new")
        monkeypatch.undo()
        asked = [query for query in sent if "content_hash =" in query]
        assert asked == []  # two before: each download asked
        second.close()  # what it wrote behind is sent
        replaced = dict(conn.execute(
            "SELECT id, replace_id FROM pages WHERE id = ANY(%s)", ([copy.id, new.id],)
        ).fetchall())  # fmt: skip
        assert replaced == {copy.id: root.id, new.id: None}


def test_a_worker_that_finds_no_host_to_lease_is_handed_one_at_once(postgresql):
    """A worker whose look for a host finds none tells the others (a NOTIFY): the one
    holding more than its share hands a host over then, not at its own next look, up
    to reap_interval later (an idle worker had waited 0.21 and 0.26 s for two hosts).
    The host given back is told of too, and leased at once by the idle worker."""
    with two_workers(postgresql, "hint", download_slots=4) as (first, second, conn):
        hosts = add_ready_hosts(first, 2, links=6, crawl_delay=0.0, limit=4)
        first.statistics()  # its first look: alone, every host is its share
        first.reap_interval = 3600.0  # from now on it looks again only when told
        taken = [page for page in iter(lambda: take_when_due(first), None)]
        assert hosts_of(conn, first.owner) == set(hosts)
        second.open()
        second.statistics()  # its first look: two workers, a share of one host each
        assert second.take_robots() is None  # none left to fetch
        assert take_when_due(second) is None  # every host is held: it tells the others
        assert wait_until(
            lambda: any(held.draining for held in first._held.values()), timeout=30, interval=0.01
        ), "the first worker was not told, or did not hand a host over"
        # The idle worker now looks for a host only when told (or in an hour).
        with second._lock:
            second._lease_look, second._next_try = 3600.0, time.monotonic() + 3600
        for page in taken:
            first.store_download(page.id, DownloadResult(status=404), "")
        again = [page for page in iter(lambda: take_when_due(first), None)]
        (kept,) = hosts_of(conn, first.owner)
        assert {page.host for page in again} == {kept}
        leased: list[PageData] = []
        assert wait_until(
            lambda: leased.append(second.take_for_download()) or leased[-1] is not None,  # type: ignore[func-returns-value]
            timeout=30, interval=0.01,
        ), "the host given back was not told of"  # fmt: skip
        assert hosts_of(conn, second.owner) == set(hosts) - {kept} == {leased[-1].host}


def listeners(conn: psycopg.Connection[Any]) -> int:
    """How many connections listen for the hints of the crawl ``conn`` is set to."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE query = 'LISTEN \"' || current_setting('search_path') || '\"'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_a_worker_that_holds_no_host_keeps_hearing_hints(postgresql):
    """A worker holding no host (just joined, or its hosts done) that heard another's
    "spare" hint took the smallest limit of its hosts: of none, a ValueError that
    dropped its listening connection, and the hints sent with it or in the next 50 ms
    were lost (a host given back then waited for the idle worker's next look)."""
    with two_workers(postgresql, "deaf", download_slots=4) as (first, second, conn):
        second.open()
        assert not second._held
        assert wait_until(lambda: listeners(conn) == 2, timeout=30), "not listening"
        with second._lock:  # from now on it looks for a host only when told
            second._lease_look, second._next_try = 3600.0, time.monotonic() + 3600
        with first._lock, first._transaction() as cur:  # delivered together at commit
            first._hint(cur, HINT_SPARE)
            first._hint(cur, HINT_FREE)
        assert wait_until(
            lambda: second._next_try < time.monotonic() + 60, timeout=30, interval=0.01
        ), "the free host's hint, sent after the spare one, was not heard"


def test_a_worker_whose_threads_serve_its_hosts_at_their_limits_keeps_them(postgresql):
    """Handing a host over pauses it (its pages in progress first, then the new holder's
    lease): worth it only when this worker's threads cannot serve its hosts at their
    limits. At the end of a crawl, a worker holding 2 of the last 3 hosts at their
    limits handed one over to a worker whose hosts were done, and it ended last."""
    with two_workers(postgresql, "keep", download_slots=4) as (first, second, conn):
        hosts = add_ready_hosts(first, 2, links=6, crawl_delay=0.0, limit=2)
        first.reap_interval = 0.0  # it looks at the others at each statistics()
        first.statistics()
        taken = [page for page in iter(lambda: take_when_due(first), None)]
        assert hosts_of(conn, first.owner) == set(hosts) and len(taken) == 4
        second.open()
        second.statistics()  # two workers: a share of one host each, 4 idle threads here
        assert second.take_robots() is None
        assert take_when_due(second) is None
        first.statistics()  # above its share, but its 4 threads serve both hosts at 2
        assert not any(held.draining for held in first._held.values())
        for page in taken:
            first.store_download(page.id, DownloadResult(status=404), "")
        again = [page for page in iter(lambda: take_when_due(first), None)]
        assert {page.host for page in again} == set(hosts) == hosts_of(conn, first.owner)


def test_a_host_goes_to_idle_threads_that_serve_half_its_limit_from_a_worker_short_of_them():
    """One rule for the look that hands a host over and for the hint that asks for it."""
    assert worth_one_more(short=True, idle=2, limit=4)
    assert not worth_one_more(short=True, idle=1, limit=4)  # the host would wait for them
    assert not worth_one_more(short=False, idle=8, limit=4)  # it serves its hosts already


def test_a_worker_far_over_its_share_hands_the_surplus_over_at_once(postgresql):
    """The first worker up may hold every host before the others join (a few hundred
    polite ones, leased in batches). It hands over what the others lack all at once,
    not one host a look (300 hosts for 3 workers would have taken a minute), and
    workers that know their share lease only up to it."""
    schema = schema_for(f"surplus-{uuid.uuid4().hex}")
    first = PostgresDataManager(postgresql, schema, download_slots=8)
    first.reap_interval = 0.0  # it looks at the others at each statistics()
    first.open()
    others = [PostgresDataManager(postgresql, schema, download_slots=8) for _ in range(2)]
    conn = psycopg.connect(postgresql, autocommit=True)
    try:
        conn.execute(f"SET search_path TO {schema}")
        first.check_identity("plugins.webgraph.manager.WebGraphManager")
        hosts = add_ready_hosts(first, 8, links=10, crawl_delay=0.0, limit=4)
        first.statistics()  # alone: its share is every host
        taken = [page for page in iter(lambda: take_when_due(first), None)]
        assert hosts_of(conn, first.owner) == set(hosts)
        for other in others:
            other.open()
        first.statistics()  # three workers now: a share of 3 hosts each
        for page in taken:
            first.store_download(page.id, DownloadResult(status=404), "")
        again = [page for page in iter(lambda: take_when_due(first), None)]
        kept = hosts_of(conn, first.owner)
        assert len(kept) == 3 and {page.host for page in again} == kept
        for other, share in zip(others, (3, 2), strict=True):
            other.statistics()
            assert take_when_due(other) is not None
            assert len(hosts_of(conn, other.owner)) == share
        held = [hosts_of(conn, data.owner) for data in (first, *others)]
        assert set().union(*held) == set(hosts) and sum(map(len, held)) == len(hosts)
        states = dict(conn.execute("SELECT state, count(*) FROM pages GROUP BY state").fetchall())
        assert states == {"error": len(taken), "waiting": 8 * 11 - len(taken)}
    finally:
        conn.close()
        for data in (*others, first):
            data.close()
        PostgresDataManager.drop(postgresql, schema)


def test_workers_started_together_each_lease_their_share_from_the_first_lease(postgresql):
    """Workers started together have all joined by the time the first robots.txt is
    answered: the first to lease counts them before it does, and leases its share, not a
    host a take until its first look (it had leased 6 hosts of 8 with two others up, and
    handed 3 over as their first pages came in, each paused about 90 ms)."""
    schema = schema_for(f"together-{uuid.uuid4().hex}")
    workers = [PostgresDataManager(postgresql, schema, download_slots=8) for _ in range(3)]
    conn = psycopg.connect(postgresql, autocommit=True)
    try:
        for data in workers:
            data.open()
        conn.execute(f"SET search_path TO {schema}")
        workers[0].check_identity("plugins.webgraph.manager.WebGraphManager")
        hosts = add_ready_hosts(workers[0], 8, links=10, crawl_delay=0.0, limit=4)
        for data, share in zip(workers, (3, 3, 2), strict=True):
            # No look yet (no statistics()): the lease itself counts the workers.
            taken = [page for page in iter(lambda data=data: take_when_due(data), None)]
            mine = hosts_of(conn, data.owner)
            assert len(mine) == share, f"a worker leased {len(mine)} hosts, its share is {share}"
            assert {page.host for page in taken} == mine
        held = [hosts_of(conn, data.owner) for data in workers]
        assert set().union(*held) == set(hosts)
        for data in workers:
            data.statistics()  # the routine's look: each holds its share already
            assert not any(held.draining for held in data._held.values())
    finally:
        conn.close()
        for data in reversed(workers):
            data.close()
        PostgresDataManager.drop(postgresql, schema)


def test_a_worker_below_its_share_leases_many_hosts_in_one_look(postgresql):
    """300 polite hosts leased one a look (46 a second) started over 6.5 s, and the
    crawl took 1.8 times its politeness limit: a worker below its share leases what it
    lacks in one statement, up to LEASE_BATCH."""
    schema = schema_for(f"batch-{uuid.uuid4().hex}")
    data = PostgresDataManager(postgresql, schema, download_slots=64)
    data.open()
    conn = psycopg.connect(postgresql, autocommit=True)
    try:
        conn.execute(f"SET search_path TO {schema}")
        data.check_identity("plugins.webgraph.manager.WebGraphManager")
        add_ready_hosts(data, LEASE_BATCH + 8, links=1, crawl_delay=2.0, limit=1)
        data.statistics()  # its first look at the others: it is alone
        assert take_when_due(data) is None  # each host waits out its delay after robots
        assert len(hosts_of(conn, data.owner)) == LEASE_BATCH
        leased = conn.execute("SELECT count(*) FROM hosts WHERE owner <> ''").fetchone()
        assert leased == (LEASE_BATCH,)
    finally:
        conn.close()
        data.close()
        PostgresDataManager.drop(postgresql, schema)


def test_a_host_given_back_tells_the_manager_a_site_may_have_ended(postgresql):
    """The manager's tick grows with its snapshots' cost (0.17 s with 300 hosts on
    PostgreSQL, so 1.7 s); a host given back makes it look at once, so the crawl's end
    does not wait out a tick."""
    schema = schema_for(f"ended-{uuid.uuid4().hex}")
    data = PostgresDataManager(postgresql, schema, download_slots=4)
    data.open()
    try:
        data.check_identity("plugins.webgraph.manager.WebGraphManager")
        add_ready_hosts(data, 1, links=2, crawl_delay=0.0, limit=4)
        data.statistics()
        *first, last = [page for page in iter(lambda: take_when_due(data), None)]
        for page in first:
            data.store_download(page.id, DownloadResult(status=404), "")
        assert take_when_due(data) is None
        assert not data.a_site_may_have_ended()  # a page of it is still in flight
        data.store_download(last.id, DownloadResult(status=404), "")
        assert take_when_due(data) is None
        assert data.a_site_may_have_ended()  # the host went back with its last page
        assert not data.a_site_may_have_ended()  # once
    finally:
        data.close()
        PostgresDataManager.drop(postgresql, schema)


@contextlib.contextmanager
def one_worker(postgresql: str, name: str, download_slots: int) -> Iterator[PostgresDataManager]:
    """A worker of a new crawl of the webgraph task, whose schema is dropped after."""
    schema = schema_for(f"{name}-{uuid.uuid4().hex}")
    data = PostgresDataManager(postgresql, schema, download_slots=download_slots)
    data.open()
    try:
        data.check_identity("plugins.webgraph.manager.WebGraphManager")
        yield data
    finally:
        data.close()
        PostgresDataManager.drop(postgresql, schema)


def test_a_worker_of_polite_hosts_leases_more_hosts_than_it_has_threads(postgresql):
    """A host with a crawl delay needs a thread only for its request in flight: between
    two requests it needs none. So a worker leases hosts until its threads are busy,
    not one host per thread (8 threads on 40 hosts of 200 ms delay held 8 and crawled
    38 pages/s, where 40 hosts give 200)."""
    with one_worker(postgresql, "polite", download_slots=2) as data:
        hosts = add_ready_hosts(data, 5, links=3, crawl_delay=2.0, limit=1)
        # Each host waits out its delay after its robots.txt; then two threads take a
        # page each and store it before taking the next: one page of every host (on
        # the old count, its two hosts, each again 2 s on).
        assert sorted(take_and_store(data, len(hosts))) == hosts


def test_a_worker_at_its_threads_leases_as_many_polite_hosts_as_its_idle_threads_serve(
    postgresql,
):
    """A worker leases up to its share a host per thread at once. Beyond that, polite
    hosts leave its threads idle between requests, so it leases more: as many as those
    threads serve, in one look. (One a look, the 44 polite hosts of 300 beyond 256
    threads were leased 20 ms apart, and the last started 1.5 s late.)"""
    with (
        one_worker(postgresql, "beyond", download_slots=4) as data,
        psycopg.connect(postgresql, autocommit=True) as conn,
    ):
        conn.execute(f"SET search_path TO {data.schema}")
        add_ready_hosts(data, 20, links=1, crawl_delay=30.0, limit=1)
        assert take_when_due(data) is None  # each host waits out its delay after robots
        assert len(hosts_of(conn, data.owner)) == 4  # its share, a host per thread
        assert take_when_due(data) is None  # the next look: 4 idle threads, 4 more hosts
        assert len(hosts_of(conn, data.owner)) == 8


def test_a_worker_holds_a_bounded_number_of_polite_hosts(postgresql):
    """However idle its threads, a worker holds at most ``hosts_per_thread`` hosts a
    thread: each costs memory and a look on every take."""
    schema = schema_for(f"bounded-{uuid.uuid4().hex}")
    data = PostgresDataManager(postgresql, schema, download_slots=1)
    data.hosts_per_thread = 2
    data.open()
    conn = psycopg.connect(postgresql, autocommit=True)
    try:
        conn.execute(f"SET search_path TO {schema}")
        data.check_identity("plugins.webgraph.manager.WebGraphManager")
        hosts = add_ready_hosts(data, 5, links=3, crawl_delay=2.0, limit=1)
        fetched = take_and_store(data, 4)  # the two hosts it holds, each again 2 s on
        assert len(set(fetched)) == 2 and len(hosts_of(conn, data.owner)) == 2
        assert set(fetched) <= set(hosts)
    finally:
        conn.close()
        data.close()
        PostgresDataManager.drop(postgresql, schema)


def test_a_take_looks_only_at_held_hosts_their_politeness_lets_go(postgresql, monkeypatch):
    """A take looked at every held host, 300 polite hosts 0.26 ms a take (4.4 s of CPU a
    crawl of 6,000 pages): a host its crawl delay holds back rests until it is due, and
    takes meanwhile pass it by."""
    with one_worker(postgresql, "resting", download_slots=64) as data:
        hosts = add_ready_hosts(data, 40, links=2, crawl_delay=30.0, limit=1)
        data.statistics()  # its first look at the others: it is alone
        looked_at: list[str] = []
        held_back = data._held_back

        def counted(host: HostData, now: float) -> bool:
            looked_at.append(host.host)
            return held_back(host, now)

        monkeypatch.setattr(data, "_held_back", counted)
        for _ in range(50):  # each host waits out its 30 s delay after its robots.txt
            assert take_when_due(data) is None
        assert set(looked_at) == set(hosts)  # every one leased, and seen held back
        assert len(looked_at) < 2 * len(hosts)  # once, not once a take (40 hosts x 50)


def test_a_parse_reads_its_links_rows_before_it_takes_the_lock(postgresql, monkeypatch):
    """The read of the rows of a parse's links that memory does not know was most of a
    parse's hold on the DataManager's lock (12.7 of 24 s held in a polite crawl of 300
    hosts), and the downloading threads queued behind it: it is read before the lock is
    taken. What it read still decides: /x, waiting at level 3 and forgotten by memory,
    moves up to 1 when the start page links to it."""
    with one_worker(postgresql, "ahead", download_slots=4) as data:
        add_ready_hosts(data, 1, links=0, crawl_delay=0.0, limit=4)
        data.add_links("h0.test", [FoundLink("http://h0.test/x", "http://h0.test/x")], level=3)
        data._url_pages.clear()  # only the storage knows /x now
        under_lock: list[bool] = []
        url_rows = data._url_rows

        def watched(cur: Any, urls: Any) -> Any:
            under_lock.append(data._lock.locked())
            return url_rows(cur, urls)

        monkeypatch.setattr(data, "_url_rows", watched)
        data.statistics()
        root = take_when_due(data)
        assert root is not None and root.url == "http://h0.test/"
        data.store_download(root.id, DownloadResult(status=200, content_type="text/html"), "h")
        assert data.take_for_parsing() is not None
        links = [FoundLink(f"http://h0.test/{p}", f"http://h0.test/{p}") for p in ("x", "new")]
        data.store_parse(root.id, links, [])
        assert under_lock == [False]  # one read, before the lock (it was under it)
        levels = {page.url: page.level for page in data.iter_pages("h0.test")}
        assert levels == {"http://h0.test/": 0, "http://h0.test/x": 1, "http://h0.test/new": 1}


def test_a_link_inserted_after_the_read_ahead_is_not_inserted_again(postgresql, monkeypatch):
    """A parse's read ahead of the lock found /u missing; before it took the lock,
    another parse inserted /u deeper. Memory knows /u then, but deeper than these links,
    so it is asked about: the read's "missing" is stale, and inserting /u again broke
    the unique URL (a crawl of the test site stopped on it, 1 run in 3)."""
    with one_worker(postgresql, "stale", download_slots=4) as data:
        add_ready_hosts(data, 1, links=1, crawl_delay=0.0, limit=4)  # / and /0 (level 1)
        data.statistics()
        taken = [take_when_due(data), take_when_due(data)]
        for page in taken:
            assert page is not None
            answer = DownloadResult(status=200, content_type="text/html")
            data.store_download(page.id, answer, f"hash-{page.id}")  # no duplicates
        root, first = (data.take_for_parsing(), data.take_for_parsing())
        assert root is not None and first is not None and root[0].level == 0
        link = [FoundLink("http://h0.test/u", "http://h0.test/u")]
        read_ahead = data._url_rows_ahead

        def then_another_parse(page_id: Any, urls: Any) -> Any:
            ahead = read_ahead(page_id, urls)
            if page_id == root[0].id:
                data.store_parse(first[0].id, link, [])  # /u at level 2, remembered
            return ahead

        monkeypatch.setattr(data, "_url_rows_ahead", then_another_parse)
        data.store_parse(root[0].id, link, [])
        levels = [page.level for page in data.iter_pages("h0.test") if page.url.endswith("/u")]
        assert levels == [1]  # one page, moved up to the root's links' level


def test_robots_txt_fetches_are_taken_in_batches_and_those_never_started_go_back(postgresql):
    """One statement a robots.txt fetch, each under the DataManager's lock, had sent the
    robots.txt of 300 polite hosts over 0.9 s, and every host's first page waited for
    them. A worker takes up to ROBOTS_BATCH at once and hands them to its threads from
    memory; those it took and never started go back when it leaves, for another."""
    with two_workers(postgresql, "robots", download_slots=8) as (first, second, conn):
        hosts = [f"r{n}.test" for n in range(ROBOTS_BATCH + 4)]
        for host in hosts:
            first.add_site(
                HostData(host=host, crawl_delay=0.0), f"http://{host}/", f"http://{host}/"
            )
        started = first.take_robots()
        assert started is not None

        def taken_by(owner: str) -> set[str]:
            rows = conn.execute(
                "SELECT host FROM hosts WHERE robots_state = 'fetching' AND robots_owner = %s",
                (owner,),
            ).fetchall()
            return {host for (host,) in rows}

        batch = taken_by(first.owner)
        assert len(batch) == ROBOTS_BATCH and started.host in batch  # one statement
        second.open()
        rest = list(iter(second.take_robots, None))
        assert {host.host for host in rest} == set(hosts) - batch  # none fetched twice
        first.store_robots(started.host, 404, "", None, blocked=False)
        first.close()  # leaves: the fetches it took and never started go back
        assert taken_by(first.owner) == set()
        second.statistics()  # its look at the hosts: robots.txt files to fetch again
        again = list(iter(second.take_robots, None))
        assert {host.host for host in again} == batch - {started.host}


def statements_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements this process sends from now on (an executemany counts once: its
    rows go in one pipeline), until ``monkeypatch.undo()``."""
    sent: list[str] = []
    for name in ("execute", "executemany"):
        real = getattr(psycopg.Cursor, name)

        def counted(self, query, *args, real=real, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(str(query)[:60])
            return real(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, name, counted)
    return sent


def test_sites_are_added_in_a_few_statements_however_many(postgresql, monkeypatch):
    """add_sites read each site's host, its start page and the clock, then inserted it:
    a few statements a site, and 300 sites on PostgreSQL held the DataManager's lock
    0.35 s while every first request waited. One read of each kind serves all the
    sites now, and the new ones are inserted together; a worker joining the crawl, or
    a resume, writes nothing for sites as they were."""
    with one_worker(postgresql, "sites", download_slots=8) as data:
        sent = statements_sent(monkeypatch)
        sites = [(HostData(host=f"s{n}.test"), f"http://s{n}.test/", f"http://s{n}.test/")
                 for n in range(300)]  # fmt: skip
        assert data.add_sites(sites) == [True] * 300
        assert len(sent) <= 12, sent
        sent.clear()
        assert data.add_sites(sites) == [False] * 300
        assert len(sent) <= 12, sent
        monkeypatch.undo()
        assert len(data.hosts()) == 300
        assert sum(host.waiting for host in data.statistics().hosts) == 300


def test_a_worker_s_pool_starts_at_its_part_of_the_robots_txt_due(postgresql):
    """An automatic pool starts at what politeness allows at the start: each site's
    robots.txt, shared by the workers. A PostgreSQL worker said one request until its
    first lease, and its pool grew from 8 by doubling a look: 300 polite sites had their
    robots.txt asked over the crawl's first second (the last at 1.0 s, on SQLite 0.5),
    and the crawl ended that much later."""
    with two_workers(postgresql, "demand", download_slots=256) as (first, second, _conn):
        sites = [(HostData(host=f"s{n}.test"), f"http://s{n}.test/", f"http://s{n}.test/")
                 for n in range(40)]  # fmt: skip
        first.add_sites(sites)
        assert first.download_demand(256).allowed == 40  # alone: every robots.txt
        second.open()
        assert second.download_demand(256).allowed == 20  # its half of them
        assert first.download_demand(8).allowed == 8  # never beyond the pool's cap


def test_sites_that_end_together_are_recorded_in_a_few_statements(postgresql, monkeypatch):
    """The sites of a polite crawl end within a second of each other: their stop reasons,
    a read of the host, of the clock and a write each, had taken 0.22 s of 300 sites on
    PostgreSQL, between the last answer and the output. One read and one batch of
    writes serve them all now; a site already ended keeps its reason."""
    with one_worker(postgresql, "ended", download_slots=8) as data:
        sites = [(HostData(host=f"s{n}.test"), f"http://s{n}.test/", f"http://s{n}.test/")
                 for n in range(300)]  # fmt: skip
        data.add_sites(sites)
        data.set_stop_reason("s0.test", "max_pages reached")
        sent = statements_sent(monkeypatch)
        data.set_stop_reasons({f"s{n}.test": "no waiting links left" for n in range(300)})
        assert len(sent) <= 6, sent
        monkeypatch.undo()
        reasons = {host.host: (host.stop_reason, host.finished_at) for host in data.hosts()}
        assert reasons.pop("s0.test")[0] == "max_pages reached"
        assert {reason for reason, _at in reasons.values()} == {"no waiting links left"}
        assert all(at > 0 for _reason, at in reasons.values())
