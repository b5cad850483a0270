"""Refreshing a finished crawl (SPEC §10): conditional requests, what changed, and a run
that stops and resumes like any other. The loopback server's log says what was asked
and what was sent."""

from __future__ import annotations

import json
import logging
import re
import shlex
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from crawling import (
    CrawlResult,
    CrawlRunner,
    crawl_command,
    kill_under_way,
    open_state,
    read_csv,
    require_postgresql,
)
from support.loopback import NOT_FOUND, Resource, SiteServer, StaticResource, redirect
from support.sites import generated_site, page_path

from rccrawler.commands.main import main
from rccrawler.data.sql import REFRESH_COLUMNS
from rccrawler.manager import load_settings

pytestmark = pytest.mark.both_backends

HOST = "a.test"
PAGES = 12
DOCS = Path(__file__).resolve().parents[1] / "docs" / "refresh.md"


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Some tests run the command line in this process (``main``): it sets up logging for
    a process of its own (record factory, root handlers on its stderr). Put it back."""
    root, urllib3_logger = logging.getLogger(), logging.getLogger("urllib3")
    factory, handlers = logging.getLogRecordFactory(), root.handlers[:]
    levels = root.level, urllib3_logger.level
    yield
    logging.setLogRecordFactory(factory)
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    urllib3_logger.setLevel(levels[1])


def page(number: int, text: str = "", links: tuple[str, ...] = ()) -> Resource:
    """Page ``number`` of the test site: it links the home page and the next page."""
    nav = ['<a href="/">home</a>']
    if number < PAGES:
        nav.append(f'<a href="/p{number + 1}.html">next</a>')
    nav += [f'<a href="{link}">more</a>' for link in links]
    body = f"<html><title>Page {number}</title><p>{text or f'page {number}'}</p>{''.join(nav)}"
    return Resource(body.encode(), validators=True)


def home() -> Resource:
    links = "".join(f'<a href="/p{n}.html">{n}</a>' for n in range(1, PAGES + 1))
    return Resource(f"<html><title>Home</title>{links}".encode(), validators=True)


def first_site() -> dict[str, Resource]:
    return {"/": home(), **{f"/p{n}.html": page(n) for n in range(1, PAGES + 1)}}


def url(path: str) -> str:
    return f"http://{HOST}{path}"


def edit_site(site: dict[str, Resource]) -> None:
    """Between the runs: 3 pages edited (one of them now links a new page), 1 removed
    (404, still linked), 1 redirecting to a page of the site."""
    site["/p2.html"] = page(2, "page two, edited")
    site["/p5.html"] = page(5, "page five, edited", links=("/new.html",))
    site["/p7.html"] = page(7, "page seven, edited")
    site["/new.html"] = Resource(b"<html><title>New</title><a href='/'>home</a>", validators=True)
    site["/p9.html"] = NOT_FOUND
    site["/p11.html"] = redirect("/p12.html")


EXPECTED = {
    url("/p2.html"): "changed",
    url("/p5.html"): "changed",
    url("/p7.html"): "changed",
    url("/new.html"): "added",
    url("/p9.html"): "removed",
    url("/p11.html"): "redirected",
}
UNCHANGED = {url(p) for p in ("/", "/p1.html", "/p3.html", "/p4.html", "/p6.html", "/p8.html",
                              "/p10.html", "/p12.html")}  # fmt: skip


def refresh_twice(
    serve, crawler, **options: object
) -> tuple[CrawlResult, CrawlResult, SiteServer, int]:
    """The test site crawled, edited (:func:`edit_site`) and refreshed."""
    site = first_site()
    server = serve({HOST: site})
    first = crawler.run([HOST], server.resolve, **options)
    assert first.finished and len(first.graph(HOST).urls) == PAGES + 1
    assert not (first.output_dir / f"{HOST}.changes.csv").exists()  # a first run: all new
    edit_site(site)
    requests_before = len(server.answers_for(HOST))
    second = crawler.run([HOST], server.resolve, refresh=True, **options)
    assert second.finished
    return first, second, server, requests_before


def test_a_refresh_lists_exactly_what_changed_and_asks_unchanged_pages_conditionally(
    serve, crawler
):
    _first, second, server, before = refresh_twice(serve, crawler)
    changes = second.changes_by_url(HOST)
    assert {u: c for u, c in changes.items() if c != "unchanged"} == EXPECTED
    assert {u for u, c in changes.items() if c == "unchanged"} == UNCHANGED

    # Every unchanged page was asked with its validators, and answered 304 without a body.
    answers = {a.path: a for a in server.answers_for(HOST)[before:] if a.path != "/robots.txt"}
    for unchanged in UNCHANGED:
        path = unchanged.removeprefix(f"http://{HOST}")
        answer = answers[path]
        assert answer.headers.get("if-none-match"), path
        assert answer.headers.get("if-modified-since"), path
        assert (answer.status, answer.body_bytes) == (304, 0), path
    # An edited page was asked conditionally too, and came back whole.
    assert answers["/p2.html"].headers.get("if-none-match")
    assert answers["/p2.html"].status == 200 and answers["/p2.html"].body_bytes > 0
    assert "if-none-match" not in answers["/new.html"].headers  # new: nothing to compare

    rows = {row["url"]: row for row in second.changes(HOST)}
    edited = rows[url("/p2.html")]
    assert edited["old_status"] == edited["new_status"] == "200"
    assert edited["old_hash"] != edited["new_hash"] and edited["old_hash"]
    assert (edited["old_run"], edited["new_run"]) == ("1", "2")
    gone = rows[url("/p9.html")]
    assert (gone["old_status"], gone["new_status"], gone["new_hash"]) == ("200", "404", "")
    moved = rows[url("/p11.html")]
    assert (moved["new_status"], moved["redirect_to"]) == ("redirect", url("/p12.html"))
    same = rows[url("/p3.html")]
    assert same["old_hash"] == same["new_hash"] and same["old_hash"]
    added = rows[url("/new.html")]
    assert (added["old_status"], added["new_status"], added["old_run"]) == ("", "200", "")

    # The graph files describe the new state.
    graph = second.graph(HOST)
    assert graph.urls == (UNCHANGED | set(EXPECTED)) - {url("/p9.html"), url("/p11.html")}
    assert graph.skip_reason(url("/p9.html")) == "error"


def test_the_arcs_that_changed_are_listed_and_the_report_counts_them(serve, crawler):
    first, second, _server, _before = refresh_twice(serve, crawler)
    arcs = second.arc_changes(HOST)
    added = {(f, t) for f, t, change in arcs if change == "added"}
    removed = {(f, t) for f, t, change in arcs if change == "removed"}
    p = url
    assert added == {(p("/p5.html"), p("/new.html")), (p("/new.html"), p("/")),
                     (p("/p10.html"), p("/p12.html"))}  # fmt: skip
    assert removed == {
        (p("/"), p("/p9.html")), (p("/p8.html"), p("/p9.html")), (p("/p9.html"), p("/")),
        (p("/p9.html"), p("/p10.html")), (p("/"), p("/p11.html")), (p("/p10.html"), p("/p11.html")),
        (p("/p11.html"), p("/")), (p("/p11.html"), p("/p12.html")),
    }  # fmt: skip

    report = second.report
    assert (report["run"], report["run_kind"]) == (2, "refresh")
    counts = report["sites"][HOST]["changes"]
    assert counts == {
        "run": 2, "since_run": 1, "added": 1, "removed": 1, "changed": 3, "unchanged": 8,
        "redirected": 1, "arcs_added": 3, "arcs_removed": 8,
    }  # fmt: skip
    assert report["sites"][HOST]["changes_by_run"] == [counts]
    assert "changes" not in first.report["sites"][HOST]


def test_a_page_no_link_reaches_any_more_is_removed(serve, crawler):
    site = first_site()
    site["/p4.html"] = page(4, links=("/orphan.html",))
    site["/orphan.html"] = Resource(b"<html><title>Orphan</title>", validators=True)
    server = serve({HOST: site})
    assert crawler.run([HOST], server.resolve).finished
    site["/p4.html"] = page(4, "no more orphan")
    second = crawler.run([HOST], server.resolve, refresh=True)
    rows = {row["url"]: row for row in second.changes(HOST)}
    orphan = rows[url("/orphan.html")]
    assert (orphan["change"], orphan["new_status"], orphan["new_run"]) == ("removed", "", "")
    assert rows[url("/p4.html")]["change"] == "changed"
    # Never asked for again, and out of the graph.
    assert [a.path for a in server.answers_for(HOST)].count("/orphan.html") == 1
    assert url("/orphan.html") not in second.graph(HOST).urls


def test_a_second_refresh_compares_with_the_first_and_keeps_the_history(serve, crawler):
    site = first_site()
    server = serve({HOST: site})
    crawler.run([HOST], server.resolve)
    site["/p3.html"] = page(3, "three, once more")
    crawler.run([HOST], server.resolve, refresh=True)
    third = crawler.run([HOST], server.resolve, refresh=True)
    changes = third.changes_by_url(HOST)
    assert set(changes.values()) == {"unchanged"} and len(changes) == PAGES + 1
    history = third.report["sites"][HOST]["changes_by_run"]
    assert [(h["run"], h["changed"], h["unchanged"]) for h in history] == [
        (2, 1, PAGES), (3, 0, PAGES + 1)
    ]  # fmt: skip


def test_without_validators_an_unchanged_body_is_not_parsed_again(serve, crawler):
    plain = {path: Resource(res.body) for path, res in first_site().items()}
    server = serve({HOST: plain})
    crawler.run([HOST], server.resolve)
    plain["/p6.html"] = Resource(b"<html><title>Six</title><a href='/'>home</a>")
    second = crawler.run([HOST], server.resolve, refresh=True)
    changes = second.changes_by_url(HOST)
    assert changes.pop(url("/p6.html")) == "changed"
    assert set(changes.values()) == {"unchanged"}
    # p7 was linked only from the home page and p6: still reached (from the home page).
    assert url("/p7.html") in second.graph(HOST).urls


def test_a_refresh_of_a_crawl_not_over_resumes_it(serve, crawler, tmp_path):
    server = serve({HOST: first_site()})
    result = crawler.run([HOST], server.resolve, refresh=True)  # no state yet: a first crawl
    assert result.finished and result.report["run"] == 1
    assert not (result.output_dir / f"{HOST}.changes.csv").exists()
    report: dict[str, object] = json.loads((Path(result.output_dir) / "report.json").read_text())
    assert report["run_kind"] == "crawl"


def test_report_html_has_a_section_since_the_last_crawl(serve, crawler):
    import html5lib
    from test_report_html import HTML_NS, LOADERS, SVG_NS, charts_of, text_of

    _first, second, _server, _before = refresh_twice(serve, crawler)
    raw = (second.output_dir / "report.html").read_text(encoding="utf-8")
    root = html5lib.HTMLParser(strict=True).parse(raw)
    section = next(s for s in root.iter(f"{HTML_NS}section") if s.get("class") == "changes")
    assert text_of(section.find(f"{HTML_NS}h3")) == "Since the last crawl (run 1 → run 2)"
    charts = charts_of(section)
    assert charts["Pages since run 1"] == [("added", "1"), ("removed", "1"), ("changed", "3"),
                                           ("redirected", "1"), ("unchanged", "8")]  # fmt: skip
    assert charts["Arcs since the last run"] == [("added", "3"), ("removed", "8")]
    tables = {t.get("class"): t for t in section.iter(f"{HTML_NS}table")}
    links = {kind: {a.get("href") for a in table.iter(f"{HTML_NS}a")}
             for kind, table in tables.items()}  # fmt: skip
    assert links == {
        "changed changed": {url("/p2.html"), url("/p5.html"), url("/p7.html")},
        "changed added": {url("/new.html")},
        "changed removed": {url("/p9.html")},
        "changed redirected": {url("/p11.html")},
    }
    for element in root.iter():
        name = element.tag.rpartition("}")[2].lower() if isinstance(element.tag, str) else ""
        assert name not in LOADERS
        assert "src" not in element.attrib
    assert len(list(section.iter(f"{SVG_NS}svg"))) == 2


# -- a larger site, killed and resumed, or refreshed by several workers -----------------


class ChangingSite(Mapping[str, StaticResource]):
    """A generated site whose pages have validators, with pages replaced by ``edits``.
    While ``gate`` is given and not set, every answer waits for it (with a bound)."""

    def __init__(self, pages: int, host: str = HOST, gate: threading.Event | None = None) -> None:
        self.base = generated_site(host, pages, fanout=5)
        self.edits: dict[str, StaticResource] = {}
        self.gate = gate

    def __getitem__(self, path: str) -> StaticResource:
        if self.gate is not None:
            self.gate.wait(GATE_S)
        if path in self.edits:
            return self.edits[path]
        found = self.base[path]
        return Resource(found.body, validators=True)

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def edit(self) -> None:
        """Some pages edited, one gone, one redirecting, one new page linked."""
        for i in (3, 40, 120, 180):
            body = self.base.body(i).replace(b"</h1>", b"</h1><p>edited since</p>")
            self.edits[page_path(i)] = Resource(body, validators=True)
        extra = b"</h1><p>edited, with a new page</p><a href='/brand-new.html'>new</a>"
        self.edits[page_path(7)] = Resource(
            self.base.body(7).replace(b"</h1>", extra), validators=True
        )
        self.edits["/brand-new.html"] = Resource(b"<title>new</title><a href='/'>h</a>")
        self.edits[page_path(33)] = NOT_FOUND
        self.edits[page_path(90)] = redirect(page_path(91))


GATE_S = 60.0
"""The longest a gated answer waits: the workers of a refresh start within it."""


def sorted_rows(result: CrawlResult, host: str = HOST) -> list[tuple[str, ...]]:
    return sorted(tuple(row.values()) for row in result.changes(host))


def refreshed_reference(
    serve, tmp_path: Path, storage: str, pages: int, hosts: tuple[str, ...] = (HOST,)
) -> dict[str, list[tuple[str, ...]]]:
    """Each host's H.changes.csv after an uninterrupted refresh (one worker) of
    ChangingSites."""
    sites = {host: ChangingSite(pages, host) for host in hosts}
    server = serve(sites)
    runner = CrawlRunner(tmp_path / "reference", storage=storage)
    try:
        runner.run(list(hosts), server.resolve)
        for site in sites.values():
            site.edit()
        refreshed = runner.run(list(hosts), server.resolve, refresh=True)
        rows = {host: sorted_rows(refreshed, host) for host in hosts}
    finally:
        runner.discard()
    for host in hosts:
        kinds = Counter(row[1] for row in rows[host])
        assert kinds["changed"] == 5 and kinds["added"] == 1, (host, kinds)
        assert kinds["redirected"] == 1 and kinds["removed"] >= 1, (host, kinds)
        assert kinds["unchanged"] > pages // 2, (host, kinds)
    return rows


def test_kill_9_in_the_middle_of_a_refresh_then_resume_gives_the_same_changes(
    serve, crawler, tmp_path, storage
):
    expected = refreshed_reference(serve, tmp_path, storage, 400)[HOST]
    site = ChangingSite(400)
    server = serve({HOST: site})
    config = crawler.settings_file([HOST], server.resolve, crawl={"max_downloads_at_time": 2})
    crawler.run([HOST], server.resolve, crawl={"max_downloads_at_time": 2})
    site.edit()
    command, env = crawl_command(config)
    kill_under_way([*command, "--refresh"], env, server, len(server.hits) + 120)
    refreshed = len(server.answers)
    resumed = crawler.run([HOST], server.resolve, refresh=True,
                          crawl={"max_downloads_at_time": 2})  # fmt: skip
    assert resumed.finished and resumed.report["run"] == 2  # the same run, resumed
    assert sorted_rows(resumed) == expected
    # The resumed refresh still asked its unchanged pages conditionally.
    after = [a for a in server.answers[refreshed:] if a.status == 304]
    assert after and all(a.headers.get("if-none-match") for a in after)


WORKER_HOSTS = ("a.test", "b.test", "c.test")


def joined_the_refresh(log: Path) -> bool:
    """Whether a worker's log says it began run 2 or joined it (SPEC §10)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return "refresh: run 2 of the crawl begins" in text or "the last run is not over" in text


def test_a_refresh_by_three_postgresql_workers_gives_the_changes_of_one(serve, tmp_path):
    postgresql = require_postgresql()
    expected = refreshed_reference(serve, tmp_path, postgresql, 200, WORKER_HOSTS)
    gate = threading.Event()
    sites = {host: ChangingSite(200, host, gate) for host in WORKER_HOSTS}
    gate.set()
    server = serve(sites)
    runner = CrawlRunner(tmp_path / "workers", storage=postgresql)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        # A gated answer may wait for the last worker to start: no timeout meanwhile.
        options = {"threads": {"downloading": 3, "parsing": 1}, "crawl": {"timeout_s": 90}}
        runner.run(list(WORKER_HOSTS), server.resolve, **options)
        for site in sites.values():
            site.edit()
        config = runner.settings_file(list(WORKER_HOSTS), server.resolve, **options)
        command, env = crawl_command(config)
        # The site answers nothing until every worker has begun the refresh or joined
        # it: none comes after the run is over (it would begin run 3).
        gate.clear()
        logs = [tmp_path / f"worker{number}.log" for number in range(3)]
        workers += [
            subprocess.Popen([*command, "--refresh", "--log-file", str(log)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for log in logs
        ]  # fmt: skip
        try:
            deadline = time.monotonic() + GATE_S
            while not all(joined_the_refresh(log) for log in logs):
                assert time.monotonic() < deadline, [joined_the_refresh(log) for log in logs]
                assert all(worker.poll() is None for worker in workers)
                gate.wait(0.05)  # not set: a bounded pause between two looks
        finally:
            gate.set()
        for worker in workers:
            _out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err.decode(errors="replace")[-3000:]
        _cls, settings = load_settings(config)
        result = CrawlResult(True, settings.output_dir, {}, None)  # type: ignore[arg-type]
        assert {host: sorted_rows(result, host) for host in WORKER_HOSTS} == expected
        report = json.loads((settings.output_dir / "report.json").read_text())
        assert report["run"] == 2
        began = [log for log in logs if "run 2 of the crawl begins" in log.read_text()]
        assert len(began) == 1  # one began it, the two others joined it
    finally:
        for worker in workers:
            if worker.poll() is None:  # a failed test's: not left running
                worker.kill()
                worker.communicate()
        runner.discard()


# -- the tasks follow a refresh -----------------------------------------------------------


def text_page(title: str, text: str) -> Resource:
    return Resource(f"<html><title>{title}</title><p>{text}</p><a href='/'>home</a>".encode(),
                    validators=True)  # fmt: skip


def task_site() -> dict[str, StaticResource]:
    pages = {
        "/walrus.html": text_page("Walrus", "The walrus rests on the ice floe."),
        "/otter.html": text_page("Otter", "The otter swims near the kelp."),
        "/heron.html": text_page("Heron", "The heron waits by the reeds."),
        "/quokka.html": text_page("Quokka", "The quokka smiles on Rottnest."),
    }
    links = "".join(f"<a href='{path}'>x</a>" for path in pages)
    return {"/": Resource(f"<html><title>Animals</title>{links}".encode(), validators=True),
            **pages}  # fmt: skip


def hits(config: Path, query: str) -> set[str]:
    manager_cls, settings = load_settings(config)
    from plugins.search import SearchManager

    assert manager_cls is SearchManager
    return {hit["url"] for hit in SearchManager.search(settings, query)}


def test_the_search_index_drops_removed_pages_and_indexes_changed_ones(serve, crawler):
    site = task_site()
    server = serve({HOST: site})
    manager = {"manager": "plugins.search.SearchManager"}
    crawler.run([HOST], server.resolve, **manager)
    config = crawler.written[-1]
    assert hits(config, "quokka") == {url("/quokka.html")}
    assert hits(config, "kelp") == {url("/otter.html")}
    site["/otter.html"] = text_page("Otter", "The otter dives for sea urchins.")
    site["/quokka.html"] = NOT_FOUND
    result = crawler.run([HOST], server.resolve, refresh=True, **manager)
    config = crawler.written[-1]
    assert result.changes_by_url(HOST)[url("/otter.html")] == "changed"
    assert hits(config, "urchins") == {url("/otter.html")}  # only the new version has it
    assert hits(config, "kelp") == set()  # only the old version had it
    assert hits(config, "quokka") == set()  # only the removed page had it
    assert hits(config, "walrus") == {url("/walrus.html")}  # unchanged: still there
    assert hits(config, "reeds") == {url("/heron.html")}


def test_the_archive_writes_revisit_records_for_unchanged_pages(serve, crawler):
    from test_archive import warcio_cli
    from warcio.archiveiterator import ArchiveIterator

    site = task_site()
    site["/heron.html"] = Resource(site["/heron.html"].body)  # no validators: a 200 again
    server = serve({HOST: site})
    manager = {"manager": "plugins.archive.ArchiveManager"}
    first = crawler.run([HOST], server.resolve, **manager)
    before = set(first.output_dir.glob("*.warc.gz"))
    site["/otter.html"] = text_page("Otter", "The otter dives for sea urchins.")
    result = crawler.run([HOST], server.resolve, refresh=True, **manager)
    [warc] = set(result.output_dir.glob("*.warc.gz")) - before
    records: dict[str, tuple[str, dict[str, str]]] = {}
    with open(warc, "rb") as handle:
        for record in ArchiveIterator(handle):
            if record.rec_type in ("response", "revisit"):
                uri = record.rec_headers.get_header("WARC-Target-URI")
                records[uri] = (record.rec_type, dict(record.rec_headers.headers))
    profile = "http://netpreserve.org/warc/1.1/revisit/"
    for path in ("/", "/walrus.html", "/heron.html", "/quokka.html"):
        kind, headers = records[url(path)]
        assert kind == "revisit", path
        same_body = path == "/heron.html"  # a 200 with the body archived last run
        assert headers["WARC-Profile"] == profile + (
            "identical-payload-digest" if same_body else "server-not-modified"
        ), path
        assert headers["WARC-Refers-To-Target-URI"] == url(path)
        assert headers["WARC-Refers-To-Date"]
        assert headers["WARC-Payload-Digest"].startswith("sha1:")
    assert records[url("/otter.html")][0] == "response"
    check = warcio_cli("check", "-v", str(warc))
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_link_checker_tells_links_broken_since_the_last_run(serve, crawler):
    site = task_site()
    site["/"] = Resource(site["/"].body + b"<a href='/gone-long-ago.html'>old</a>", validators=True)
    server = serve({HOST: site})
    manager = {"manager": "plugins.linkcheck.LinkCheckManager"}
    crawler.run([HOST], server.resolve, **manager)
    site["/heron.html"] = NOT_FOUND
    result = crawler.run([HOST], server.resolve, refresh=True, **manager)
    broken = {row["url"]: row for row in read_csv(result.output_dir / f"{HOST}.broken.csv")}
    assert set(broken) == {url("/gone-long-ago.html"), url("/heron.html")}
    new = read_csv(result.output_dir / f"{HOST}.newly_broken.csv")
    assert [(row["url"], row["status"], row["old_status"]) for row in new] == [
        (url("/heron.html"), "404", "200")
    ]
    site_report = result.report["sites"][HOST]
    assert [link["url"] for link in site_report["newly_broken_links"]] == [url("/heron.html")]


def test_the_task_of_the_docs_keeps_its_rows_through_the_three_hooks(serve, crawler):
    code = re.search(r"```python\n(# history\.py.*?)```", DOCS.read_text(), re.S)
    assert code is not None
    (crawler.root / "history.py").write_text(code.group(1))  # found beside the settings
    refresh_twice(serve, crawler, manager="history.HistoryManager")
    with open_state(crawler.written[-1]) as data:
        rows = dict(data.task_rows("history_seen", columns=("url", "how")))
    assert rows == {
        **{u: "unchanged 304" for u in UNCHANGED},
        url("/p2.html"): "parsed", url("/p5.html"): "parsed", url("/p7.html"): "parsed",
        url("/new.html"): "parsed", url("/p9.html"): "removed", url("/p11.html"): "redirected",
    }  # fmt: skip


# -- states written before refreshes existed ------------------------------------------------


def run_sql(config: Path, statements: list[str]) -> None:
    """Run statements on a crawl's state as it is stored (SQLite file or PostgreSQL schema)."""
    _cls, settings = load_settings(config)
    if settings.storage == "sqlite":
        db = sqlite3.connect(settings.state_dir / "crawl.sqlite3")
        with db:
            for statement in statements:
                db.execute(statement)
        db.close()
        return
    import psycopg

    from rccrawler.data.postgres import schema_for

    with psycopg.connect(settings.storage, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema_for(settings.crawl_name)}")
        for statement in statements:
            conn.execute(statement)


def downgrade_to_version_3(config: Path) -> None:
    """Make a crawl's state what rccrawler wrote before schema version 4."""
    run_sql(config, [
        *(f"ALTER TABLE pages DROP COLUMN {name}" for name, _kind in REFRESH_COLUMNS),
        "DROP TABLE runs", "DROP TABLE last_arcs",
        "UPDATE meta SET value = '3' WHERE key = 'schema_version'",
    ])  # fmt: skip


def test_a_state_of_version_3_is_upgraded_by_a_crawl_and_refused_by_a_reader(
    serve, crawler, capsys
):
    site = first_site()
    server = serve({HOST: site})
    crawler.run([HOST], server.resolve)
    config = crawler.written[-1]
    downgrade_to_version_3(config)
    assert main(["status", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert "schema version 3, this rccrawler uses 4; run the crawl once" in error
    site["/p4.html"] = page(4, "four, edited")
    result = crawler.run([HOST], server.resolve, refresh=True)
    changes = result.changes_by_url(HOST)
    assert changes.pop(url("/p4.html")) == "changed"
    assert set(changes.values()) == {"unchanged"} and len(changes) == PAGES
    assert main(["status", "--config", str(config)]) == 0
    assert "run 2 (refresh), started" in capsys.readouterr().out


def test_a_state_of_another_version_is_refused_with_a_way_out(serve, crawler, capsys):
    server = serve({HOST: first_site()})
    crawler.run([HOST], server.resolve)
    config = crawler.written[-1]
    run_sql(config, ["UPDATE meta SET value = '2' WHERE key = 'schema_version'"])
    assert main(["crawl", "--config", str(config), "--refresh", "--no-tui"]) == 2
    assert "schema version 2, this rccrawler uses 4" in capsys.readouterr().err
    assert main(["status", "--config", str(config)]) == 2
    assert "crawl again with --fresh" in capsys.readouterr().err


# -- the command line ----------------------------------------------------------------------


def test_refresh_exits_as_a_crawl_does(serve, crawler, capsys):
    server = serve({HOST: first_site()})
    config = crawler.settings_file([HOST], server.resolve)
    command = ["crawl", "--config", str(config), "--no-tui"]
    assert main([*command, "--refresh"]) == 0  # no state yet: the first crawl
    assert "since run" not in capsys.readouterr().out
    assert main([*command, "--refresh"]) == 0
    out = capsys.readouterr().out
    assert f"{HOST}: since run 1: 0 changed, 0 added, 0 removed, 0 redirected, " in out
    assert main(["status", "--config", str(config)]) == 0
    assert "run 2 (refresh), started" in capsys.readouterr().out
    server.shutdown()
    server.server_close()  # the site is gone: the refresh fetches nothing
    assert main([*command, "--refresh"]) == 1
    assert "sites failed, nothing fetched" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main([*command, "--refresh", "--fresh"])
    assert usage.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_scheduled_commands_of_the_docs_run_as_written(serve, crawler, tmp_path):
    server = serve({HOST: first_site()})
    config = crawler.settings_file([HOST], server.resolve)
    text = DOCS.read_text()
    cron = re.search(r"^15 3 \* \* 1 .*?/rccrawler (.*)$", text, re.M)
    systemd = re.search(r"^ExecStart=\S*/rccrawler (.*)$", text, re.M)
    assert cron is not None and systemd is not None
    for line in (cron.group(1), systemd.group(1)):
        args = [str(config) if arg == "sites.yaml" else arg for arg in shlex.split(line)]
        args = [str(tmp_path / arg) if arg.endswith(".log") else arg for arg in args]
        assert main(args) == 0, line
    report = json.loads((crawler.root / "output" / "report.json").read_text())
    assert report["run"] == 2 and report["run_kind"] == "refresh"
    assert "no waiting links left" in (tmp_path / "refresh.log").read_text()
