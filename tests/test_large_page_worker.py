"""threads.parse_worker: large pages parsed in a worker process, on another core than the
crawl's threads; the same graph, and nothing lost when the worker is gone."""

from __future__ import annotations

import os
import signal
import subprocess

from crawling import CrawlResult, CrawlRunner, crawl_command, kill_under_way, wait_until
from support.processes import process_alive
from webserver import Resource

from rccrawler.cpus import LARGE_PARSE_BYTES
from rccrawler.manager import load_settings
from rccrawler.web.html import parse_html
from rccrawler.workers import LargePageParser

READY_WAIT = 60.0
"""Seconds a test waits for a worker's interpreter to start (a bound, not a measure)."""

OPTIONS = {"max_links": 100, "max_depth": 512, "max_tags": 2_000}
"""The parse budgets of a crawl, with a tag budget that cuts :func:`large_page`."""


def large_page(number: int) -> bytes:
    """A page over LARGE_PARSE_BYTES, with links at both ends."""
    filler = "<p>words of a long page</p>" * (LARGE_PARSE_BYTES // 20)
    links = f'<a href="/">home</a> <a href="/small{number}">s</a>'
    return f'<html><body>{links}{filler}<a href="/end{number}">e</a></body></html>'.encode()


def site(large: int = 5) -> dict[str, Resource]:
    """A home page linking to ``large`` large pages, each to two small ones."""
    links = "".join(f'<a href="/big{number}">{number}</a> ' for number in range(large))
    pages = {"/": Resource(f"<html><body>{links}</body></html>".encode())}
    for number in range(large):
        pages[f"/big{number}"] = Resource(large_page(number))
        for small in (f"/small{number}", f"/end{number}"):
            pages[small] = Resource(f"<html><body>{small}</body></html>".encode())
    return pages


def test_large_pages_parsed_in_the_worker_give_the_same_graph(serve, tmp_path):
    server = serve({"a.test": site()})
    plain = CrawlRunner(tmp_path / "plain").run(["a.test"], server.resolve)
    runner = CrawlRunner(tmp_path / "worker")
    path = runner.settings_file(
        ["a.test"], server.resolve, threads={"downloading": 4, "parsing": 2, "parse_worker": True}
    )
    manager_cls, settings = load_settings(path)
    manager = manager_cls(settings)
    large_pages = manager.context.large_pages
    assert large_pages is not None and large_pages.ready(wait=READY_WAIT)
    pid = large_pages.pid
    assert pid is not None and process_alive(pid)
    assert manager.run()
    assert large_pages.parsed >= 1  # the first large page found it free, at least
    assert not process_alive(pid)  # ended with the crawl
    urls = {row["url"] for row in plain.graph("a.test").nodes}
    assert len(urls) == 16
    with_worker = CrawlResult(True, settings.output_dir, {}, manager).graph("a.test")
    assert {row["url"] for row in with_worker.nodes} == urls
    assert len(with_worker.arcs) == len(plain.graph("a.test").arcs)


def test_a_worker_that_is_gone_leaves_the_pages_to_the_threads():
    large_pages = LargePageParser(enabled=True)
    try:
        assert large_pages.ready(wait=READY_WAIT)
        body, url = large_page(1), "http://a.test/big1"
        expected = parse_html(body, url, "text/html", **OPTIONS)
        assert expected.truncated  # the worker keeps the budgets the thread would
        assert large_pages.parse(body, url, "text/html", OPTIONS) == expected
        pid = large_pages.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not process_alive(pid), READY_WAIT)
        assert large_pages.parse(body, url, "text/html", OPTIONS) is None  # the caller parses
        assert large_pages.parse(body, url, "text/html", OPTIONS) is None
        assert large_pages.parsed == 1
    finally:
        large_pages.close()
    assert large_pages.parse(large_page(2), "http://a.test/big2", "text/html", OPTIONS) is None


def test_no_worker_for_small_pages_nor_when_off():
    small = b"<html><body><a href='/x'>x</a></body></html>"
    on = LargePageParser(enabled=True)
    assert on.parse(small, "http://a.test/", "text/html", OPTIONS) is None
    assert on.pid is None  # a crawl of small pages never starts one
    off = LargePageParser(enabled=False)
    assert off.parse(large_page(0), "http://a.test/big0", "text/html", OPTIONS) is None
    assert not off.ready() and off.pid is None
    on.close()
    off.close()


def test_a_killed_crawl_leaves_no_worker_behind_and_resumes_to_the_same_graph(serve, tmp_path):
    """SIGKILL in mid-crawl: the worker (a fork of the crawl, made before its threads)
    ends with it (its socket closes), and the resumed crawl writes the graph an
    uninterrupted crawl without a worker writes."""
    server = serve({"a.test": site(large=80)})
    reference = CrawlRunner(tmp_path / "plain").run(["a.test"], server.resolve)
    hits = len(server.hits)
    runner = CrawlRunner(tmp_path / "killed")
    config = runner.settings_file(
        ["a.test"], server.resolve, threads={"downloading": 2, "parsing": 2, "parse_worker": True}
    )
    command, env = crawl_command(config)
    workers = kill_under_way(command, env, server, hits + 60)
    assert len(workers) == 1
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    _cls, settings = load_settings(config)
    graph = CrawlResult(True, settings.output_dir, {}, None).graph("a.test")  # type: ignore[arg-type]
    assert {row["url"] for row in graph.nodes} == {
        row["url"] for row in reference.graph("a.test").nodes
    }
    assert len(graph.arcs) == len(reference.graph("a.test").arcs)
