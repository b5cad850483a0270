"""Hosts that cannot answer are tried once per run: a name that does not resolve, a port
that refuses the connection (pages, robots.txt and the link checker's external URLs)."""

from __future__ import annotations

import socket
import threading

import pytest
from crawling import wait_until
from support.resolver import logging_resolver
from webserver import Resource

from rccrawler.config import CrawlSettings
from rccrawler.exceptions import FetchError
from rccrawler.web.fetch import Fetcher, UnreachableHosts


def closed_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("obey_robots", [True, False])
def test_a_name_that_does_not_resolve_is_looked_up_once_per_run(serve, crawler, obey_robots):
    server = serve({"a.test": {"/": Resource(b"<a href='/b'>b</a>"), "/b": Resource(b"b")}})
    with logging_resolver() as resolver:
        result = crawler.run(
            ["a.test", "dead.invalid"], server.resolve,
            crawl={"obey_robots": obey_robots, "max_download_attempts": 3,
                   "max_downloads_at_time": 4, "sitemaps": True},
        )  # fmt: skip
    assert result.finished
    # robots.txt, the sitemap and every attempt at the start page: one lookup in all.
    assert resolver.count("dead.invalid") == 1
    site = result.report["sites"]["dead.invalid"]
    assert site["pages_done"] == 0
    if not obey_robots:
        assert site["errors_by_kind"] == {"dns": 1}
    assert result.report["sites"]["a.test"]["pages_done"] == 2


def test_a_host_that_refuses_the_connection_is_tried_once_per_run(serve, crawler):
    server = serve({"a.test": {"/": Resource(b"a")}})
    # Nothing listens on this loopback address's port; its lookups count its connections.
    resolve = {**server.resolve, "refused.test:80": f"127.0.0.2:{closed_port('127.0.0.2')}"}
    with logging_resolver() as resolver:
        result = crawler.run(
            ["a.test", "refused.test"], resolve,
            crawl={"obey_robots": False, "max_download_attempts": 3},
        )  # fmt: skip
    assert result.finished
    assert resolver.count("127.0.0.2") == 1
    assert result.report["sites"]["refused.test"]["errors_by_kind"] == {"connection_refused": 1}


def test_requests_to_a_host_never_reached_take_turns_until_it_answers():
    hosts = UnreachableHosts()
    with pytest.raises(FetchError), hosts.first_contact("dead.invalid", 80):
        raise FetchError("dns", "no such name", retryable=True)
    assert hosts.cause("dead.invalid", 443) == "dns"  # a name fails on every port
    with pytest.raises(FetchError, match="earlier in this run"), \
            hosts.first_contact("dead.invalid", 80):  # fmt: skip
        raise AssertionError("not tried again")
    with pytest.raises(FetchError), hosts.first_contact("refused.test", 80):
        raise FetchError("connection_refused", "refused", retryable=True)
    assert hosts.cause("refused.test", 80) == "connection_refused"
    assert hosts.cause("refused.test", 8080) is None  # another port may listen
    # A timeout is no verdict: the host is contacted, and a later refusal (a server
    # restarting) is not remembered.
    with pytest.raises(FetchError), hosts.first_contact("slow.test", 80):
        raise FetchError("timeout", "slow", retryable=True)
    with pytest.raises(FetchError), hosts.first_contact("slow.test", 80):
        raise FetchError("connection_refused", "restarting", retryable=True)
    assert hosts.cause("slow.test", 80) is None


def test_requests_that_waited_for_a_host_s_first_answer_then_go_together(serve):
    """Until a host has answered once, its requests take turns. Those waiting when it
    answers go together: they had kept taking turns, each waiting for the one before
    it to end (a host a PostgreSQL worker took over had its first 4 pages answered 51,
    103, 155 and 207 ms after they were taken, 50 ms answers)."""
    pages = {"/first": Resource(b"first", delay=1.0)}
    pages.update({f"/{n}": Resource(b"page", delay=1.0) for n in range(3)})
    server = serve({"a.test": pages})
    client = Fetcher(CrawlSettings(resolve=server.resolve, cookies=False))
    try:
        first = threading.Thread(target=client.get, args=("http://a.test/first",))
        first.start()
        # The host's first request is on the server for a second: the others wait.
        assert wait_until(lambda: server.in_flight("a.test") == 1, timeout=10)
        others = [threading.Thread(target=client.get, args=(f"http://a.test/{n}",))
                  for n in range(3)]  # fmt: skip
        for thread in others:
            thread.start()
        for thread in (first, *others):
            thread.join(timeout=30)
    finally:
        client.close()
    assert sorted(hit.path for hit in server.hits) == ["/0", "/1", "/2", "/first"]
    # One after another, it was 1 (2 as the first one left the server): 3 together now.
    assert server.peak_in_flight["a.test"] >= 3
