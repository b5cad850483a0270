"""The loopback server and the sample sites that every crawl test stands on."""

from __future__ import annotations

import html
import re
import socket
import threading
import time
import tracemalloc
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import pytest
import urllib3
from crawling import wait_until
from support.sites import generated_site, page_level, page_path

from rccrawler.demo.site import BLOG_HOST, DEMO_HOST, EXTERNAL_HOST, demo_facts, demo_sites
from tests.webserver import (
    TEXT,
    Request,
    Resource,
    SiteServer,
    fetch,
    has_openssl,
    make_tls_context,
    serve_fixture,
    serve_sites,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    Serve = Callable[..., SiteServer]

serve = pytest.fixture(serve_fixture, name="serve")

HTML_CT = "text/html; charset=utf-8"


# -- the server ------------------------------------------------------------------


def test_virtual_hosts_share_one_port(serve: Serve) -> None:
    server = serve(
        {"a.test": {"/": Resource(b"<a href='/x'>x</a>")}, "sub.a.test": {"/": Resource(b"sub")}}
    )
    assert fetch(server, "a.test").data == b"<a href='/x'>x</a>"
    assert fetch(server, "sub.a.test").data == b"sub"
    assert fetch(server, "a.test", "/missing").status == 404
    assert fetch(server, "a.test", headers={"Host": "unknown.test"}).status == 404
    assert [h.path for h in server.hits_for("a.test")] == ["/", "/missing"]
    assert server.paths_for("sub.a.test") == ["/"]
    assert server.resolve == {
        f"{h}:80": f"127.0.0.1:{server.server_port}" for h in ("a.test", "sub.a.test")
    }
    assert server.url("a.test", "/x") == "http://a.test/x"


def test_host_header_port_and_case_are_ignored(serve: Serve) -> None:
    server = serve({"a.test": {"/": Resource(b"a")}})
    assert fetch(server, "a.test", headers={"Host": "A.Test:8080"}).data == b"a"
    hit = server.hits_for("a.test")[0]
    assert hit.headers["host"] == "A.Test:8080"
    assert hit.method == "GET"


def test_peak_in_flight_per_host(serve: Serve) -> None:
    server = serve({"a.test": {"/slow": Resource(b"ok", delay=0.2)}})
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: fetch(server, "a.test", "/slow"), range(3)))
    assert server.peak_in_flight["a.test"] == 3
    # The count drops just after the last byte is sent, so the client may be first.
    assert wait_until(lambda: server.in_flight("a.test") == 0, timeout=5)
    server.reset()
    assert server.hits == []
    assert server.peak_in_flight["a.test"] == 0


def test_keep_alive_connection_is_reused(serve: Serve) -> None:
    server = serve({"a.test": {"/": Resource(b"one"), "/2": Resource(b"two")}})
    port = int(server.resolve["a.test:80"].split(":")[1])
    with urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1, retries=False) as pool:
        first = pool.request("GET", "/", headers={"Host": "a.test"})
        second = pool.request("GET", "/2", headers={"Host": "a.test"})
        assert (first.data, second.data) == (b"one", b"two")
        assert pool.num_connections == 1


def test_head_sends_length_without_body(serve: Serve) -> None:
    server = serve({"a.test": {"/": Resource(b"12345")}})
    response = fetch(server, "a.test", method="HEAD")
    assert response.status == 200
    assert response.headers["Content-Length"] == "5"
    assert response.headers["Content-Type"].startswith("text/html")
    assert response.data == b""
    assert server.hits_for("a.test")[0].method == "HEAD"


def test_headers_empty_means_no_content_type(serve: Serve) -> None:
    server = serve({"a.test": {"/raw": Resource(b"<p>raw</p>", headers=())}})
    response = fetch(server, "a.test", "/raw")
    assert "Content-Type" not in response.headers
    assert response.data == b"<p>raw</p>"


def test_callable_resource_sees_the_request(serve: Serve) -> None:
    seen: list[Request] = []

    def cookie_echo(request: Request) -> Resource:
        seen.append(request)
        if request.header("Cookie") != "session=1":
            return Resource(b"login", headers=(*TEXT, ("Set-Cookie", "session=1; Path=/")))
        if len(seen) < 3:
            return Resource(b"busy", 503, (*TEXT, ("Retry-After", "1")))
        return Resource(f"hello {request.header('user-agent')}".encode(), headers=TEXT)

    server = serve({"a.test": {"/me?x=1": cookie_echo}})
    first = fetch(server, "a.test", "/me?x=1")
    assert first.headers["Set-Cookie"] == "session=1; Path=/"
    cookie = {"Cookie": "session=1", "User-Agent": "rccrawler-test"}
    busy = fetch(server, "a.test", "/me?x=1", cookie)
    assert (busy.status, busy.headers["Retry-After"]) == (503, "1")
    assert fetch(server, "a.test", "/me?x=1", cookie).data == b"hello rccrawler-test"
    assert [r.path for r in seen] == ["/me?x=1"] * 3
    assert seen[0].host == "a.test"
    assert seen[0].method == "GET"
    assert seen[0].at <= seen[1].at <= seen[2].at


def test_failing_responder_answers_500_and_is_recorded(serve: Serve) -> None:
    def broken(request: Request) -> Resource:
        raise ValueError("boom")

    server = serve({"a.test": {"/": broken}})
    assert fetch(server, "a.test").status == 500
    assert [type(e) for e in server.errors] == [ValueError]


def test_gzip_resource_decodes_with_urllib3(serve: Serve) -> None:
    body = b"<p>" + b"compressible text " * 500 + b"</p>"
    server = serve({"a.test": {"/": Resource(body, gzip=True)}})
    zipped = fetch(server, "a.test", headers={"Accept-Encoding": "gzip, deflate"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert int(zipped.headers["Content-Length"]) < len(body) // 10
    assert zipped.data == body
    plain = fetch(server, "a.test", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers
    assert plain.data == body
    refused = fetch(server, "a.test", headers={"Accept-Encoding": "gzip;q=0"})
    assert "Content-Encoding" not in refused.headers


def test_broken_gzip_fails_to_decode(serve: Serve) -> None:
    server = serve({"a.test": {"/": Resource(b"whatever", broken_gzip=True)}})
    with pytest.raises(urllib3.exceptions.DecodeError):
        fetch(server, "a.test")
    raw = fetch(server, "a.test", decode_content=False)
    assert raw.headers["Content-Encoding"] == "gzip"
    assert raw.data.startswith(b"\x1f\x8b")


def test_slow_body_arrives_whole(serve: Serve) -> None:
    body = bytes(range(256)) * 16  # 4 KiB: four chunks, three sleeps
    server = serve({"a.test": {"/": Resource(body, chunk_delay=0.05)}})
    started = time.monotonic()
    assert fetch(server, "a.test").data == body
    assert time.monotonic() - started >= 0.15


def test_endless_body_stops_when_the_client_leaves(serve: Serve) -> None:
    server = serve(
        {"a.test": {"/stream": Resource(b"<p>more</p>\n", endless=True), "/": Resource(b"ok")}}
    )
    port = int(server.resolve["a.test:80"].split(":")[1])
    # Each read has a 5 s timeout: a stalled stream fails the test instead of hanging it.
    with urllib3.HTTPConnectionPool("127.0.0.1", port, retries=False, timeout=5) as pool:
        response = pool.request("GET", "/stream", headers={"Host": "a.test"}, preload_content=False)
        assert response.headers["Transfer-Encoding"] == "chunked"
        received = 0
        while received < 1 << 20:
            received += len(response.read(64 * 1024))
        response.close()
    # The handler thread notices the closed socket and ends, instead of leaking.
    assert wait_until(lambda: server.in_flight("a.test") == 0, timeout=5)
    assert fetch(server, "a.test").data == b"ok"


def test_absolute_form_request_as_sent_to_a_proxy(serve: Serve) -> None:
    server = serve({"a.test": {"/p?q=1": Resource(b"via proxy")}})
    port = int(server.resolve["a.test:80"].split(":")[1])
    with urllib3.ProxyManager(f"http://127.0.0.1:{port}", retries=False) as proxy:
        assert proxy.request("GET", "http://a.test/p?q=1").data == b"via proxy"
    assert server.paths_for("a.test") == ["/p?q=1"]


def test_shutdown_is_bounded_with_open_and_sleeping_connections() -> None:
    sites = {"a.test": {"/": Resource(b"ok"), "/sleepy": Resource(b"late", delay=30)}}
    before = set(threading.enumerate())
    context = serve_sites(sites)
    server = context.__enter__()
    port = server.server_port
    idle = socket.create_connection(("127.0.0.1", port))
    sleepy = socket.create_connection(("127.0.0.1", port))
    try:
        sleepy.sendall(b"GET /sleepy HTTP/1.1\r\nHost: a.test\r\n\r\n")
        assert wait_until(lambda: server.in_flight("a.test") == 1, timeout=5)
        # The shutdown runs in a thread of its own, so a hang fails the join's deadline
        # instead of the test run (the sleeping answer alone would take 30 s).
        closing = threading.Thread(target=context.__exit__, args=(None, None, None), daemon=True)
        closing.start()
        closing.join(timeout=3)
        assert not closing.is_alive(), "shutdown waited for the sleeping answer"
        assert not [t for t in set(threading.enumerate()) - before - {closing} if t.is_alive()]
    finally:
        idle.close()
        sleepy.close()


@pytest.mark.skipif(not has_openssl(), reason="needs the openssl command")
def test_https_with_a_self_made_certificate(serve: Serve, tmp_path: Path) -> None:
    context, cafile = make_tls_context(tmp_path, ("a.test", "sub.a.test"))
    server = serve({"a.test": {"/": Resource(b"secure")}}, ssl_context=context)
    assert server.resolve == {"a.test:443": f"127.0.0.1:{server.server_port}"}
    assert server.url("a.test") == "https://a.test/"
    assert fetch(server, "a.test", ca_certs=cafile).data == b"secure"


# -- the demo site ---------------------------------------------------------------


def _normalize(url: str) -> tuple[str, str] | None:
    """A small stand-in for SPEC §6: (host, path?query), or None for other schemes."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or not parts.hostname:
        return None
    path = re.sub("/{2,}", "/", parts.path) or "/"
    query = urlencode(sorted(parse_qsl(parts.query)))
    return parts.hostname, path + (f"?{query}" if query else "")


def _crawl_demo(site: Mapping[str, Resource]) -> dict[str, int]:
    """Breadth-first over the site dict (no server): normalized path → level of each node."""
    levels: dict[str, int] = {}
    seen = {"/"}
    queue = deque([("/", 0)])
    while queue:
        path, level = queue.popleft()
        for _ in range(11):  # follow redirects, at most 10
            res = site.get(path)
            if res is None or res.status not in (301, 302):
                break
            target = _normalize(urljoin(f"http://{DEMO_HOST}{path}", dict(res.headers)["Location"]))
            if target is None or target[0] != DEMO_HOST or target[1].startswith("/private/"):
                res = None
                break
            path = target[1]
        if res is None or res.status != 200 or path in levels:
            continue
        if not dict(res.headers).get("Content-Type", "").startswith("text/html"):
            continue
        levels[path] = level
        for href in re.findall(r'href="([^"]*)"', res.body.decode()):
            found = _normalize(urljoin(f"http://{DEMO_HOST}{path}", html.unescape(href)))
            if found is None or found[0] != DEMO_HOST or found[1].startswith("/private/"):
                continue
            if found[1] not in seen:
                seen.add(found[1])
                queue.append((found[1], level + 1))
    return levels


def test_demo_site_invariants() -> None:
    sites, facts = demo_sites(), demo_facts()
    demo = sites[DEMO_HOST]
    assert {DEMO_HOST, BLOG_HOST, EXTERNAL_HOST} <= set(sites)
    html_pages = [r for r in demo.values() if dict(r.headers).get("Content-Type", "") == HTML_CT]
    assert 180 <= len(html_pages) <= 240
    assert demo["/robots.txt"].body == b"User-agent: *\nDisallow: /private/\n"
    assert b'href="/private/"' in demo["/"].body
    assert f'href="http://{BLOG_HOST}/"'.encode() in demo["/"].body
    assert f'href="http://{EXTERNAL_HOST}/"'.encode() in demo["/"].body
    for scheme_link in facts.ignored_schemes:
        assert f'href="{scheme_link}"'.encode() in demo["/"].body
    assert len({demo[p].body for p in facts.duplicates}) == 1
    # Repeated bodies: 3 guide copies + 2 other spellings of it, 3 spellings of /search.
    assert len({r.body for r in html_pages}) == len(html_pages) - 4 - 2
    loop_a, loop_b = facts.redirect_loop
    assert dict(demo[loop_a].headers)["Location"] == loop_b
    assert dict(demo[loop_b].headers)["Location"] == loop_a
    assert facts.broken not in demo
    assert demo[facts.no_content_type].headers == ()
    assert dict(demo["/files/manual.pdf"].headers)["Content-Type"] == "application/pdf"
    # Built the same way every time.
    assert {p: r.body for p, r in demo_sites()[DEMO_HOST].items()} == {
        p: r.body for p, r in demo.items()
    }


def test_demo_facts_match_a_breadth_first_walk() -> None:
    facts = demo_facts()
    levels = _crawl_demo(demo_sites()[DEMO_HOST])
    assert set(levels) == facts.nodes
    assert max(levels.values()) == facts.max_level >= 4
    assert facts.redirects["/go/start"] in levels
    assert not set(facts.never_found) & set(levels)
    assert not set(facts.not_html) & set(levels)


def test_demo_site_through_the_server(serve: Serve) -> None:
    server = serve(demo_sites())
    assert fetch(server, DEMO_HOST, "/robots.txt").data.startswith(b"User-agent: *")
    assert fetch(server, BLOG_HOST).status == 200
    assert fetch(server, DEMO_HOST, "/missing.html").status == 404
    moved = fetch(server, DEMO_HOST, "/go/start")
    assert (moved.status, moved.headers["Location"]) == (302, "/go/middle")
    for variant in ("/search?b=2&a=1", "/search?a=1&b=2", "//guide.html", "/guide.html?"):
        assert fetch(server, DEMO_HOST, variant).status == 200


# -- generated sites -------------------------------------------------------------


def test_generated_site_is_lazy_and_deterministic() -> None:
    # Lazy: making the site and one page allocates next to nothing (the 100,000 pages
    # built would take about 100 MB), whatever the machine's speed.
    tracemalloc.start()
    try:
        site = generated_site("big.test", 100_000, extra_unvisited_links=5)
        page = site[page_path(99_999)]
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert len(site) == 100_000
    assert page_path(99_999) in site
    assert page_path(100_000) not in site
    assert "/p/099.html" not in site
    with pytest.raises(KeyError):
        site["/x/1/0.html"]
    assert (
        page.body
        == generated_site("big.test", 100_000, extra_unvisited_links=5)[page_path(99_999)].body
    )
    assert page.body != generated_site("big.test", 100_000, seed=1)[page_path(99_999)].body
    assert b'href="/x/99999/4.html"' in page.body
    assert next(iter(site)) == "/"


def test_generated_site_links_form_a_tree() -> None:
    site = generated_site("g.test", 111, fanout=10)
    assert site.links(0)[:10] == [page_path(i) for i in range(1, 11)]
    assert site.links(10)[:1] == [page_path(101)]
    assert page_level(0) == 0 and page_level(10) == 1 and page_level(110) == 2
    bodies = {site[path].body for path in site}
    assert len(bodies) == 111
    for path in site:
        for href in re.findall(rb'href="([^"]*)"', site[path].body):
            assert href.decode() in site


def test_generated_site_served(serve: Serve) -> None:
    server = serve({"g.test": generated_site("g.test", 50, extra_unvisited_links=1)})
    assert b"Page 7 of g.test" in fetch(server, "g.test", page_path(7)).data
    assert fetch(server, "g.test", "/x/7/0.html").status == 404
