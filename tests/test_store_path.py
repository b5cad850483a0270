"""The per-page path through the DataManager, made cheaper for issue 14, still keeps
its rules: a body is a duplicate of a page still waiting for its parse, a page found
again on a shorter path moves up, and a parse's store leaves the page's row whole.

On SQLite a downloaded page waiting for its parse is held in memory (its row is
written once, by the parse's store), and the pages of recent links are remembered by
URL; the PostgreSQL runs show the same answers from the database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_politeness import Clock, OpenData, data_opener

from rccrawler.data.sql import SQLDataManager
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.records import (
    DownloadResult,
    FoundLink,
    HostData,
    PageData,
    PageState,
    SkippedLink,
    SkipReason,
)
from rccrawler.threads.downloading import content_hash

pytestmark = pytest.mark.both_backends

HOST = "a.test"
BODY = b"<html><body><a href='/x'>x</a></body></html>"


@pytest.fixture
def open_data(storage: str, tmp_path: Path) -> Iterator[OpenData]:
    with data_opener(storage, tmp_path) as opener:
        yield opener


def site(data: SQLDataManager, *levels: tuple[int, list[str]]) -> None:
    """A site whose robots.txt is read, with these paths waiting at these levels."""
    data.add_site(HostData(host=HOST, crawl_delay=0, max_downloads_at_time=8),
                  f"http://{HOST}/", f"http://{HOST}/")  # fmt: skip
    data.store_robots(HOST, 404, "", None, blocked=False)
    for level, paths in levels:
        links = [FoundLink(f"http://{HOST}{path}", f"http://{HOST}{path}") for path in paths]
        data.add_links(HOST, links, level=level)


def lease(data: SQLDataManager, path: str) -> PageData:
    """Lease pages (in the storage's order) until the one of ``path``, which is returned;
    the others stay leased."""
    for _ in range(20):
        page = data.take_for_download()
        assert page is not None
        if page.url == f"http://{HOST}{path}":
            return page
    raise AssertionError(f"{path} was never leased")


def download(data: SQLDataManager, page: PageData, body: bytes = BODY) -> None:
    result = DownloadResult(status=200, content_type="text/html", body=body)
    data.store_download(page.id, result, content_hash(body))


def parse(data: SQLDataManager, page: PageData, *links: str) -> None:
    item = data.take_for_parsing()
    assert item is not None and item[0].id == page.id
    found = [FoundLink(f"http://{HOST}{path}", f"http://{HOST}{path}") for path in links]
    data.store_parse(page.id, found, [])


def pages(data: SQLDataManager) -> dict[str, PageData]:
    return {page.url.removeprefix(f"http://{HOST}"): page for page in data.iter_pages(HOST)}


def test_a_body_is_a_duplicate_of_a_page_still_waiting_for_its_parse(open_data: OpenData):
    data = open_data(Clock())
    site(data, (1, ["/a", "/b"]))
    root = lease(data, "/")
    a, b = lease(data, "/a"), lease(data, "/b")
    download(data, root, b"<p>root</p>")
    download(data, a)
    download(data, b)  # /a's parse is not stored yet
    parse(data, root)
    parse(data, a)
    stored = pages(data)
    assert stored["/b"].replace_id == a.id and stored["/b"].state is PageState.DONE
    assert data.statistics().host(HOST).duplicates == 1  # type: ignore[union-attr]
    # /a's row holds its answer, whether it was written at its download or its parse.
    row = stored["/a"]
    assert (row.state, row.http_status, row.content_type) == (PageState.DONE, 200, "text/html")
    assert (row.content_hash, row.bytes, row.downloaded) == (content_hash(BODY), len(BODY), True)
    assert row.download_attempts == 1 and row.parsed


def test_a_waiting_page_found_on_a_shorter_path_moves_up(open_data: OpenData):
    """/x waits at level 3. The start page (level 0) links to it: it moves up to 1, though
    /x was remembered at level 3; /p (level 1) links to it again: it stays at 1."""
    data = open_data(Clock())
    site(data, (1, ["/p"]), (3, ["/x"]))
    root = lease(data, "/")
    download(data, root, b"<p>root</p>")
    parse(data, root, "/x")
    assert pages(data)["/x"].level == 1
    p = lease(data, "/p")
    download(data, p, b"<p>p</p>")
    parse(data, p, "/x", "/p")
    after = pages(data)
    assert (after["/x"].level, after["/x"].id_from) == (1, root.id)
    assert [page.url for page in after.values()].count(f"http://{HOST}/x") == 1


def test_sqlite_writes_nothing_for_a_download_waiting_for_its_parse(tmp_path: Path):
    with data_opener("sqlite", tmp_path) as opener:
        data = opener(Clock())
        assert isinstance(data, SQLiteDataManager)
        site(data, (1, ["/a"]))
        root = lease(data, "/")
        data.flush()
        changes = data.db.total_changes
        download(data, root)
        assert data.db.total_changes == changes  # no write, not even a savepoint's
        assert not data.db.in_transaction
        parse(data, root)
        assert data.db.total_changes > changes
        data.flush()
        assert pages(data)["/"].content_hash == content_hash(BODY)


def test_a_parse_of_many_links_stores_every_arc_and_skipped_link_once(open_data: OpenData):
    """300 links (SQLite writes them in multi-row statements of 128, 128, 32, 8 and 4
    rows), 131 of them already known, and skipped links given twice: each arc and
    each skipped URL is stored once."""
    data = open_data(Clock())
    site(data, (1, [f"/old{i}" for i in range(131)]))
    root = lease(data, "/")
    download(data, root, b"<p>root</p>")
    item = data.take_for_parsing()
    assert item is not None
    paths = [f"/old{i}" for i in range(131)] + [f"/new{i}" for i in range(169)]
    found = [FoundLink(f"http://{HOST}{path}", f"http://{HOST}{path}") for path in paths]
    skipped = [SkippedLink(f"http://other.test/{i}", SkipReason.EXTERNAL) for i in range(7)]
    data.store_parse(root.id, found + found[:5], skipped + skipped)
    stored = pages(data)
    assert set(paths) <= set(stored)
    arcs = {(arc.from_id, arc.to_id) for arc in data.iter_raw_arcs(HOST)}
    assert arcs == {(root.id, stored[path].id) for path in paths}
    assert sorted(url for url, _reason, _page in data.iter_skipped(HOST)) == sorted(
        f"http://other.test/{i}" for i in range(7)
    )


def test_sqlite_commits_an_idle_threads_group_when_it_is_group_commit_s_old(tmp_path: Path):
    """A thread going idle does not commit the group at once (a parser idled between
    pages and committed a few pages each time); it waits at most until the group is
    group_commit_s old, and then commits it, as if calls had gone on."""
    with data_opener("sqlite", tmp_path) as opener:
        data = opener(Clock())
        assert isinstance(data, SQLiteDataManager)
        site(data, (1, ["/a"]))
        assert data.db.in_transaction  # the site's rows, in an open group
        data.group_commit_s = 3600.0
        data.wait_for_work(0.01, "parse")
        assert data.db.in_transaction  # young: still open
        data.group_commit_s = 0.5  # due in less than that
        waiting = threading.Thread(target=data.wait_for_work, args=(3600.0, "parse"))
        waiting.start()
        waiting.join(30)
        assert not waiting.is_alive()  # the wait ends when the group is due
        data.wait_for_work(0.01, "parse")  # due: committed before the wait
        assert not data.db.in_transaction


def test_sites_added_together_are_queued_as_one_by_one(open_data: OpenData) -> None:
    """add_sites adds every site in one transaction (one a site kept 300 sites on
    PostgreSQL 0.6 s from their first request), with add_site's answers: a second start
    URL of a host queues one more start page, a known one nothing, and a known site
    takes this run's politeness."""
    data = open_data(Clock())

    def start(host: str, path: str = "/", delay: float = 0.0) -> tuple[HostData, str, str]:
        url = f"http://{host}{path}"
        return HostData(host=host, crawl_delay=delay, max_downloads_at_time=2), url, url

    assert data.add_sites([start("a.test"), start("b.test"), start("a.test", "/docs/")]) == [
        True, True, True,
    ]  # fmt: skip
    assert data.add_sites([start("a.test", delay=2.0), start("c.test")]) == [False, True]
    # A start URL given twice, of a new host and of a known one, is one start page.
    assert data.add_sites([start("d.test"), start("d.test"), start("b.test", "/x/"),
                           start("b.test", "/x/")]) == [True, False, True, False]  # fmt: skip
    hosts = {host.host: host for host in data.hosts()}
    assert sorted(hosts) == ["a.test", "b.test", "c.test", "d.test"]
    assert hosts["a.test"].crawl_delay == 2.0 and hosts["b.test"].crawl_delay == 0.0
    starts = {page.url: page.level for page in data.iter_pages("a.test")}
    assert starts == {"http://a.test/": 0, "http://a.test/docs/": 0}
    assert {page.url for page in data.iter_pages("b.test")} == {
        "http://b.test/",
        "http://b.test/x/",
    }
    assert [page.url for page in data.iter_pages("d.test")] == ["http://d.test/"]
    assert sum(host.waiting for host in data.statistics().hosts) == 6  # a, a/docs, b, b/x, c, d
