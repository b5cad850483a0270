"""A lost connection to PostgreSQL is waited out (SPEC §9, ``storage_wait_s``).

Each test runs real worker processes against a real server: a connection cut by a TCP
forwarder between them (the server stays up), an outage longer than the workers wait,
and a restart of a cluster of the test's own (made with initdb, so the shared server
is never restarted). What a worker did is read from the test site's request log and
from the crawl's tables, never from timings.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from crawling import CrawlRunner, wait_until
from support.pgcluster import own_cluster, unavailable
from support.sites import generated_site
from support.tcpforward import TcpForwarder, forwarding
from test_postgres import (
    add_ready_hosts,
    graph_by_url,
    live_worker_rows,
    load_result,
    start_workers,
    take_when_due,
    wait_all,
)
from webserver import Resource, SiteServer

from plugins.webgraph import WebGraphManager
from rccrawler.data.postgres import PostgresDataManager, schema_for
from rccrawler.manager import load_settings

LOST, BACK = "storage lost", "storage back"
"""The one line a worker logs as its storage goes, and the one as it is back."""
THREADS = {"downloading": 4, "parsing": 1}


def slow_sites(hosts: int, pages: int, delay: float) -> dict[str, Any]:
    """``hosts`` generated sites whose every answer takes ``delay`` seconds."""
    sites = {}
    for n in range(hosts):
        host = f"h{n}.test"
        site = generated_site(host, pages, fanout=4)
        sites[host] = {p: Resource(r.body, r.status, r.headers, delay=delay)
                       for p, r in site.items()}  # fmt: skip
    return sites


def shared_settings(root: Path, storage: str, server: SiteServer, wait_s: float) -> Path:
    runner = CrawlRunner(root, storage=storage)
    return runner.settings_file(
        sorted(server.sites), server.resolve, threads=THREADS, storage_wait_s=wait_s
    )


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def assert_same_graph_as_undisturbed(path: Path, server: SiteServer, tmp_path: Path) -> None:
    """The shared crawl's graph is what one undisturbed SQLite crawl of the sites finds."""
    shared = load_result(path)
    server.hits.clear()
    single = CrawlRunner(tmp_path / "undisturbed").run(
        sorted(server.sites), server.resolve, threads=THREADS
    )
    for host in server.sites:
        nodes, arcs = graph_by_url(single, host)
        assert len(nodes) == len(server.sites[host])
        assert graph_by_url(shared, host) == (nodes, arcs), host


def requests_by_path(server: SiteServer) -> Counter[tuple[str, str]]:
    return Counter((hit.host, hit.path) for hit in server.hits if hit.path != "/robots.txt")


def assert_counters_match_pages(path: Path) -> None:
    """The crawl's counters, kept in the same transactions as its pages, agree with
    them: the state is consistent as the last commit left it."""
    _manager, settings = load_settings(path)
    with psycopg.connect(settings.storage, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema_for(settings.crawl_name)}")
        pages = conn.execute("SELECT host, state, count(*) FROM pages GROUP BY host, state")
        counted = conn.execute(
            "SELECT host, substr(key, 7), n FROM counts WHERE key LIKE 'state:%%' AND n <> 0"
        )
        assert {(h, s, int(n)) for h, s, n in pages.fetchall()} == {
            (h, s, int(n)) for h, s, n in counted.fetchall()
        }


class LogWatch:
    """Reads a worker's log as it runs, so a test waits on a line, not on time."""

    def __init__(self, worker: subprocess.Popen[bytes]) -> None:
        self.worker = worker
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.worker.stderr is not None
        for raw in self.worker.stderr:
            with self.changed:
                self.lines.append(raw.decode(errors="replace"))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def count(self, text: str) -> int:
        with self.changed:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, count: int = 1, timeout: float = 60) -> bool:
        with self.changed:
            return (
                self.changed.wait_for(
                    lambda: self.count(text) >= count or not self.thread.is_alive(), timeout
                )
                and self.count(text) >= count
            )

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        code = self.worker.wait(timeout)
        self.thread.join(timeout)
        assert self.worker.stderr is not None
        self.worker.stderr.close()
        return code, "".join(self.lines)


def drop_crawl(path: Path, postgresql: str) -> None:
    """Drop the crawl of the settings file ``path`` from ``postgresql`` itself: its
    ``storage`` may be a forwarder that refuses, or is gone. (A new CrawlRunner's
    discard() drops only the crawls it wrote the settings of: none, and every run of
    these tests left its crawls in the shared server.)"""
    _manager_cls, settings = load_settings(path)
    PostgresDataManager.drop(postgresql, schema_for(settings.crawl_name))


def link_storage(link: TcpForwarder, postgresql: str) -> str:
    """The storage URL of ``postgresql`` reached through ``link``."""
    return f"postgresql://127.0.0.1:{link.port}/{urlsplit(postgresql).path.lstrip('/')}"


@contextlib.contextmanager
def worker_through_a_link(
    postgresql: str, root: Path, server: SiteServer, wait_s: float
) -> Iterator[tuple[TcpForwarder, Path, LogWatch]]:
    """One worker of a new crawl whose storage is reached through a TcpForwarder; the
    crawl is dropped after the block."""
    with forwarding(host_port(postgresql)) as link:
        storage = link_storage(link, postgresql)
        path = shared_settings(root, storage, server, wait_s)
        (worker,) = start_workers(path, 1)
        try:
            yield link, path, LogWatch(worker)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(60)
            drop_crawl(path, postgresql)


def test_a_dropped_connection_is_reconnected_with_no_page_lost(serve, postgresql, tmp_path):
    server = serve(slow_sites(3, 60, 0.02))
    total = sum(len(site) for site in server.sites.values())
    with worker_through_a_link(postgresql, tmp_path / "pg", server, 60) as (link, path, watch):
        # Cut every connection twice while pages are in flight; the server stays up.
        for cut, hits in enumerate((total // 4, total // 2), start=1):
            assert server.wait_for_hits(hits, timeout=60, alive=lambda: watch.worker.poll() is None)
            assert link.drop_all() >= 1
            assert watch.wait_for(BACK, cut), "".join(watch.lines)[-4000:]
        code, log = watch.finish()
        assert code == 0, log[-3000:]
        assert watch.count(LOST) == watch.count(BACK) == 2, log[-3000:]
        assert_counters_match_pages(path)
        requested = requests_by_path(server)
        assert len(requested) == total
        assert max(requested.values()) == 1, [p for p, n in requested.items() if n > 1]
        assert_same_graph_as_undisturbed(path, server, tmp_path)


def test_a_worker_reaped_while_its_connection_was_down_joins_again(serve, postgresql, tmp_path):
    """A dropped connection with the server up is a death to the other workers, who
    queue its work again; the worker, once it reconnects, joins as a new one and the
    crawl ends with both, nothing lost."""
    server = serve(slow_sites(4, 50, 0.02))
    total = sum(len(site) for site in server.sites.values())
    with worker_through_a_link(postgresql, tmp_path / "pg", server, 60) as (link, path, cut_off):
        assert server.wait_for_hits(8, timeout=60, alive=lambda: cut_off.worker.poll() is None)
        direct = path.with_name("direct.yaml")  # the same crawl, the server reached directly
        direct.write_text(path.read_text().replace(link_storage(link, postgresql), postgresql))
        (other,) = start_workers(direct, 1)
        other_log = LogWatch(other)
        assert wait_until(lambda: live_worker_rows(direct) == 2, timeout=60, interval=0.05)
        link.refusing.set()
        link.drop_all()
        # The other worker sees it dead (its lock went with its connection) and reaps it.
        assert wait_until(lambda: live_worker_rows(direct) == 1, timeout=60, interval=0.05)
        link.refusing.clear()
        assert cut_off.wait_for("joins the crawl again"), "".join(cut_off.lines)[-3000:]
        for watch in (cut_off, other_log):
            code, log = watch.finish()
            assert code == 0, log[-3000:]
        assert_counters_match_pages(path)
        requested = requests_by_path(server)
        assert len(requested) == total
        # Only what the reaped worker had in flight is fetched again.
        twice = [p for p, n in requested.items() if n > 1]
        assert len(twice) <= THREADS["downloading"] + THREADS["parsing"] + 8, twice
        assert_same_graph_as_undisturbed(path, server, tmp_path)


def test_an_outage_longer_than_storage_wait_s_exits_2_and_resume_completes(
    serve, postgresql, tmp_path
):
    server = serve(slow_sites(2, 60, 0.02))
    total = sum(len(site) for site in server.sites.values())
    with worker_through_a_link(postgresql, tmp_path / "pg", server, 0.5) as (link, path, watch):
        assert server.wait_for_hits(
            total // 3, timeout=60, alive=lambda: watch.worker.poll() is None
        )
        link.refusing.set()  # the server unreachable, for as long as the worker waits
        link.drop_all()
        code, log = watch.finish()
        assert code == 2, log[-3000:]
        assert watch.count(LOST) == 1 and watch.count(BACK) == 0, log[-3000:]
        assert "storage_wait_s (0.5 s)" in log, log[-3000:]
        link.refusing.clear()
        assert_counters_match_pages(path)
        before = requests_by_path(server)
        assert len(before) < total
        wait_all(start_workers(path, 1))  # resume
        requested = requests_by_path(server)
        again = [p for p in before if requested[p] > before[p]]
        # Only what the worker held when it gave up is fetched again: its threads' pages.
        assert len(again) <= THREADS["downloading"] + THREADS["parsing"] + 8, again
        assert len(requested) == total and max(requested.values()) <= 2
        assert_same_graph_as_undisturbed(path, server, tmp_path)


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_a_restart_of_postgresql_stops_no_worker(serve, tmp_path):
    server = serve(slow_sites(6, 50, 0.02))
    total = sum(len(site) for site in server.sites.values())
    with own_cluster() as cluster:
        path = shared_settings(tmp_path / "pg", cluster.url, server, wait_s=60)
        workers = start_workers(path, 3)
        watches = [LogWatch(worker) for worker in workers]

        def alive() -> bool:
            return all(w.poll() is None for w in workers)

        try:
            # Every worker has joined before the server goes: one still opening the
            # state is refused (exit 2), not waiting out an outage. Under load the last
            # one once started after the others had fetched a third of the pages.
            assert wait_until(lambda: live_worker_rows(path) == 3 or not alive(), timeout=90,
                              interval=0.05)  # fmt: skip
            assert alive(), [watch.lines[-5:] for watch in watches]
            assert server.wait_for_hits(total // 3, timeout=90, alive=alive)
            cluster.stop()
            # Down until every worker has seen it go: each waits, none exits.
            for watch in watches:
                assert watch.wait_for(LOST), watch.lines[-20:]
            assert all(w.poll() is None for w in workers)
            in_memory = requests_by_path(server)
            cluster.start()
            results = [watch.finish() for watch in watches]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
        for (code, log), watch in zip(results, watches, strict=True):
            assert code == 0, log[-3000:]
            assert watch.count(BACK) >= 1 and watch.count(LOST) == watch.count(BACK), log[-3000:]
            assert "taken for dead" not in log and "queued again" not in log, log[-3000:]
        assert_counters_match_pages(path)
        requested = requests_by_path(server)
        assert len(in_memory) < total
        assert len(requested) == total
        assert max(requested.values()) == 1, [p for p, n in requested.items() if n > 1]
        assert_same_graph_as_undisturbed(path, server, tmp_path)


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_after_a_restart_a_live_worker_keeps_its_work_and_a_dead_one_is_reaped():
    """Three workers' DataManagers on a cluster of the test's own. The server restarts;
    two come back, one never does (it died while the server was down). The live ones
    keep their pages; the dead one's are queued again once its storage_wait_s is over."""
    with own_cluster() as cluster:
        schema = schema_for(f"restart-{uuid.uuid4().hex}")
        workers = [
            PostgresDataManager(cluster.url, schema, download_slots=1, storage_wait_s=0.5)
            for _ in range(3)
        ]
        first, alive, dead = workers
        for data in workers:
            data.open()
        first.check_identity("plugins.webgraph.manager.WebGraphManager")
        add_ready_hosts(first, 3, links=4, crawl_delay=0.0, limit=1)
        taken = {data.owner: take_when_due(data) for data in workers}
        assert all(page is not None for page in taken.values())
        cluster.stop()
        cluster.start()
        dead._pool.close()  # type: ignore[union-attr]  # died in the outage: never back
        try:
            assert alive.recover() == 0  # reconnects; the others are not back yet
            assert first.recover() == 0  # the dead one is only absent so far
            held = {page.host: owner for owner, page in taken.items() if page}
            with psycopg.connect(cluster.url, autocommit=True) as conn:
                conn.execute(f"SET search_path TO {schema}")

                def holders() -> dict[str, str]:
                    rows = conn.execute("SELECT host, owner FROM hosts WHERE owner <> ''")
                    return dict(rows.fetchall())

                assert holders() == held
                live = {host: owner for host, owner in held.items() if owner != dead.owner}
                assert wait_until(
                    lambda: first.recover() >= 0 and holders() == live, timeout=60, interval=0.05
                )
                # A page in flight is waiting in the table until it is stored: the dead
                # one's is the next holder's of its host, the live ones' still theirs.
                states = conn.execute("SELECT DISTINCT state FROM pages").fetchall()
            assert states == [("waiting",)]
            assert [alive for *_rest, alive in first.workers()] == [True, True]
        finally:
            for data in workers:
                data.close()
            PostgresDataManager.drop(cluster.url, schema)


def test_a_connection_dropped_while_the_output_is_written_is_waited_out(
    serve, postgresql, tmp_path
):
    """The worker writing the output loses its connection in the middle of it: it waits
    for the storage as the crawl does, and every file is written, whole."""
    server = serve(slow_sites(2, 40, 0.0))
    total = sum(len(site) for site in server.sites.values())
    with forwarding(host_port(postgresql)) as link:
        storage = link_storage(link, postgresql)
        runner = CrawlRunner(tmp_path / "pg", storage=storage)
        defaults = [f"{cls.__module__}.{cls.__name__}" for cls in WebGraphManager.unloader_classes]
        unloaders = ["taskplugins.PausingUnloader", *defaults]
        path = runner.settings_file(
            sorted(server.sites), server.resolve, threads=THREADS, storage_wait_s=60,
            unloaders=unloaders,
        )  # fmt: skip
        output = load_settings(path)[1].output_dir
        (worker,) = start_workers(path, 1)
        watch = LogWatch(worker)
        try:
            assert wait_until(lambda: (output / "paused").exists() or worker.poll() is not None,
                              timeout=60, interval=0.02)  # fmt: skip
            assert worker.poll() is None, "".join(watch.lines)[-3000:]
            link.refusing.set()
            assert link.drop_all() >= 1
            with socket.socket(socket.AF_UNIX) as go:
                go.connect(str(output / "go.sock"))
            assert watch.wait_for(LOST), "".join(watch.lines)[-3000:]
            link.refusing.clear()
            code, log = watch.finish()
            assert code == 0, log[-3000:]
            # Each connection found lost is reported as it is found: the write connection,
            # idle while the pages were read, may be found lost later.
            assert watch.count(BACK) == watch.count(LOST) >= 1, log[-3000:]
            assert (output / "pages-read.txt").read_text() == f"{total}\n"
            assert_same_graph_as_undisturbed(path, server, tmp_path)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(60)
            drop_crawl(path, postgresql)
