"""plugins.linkcheck: every broken internal link with every page linking to it, and nothing else."""

from __future__ import annotations

import csv
import itertools
import socket
from collections import Counter
from collections.abc import Callable

import pytest
from auditsite import AUDIT, BROKEN, audit_sites, page
from crawling import CLOCK_SLACK
from support.resolver import logging_resolver
from webserver import NOT_FOUND, TEXT, Request, Resource, redirect

from rccrawler.exceptions import ConfigError
from rccrawler.manager import load_settings
from rccrawler.unloaders import host_file_stem


def read_broken(result, host):
    path = result.output_dir / f"{host_file_stem(host)}.broken.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["url", "status", "found_on"]
    assert len(rows[1:]) == len(set(map(tuple, rows[1:])))
    return {tuple(row) for row in rows[1:]}


def test_linkcheck_finds_every_broken_link_and_its_pages(serve, crawler):
    server = serve(audit_sites())
    result = crawler.run(["a.test", "dead.test"], server.resolve, **AUDIT,
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    expected = {(url, status, page) for url, (status, pages) in BROKEN.items() for page in pages}
    assert read_broken(result, "a.test") == expected
    # A start page that fails has no page linking to it.
    assert read_broken(result, "dead.test") == {("http://dead.test/", "503", "")}
    # The same list in report.json, one entry per URL.
    reported = result.report["sites"]["a.test"]["broken_links"]
    assert [entry["url"] for entry in reported] == sorted(BROKEN)
    for entry in reported:
        status, pages = BROKEN[entry["url"]]
        assert (entry["status"], entry["found_on"]) == (status, sorted(pages))
    # The redirect loop is an error of the crawl, listed as skipped, not as broken.
    assert result.graph("a.test").skip_reason("http://a.test/loop") == "redirect_loop"
    # The web graph is written as usual.
    assert "http://a.test/c" in result.graph("a.test").urls


def test_a_site_without_broken_links_gets_a_header_only(serve, crawler):
    server = serve({"ok.test": {"/": audit_sites()["sub.a.test"]["/"]}})
    result = crawler.run(["ok.test"], server.resolve,
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert read_broken(result, "ok.test") == set()
    assert result.report["sites"]["ok.test"]["broken_links"] == []


def no_head(answer: Resource) -> Callable[[Request], Resource]:
    """A server that refuses HEAD (405) and answers GET with ``answer``."""
    return lambda request: Resource(b"", 405, TEXT) if request.method == "HEAD" else answer


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_check_external_asks_each_external_link_once_politely(serve, crawler):
    ext = [f"http://ext.test{p}" for p in ("/ok", "/missing", "/nohead", "/nohead-gone", "/moved")]
    server = serve({
        "a.test": {"/": page(*ext, "http://down.test/x", "/p"),
                   "/p": page("http://ext.test/missing", "http://ext.test/ok")},
        "b.test": {"/": page("http://ext.test/missing")},
        "ext.test": {"/ok": page(), "/nohead": no_head(page()),
                     "/nohead-gone": no_head(NOT_FOUND), "/moved": redirect("/missing")},
    })  # fmt: skip
    resolve = {**server.resolve, "down.test:80": f"127.0.0.1:{closed_port()}"}
    result = crawler.run(["a.test", "b.test"], resolve,
                         crawl={"crawl_delay_ms": 50, "max_download_attempts": 1},
                         linkcheck={"check_external": True},
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    assert read_broken(result, "a.test") == {
        ("http://down.test/x", "connection_refused", "http://a.test/"),
        ("http://ext.test/missing", "404", "http://a.test/"),
        ("http://ext.test/missing", "404", "http://a.test/p"),
        ("http://ext.test/nohead-gone", "404", "http://a.test/"),
        ("http://ext.test/moved", "404", "http://a.test/"),
    }
    assert read_broken(result, "b.test") == {("http://ext.test/missing", "404", "http://b.test/")}
    # Each link once, HEAD first, GET only where HEAD was refused; the redirect is followed.
    asked = [
        (hit.method, hit.path) for hit in sorted(server.hits_for("ext.test"), key=lambda h: h.at)
    ]
    assert Counter(asked) == Counter({
        ("HEAD", "/ok"): 1, ("HEAD", "/missing"): 2, ("HEAD", "/moved"): 1,
        ("HEAD", "/nohead"): 1, ("GET", "/nohead"): 1,
        ("HEAD", "/nohead-gone"): 1, ("GET", "/nohead-gone"): 1,
    })  # fmt: skip
    # One request at a time to ext.test, each sent the crawl delay after the answer to
    # the one before; the server stamps a request before it answers, so the stamps are
    # the delay apart at least, however loaded the machine.
    times = sorted(hit.at for hit in server.hits_for("ext.test"))
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.05 - CLOCK_SLACK, gaps
    assert server.peak_in_flight["ext.test"] == 1


def test_a_nofollow_page_has_none_of_its_links_checked(serve, crawler):
    head = b'<html><head><meta name="robots" content="nofollow"></head>'
    nofollow = Resource(head + b'<body><a href="http://ext.test/quiet">x</a> <a href="/gone">y</a>')
    server = serve({
        "a.test": {"/": page("http://ext.test/asked", "/nf"), "/nf": nofollow},
        "ext.test": {"/asked": NOT_FOUND, "/quiet": NOT_FOUND},
    })  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, linkcheck={"check_external": True},
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    assert read_broken(result, "a.test") == {("http://ext.test/asked", "404", "http://a.test/")}
    assert [hit.path for hit in server.hits_for("ext.test")] == ["/asked"]
    assert "/gone" not in server.paths_for("a.test")
    assert result.graph("a.test").skip_reason("http://a.test/gone") == "nofollow"


def test_check_external_must_be_a_boolean(tmp_path, crawler):
    path = crawler.settings_file(["a.test"], {}, manager="plugins.linkcheck.LinkCheckManager",
                                 linkcheck={"check_external": "yes"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"linkcheck\.check_external"):
        load_settings(path)
    path = crawler.settings_file(["a.test"], {}, manager="plugins.linkcheck.LinkCheckManager",
                                 linkcheck={"check_externals": True})  # fmt: skip
    with pytest.raises(ConfigError, match=r"linkcheck\.check_externals: unknown key"):
        load_settings(path)


def test_the_link_checker_tries_a_dead_host_once_and_tells_its_progress(serve, crawler, caplog):
    dead = [f"http://dead.invalid/p{i}" for i in range(800)]
    server = serve(
        {"a.test": {"/": page(*dead, "http://ext.test/ok")}, "ext.test": {"/ok": page()}}
    )
    caplog.set_level("INFO", logger="rccrawler.context")
    with logging_resolver() as resolver:
        # 800 requests a crawl delay of 1 s apart would take 13 minutes: the test would
        # hang. The first lookup fails; the 799 other links fail with it, at once.
        result = crawler.run(["a.test"], server.resolve, crawl={"crawl_delay_ms": 1000},
                             linkcheck={"check_external": True},
                             manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    assert resolver.count("dead.invalid") == 1
    broken = read_broken(result, "a.test")
    assert broken == {(url, "dns", "http://a.test/") for url in dead}
    assert [hit.path for hit in server.hits_for("ext.test")] == ["/ok"]
    assert "external links checked: 801 of 801" in caplog.messages
