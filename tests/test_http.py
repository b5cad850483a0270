"""The HTTP layer of a polite, smart robot (issue 4), proven by what the server or proxy received.

Headers, a forward proxy (HTTP and CONNECT), RFC 6265 cookies kept across runs and kill -9,
redirect loops, compression, charsets, Retry-After, retries with backoff, auto-throttle,
TLS verified and not, and body limits. Everything runs on loopback.
"""

from __future__ import annotations

import contextlib
import email.utils
import itertools
import json
import os
import re
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import brotli
import pytest
from crawling import CrawlResult, CrawlRunner
from proxy import VIA, ForwardProxy, serve_proxy
from rawtcp import tcp_server
from webserver import (
    HTML,
    TEXT,
    Request,
    Resource,
    has_openssl,
    make_tls_context,
    redirect,
    serving,
)

from rccrawler.config import CrawlSettings
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.exceptions import FetchError
from rccrawler.manager import ApplicationManager, load_settings
from rccrawler.records import DownloadResult, FoundLink, HostData, PageData
from rccrawler.threads.parsing import ParsingThread
from rccrawler.web.fetch import Fetcher

TESTS = Path(__file__).parent
UA = "rccrawler-test/4.0 (+http://bot.test/about)"
FROM = "crawler-admin@bot.test"
needs_openssl = pytest.mark.skipif(not has_openssl(), reason="needs the openssl command")


# -- helpers --------------------------------------------------------------------------------


def html(*hrefs: str, title: str = "", text: str = "", headers=HTML) -> Resource:
    links = "".join(f'<a href="{href}">{href}</a> ' for href in hrefs)
    body = f"<html><head><title>{title}</title></head><body>{text} {links}</body></html>"
    return Resource(body.encode(), headers=headers)


def setting_cookies(resource: Resource, *cookies: str) -> Resource:
    """``resource`` with one Set-Cookie header per cookie."""
    return Resource(
        resource.body, headers=(*resource.headers, *(("Set-Cookie", c) for c in cookies))
    )


def cookie_names(value: str) -> set[str]:
    """The cookie names of a Cookie header ("a=1; b=2" → {"a", "b"})."""
    return {part.split("=", 1)[0].strip() for part in value.split(";") if part.strip()}


def pages_of(result: CrawlResult) -> dict[str, PageData]:
    """Every page the crawl's state holds, by URL as requested last."""
    data = result.manager.data
    data.open()
    try:
        return {page.url: page for host in data.hosts() for page in data.iter_pages(host.host)}
    finally:
        data.close()


def crawl(
    crawler: CrawlRunner,
    sites: list[str],
    resolve: dict[str, str],
    *,
    prepare: Callable[[ApplicationManager], None] | None = None,
    **options: Any,
) -> CrawlResult:
    """CrawlRunner.run, with a hook to adjust the manager before it runs."""
    path = crawler.settings_file(sites, resolve, **options)
    manager_cls, settings = load_settings(path)
    manager = manager_cls(settings)
    if prepare is not None:
        prepare(manager)
    finished = manager.run()
    report_path = settings.output_dir / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return CrawlResult(finished, settings.output_dir, report, manager)


class TextRecorder(ParsingThread):
    """Keeps each parsed page's title and text on the crawl's context (``context.texts``)."""

    full_parse = True

    def process_page(self, page, body, parsed) -> None:
        self.context.texts[page.url] = (parsed.title, parsed.text)  # type: ignore[attr-defined]


def record_texts(manager: ApplicationManager) -> None:
    manager.context.texts = {}  # type: ignore[attr-defined]
    manager.parsing_thread_cls = TextRecorder


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory):
    """A server TLS context with a self-signed certificate for s.test, and the cert file."""
    if not has_openssl():
        pytest.skip("needs the openssl command")
    return make_tls_context(tmp_path_factory.mktemp("tls"), ("s.test",))


@pytest.fixture
def proxy() -> Iterator[Callable[..., ForwardProxy]]:
    """proxy(resolve, credentials=None) starts a forward proxy, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda resolve, **kw: stack.enter_context(serve_proxy(resolve, **kw))


# -- 1. who we are and where we came from ---------------------------------------------------


def test_every_request_says_who_we_are_and_where_the_link_was(serve, crawler):
    server = serve({"a.test": {
        "/": html("/a", "/r"),
        "/a": html("/b"),
        "/b": html(),
        "/r": redirect("/final"),
        "/final": html(),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, crawl={"user_agent": UA, "from": FROM})
    assert result.finished
    hits = {hit.path: hit.headers for hit in server.hits_for("a.test")}
    assert set(hits) == {"/robots.txt", "/", "/a", "/b", "/r", "/final"}
    for path, headers in hits.items():
        assert headers["user-agent"] == UA, path
        assert headers["from"] == FROM, path
        assert set(headers["accept-encoding"].replace(" ", "").split(",")) >= {"gzip", "deflate"}
    assert "referer" not in hits["/robots.txt"]
    assert "referer" not in hits["/"]  # a start page was found on no page
    assert hits["/a"]["referer"] == "http://a.test/"
    assert hits["/b"]["referer"] == "http://a.test/a"
    # A redirect keeps the page where the link was found.
    assert hits["/r"]["referer"] == hits["/final"]["referer"] == "http://a.test/"


# -- 2. proxy -------------------------------------------------------------------------------


def test_proxy_forwards_every_http_request_with_its_credentials(serve, crawler, proxy):
    server = serve({"a.test": {"/": html("/a", "/b"), "/a": html("/b"), "/b": html()}})
    via = proxy(server.resolve, credentials=("bot", "p@ss word:1"))
    # No resolve: a.test is not in DNS, so the proxy is the only way to it.
    result = crawler.run(["a.test"], {}, crawl={"proxy": via.url, "user_agent": UA})
    assert result.finished
    assert result.graph("a.test").urls == {"http://a.test/", "http://a.test/a", "http://a.test/b"}
    hits = via.hits_copy()
    assert sorted(hit.target for hit in hits) == sorted(
        f"http://a.test{path}" for path in ("/robots.txt", "/", "/a", "/b")
    )
    assert all(hit.method == "GET" and hit.authorized for hit in hits)
    assert all(hit.headers["user-agent"] == UA for hit in hits)
    origin = server.hits_for("a.test")
    assert len(origin) == 4
    assert all(hit.headers.get("via") == VIA for hit in origin)


@needs_openssl
def test_proxy_tunnels_https_with_connect(serve, crawler, proxy, tls):
    context, _cafile = tls
    server = serve({"s.test": {"/": html("/a"), "/a": html()}}, ssl_context=context)
    via = proxy(server.resolve, credentials=("bot", "secret"))
    result = crawler.run(
        ["https://s.test/"], {}, crawl={"proxy": via.url, "verify_tls": False, "user_agent": UA}
    )
    assert result.finished
    assert result.graph("s.test").urls == {"https://s.test/", "https://s.test/a"}
    hits = via.hits_copy()
    assert hits and all(h.method == "CONNECT" and h.target == "s.test:443" for h in hits)
    assert all(hit.authorized for hit in hits)
    origin = server.hits_for("s.test")
    assert sorted(hit.path for hit in origin) == ["/", "/a", "/robots.txt"]
    # Inside the tunnel the proxy saw nothing: no Via, and its credentials stayed outside.
    for hit in origin:
        assert hit.headers["user-agent"] == UA
        assert "via" not in hit.headers and "proxy-authorization" not in hit.headers


def test_wrong_proxy_credentials_are_a_page_error(serve, crawler, proxy):
    server = serve({"a.test": {"/": html("/a"), "/a": html()}})
    via = proxy(server.resolve, credentials=("bot", "secret"))
    wrong = via.url.replace("secret", "guess")
    result = crawler.run(["a.test"], {}, crawl={"proxy": wrong})
    assert result.finished
    assert server.hits_for("a.test") == []
    assert result.report["sites"]["a.test"]["errors_by_kind"] == {"http_407": 1}
    assert not any(hit.authorized for hit in via.hits_copy())


# -- 3. cookies -----------------------------------------------------------------------------


def test_cookies_are_sent_back_only_where_rfc6265_allows(serve, crawler):
    set_cookies = (
        "host=1",                                          # host-only
        "dom=1; Domain=a.test",                            # a.test and its subdomains
        "priv=1; Path=/private",                           # /private and below only
        "sec=1; Secure",                                   # https only
        "gone=1",                                          # removed by /del
        "old=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT",    # expired: never stored
        "evil=1; Domain=other.test",                       # another site's domain: rejected
        "tld=1; Domain=test",                              # a top-level domain: rejected
    )  # fmt: skip
    server = serve({
        "a.test": {
            "/": setting_cookies(html("/private", "/private/x", "/privateer", "/del"),
                                 *set_cookies),
            "/private": html(), "/private/x": html(), "/privateer": html(),
            "/del": setting_cookies(html("/after"), "gone=; Max-Age=0"),
            "/after": html(),
        },
        "sub.a.test": {"/": html()},
    })  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    assert result.finished
    sent = {
        hit.path: cookie_names(hit.headers.get("cookie", "")) for hit in server.hits_for("a.test")
    }
    assert sent["/robots.txt"] == sent["/"] == set()
    # "gone" may or may not be deleted yet when a level-1 page is requested.
    assert sent["/private"] - {"gone"} == {"host", "dom", "priv"}
    assert sent["/private/x"] - {"gone"} == {"host", "dom", "priv"}
    assert sent["/privateer"] - {"gone"} == {"host", "dom"}
    assert sent["/del"] - {"gone"} == {"host", "dom"}
    assert sent["/after"] == {"host", "dom"}  # found on /del, so requested after the removal

    # A second run on the same state loads the saved jar: the subdomain gets only the
    # Domain cookie, and what was removed or expired stays away.
    result = crawler.run(["a.test", "sub.a.test"], server.resolve)
    assert result.finished
    sub = server.hits_for("sub.a.test")
    assert sorted(hit.path for hit in sub) == ["/", "/robots.txt"]
    assert all(cookie_names(hit.headers.get("cookie", "")) == {"dom"} for hit in sub)


@needs_openssl
def test_secure_cookies_and_referers_stay_on_https(serve, crawler, tls):
    context, _cafile = tls
    secure = serve({"s.test": {
        "/": setting_cookies(html("http://s.test/plain", "/again"), "sec=1; Secure", "all=1"),
        "/again": html(),
    }}, ssl_context=context)  # fmt: skip
    plain = serve({"s.test": {"/plain": html()}})
    result = crawler.run(
        ["https://s.test/"], {**secure.resolve, **plain.resolve}, crawl={"verify_tls": False}
    )
    assert result.finished
    again = next(hit for hit in secure.hits_for("s.test") if hit.path == "/again")
    assert cookie_names(again.headers["cookie"]) == {"sec", "all"}
    assert again.headers["referer"] == "https://s.test/"
    [insecure] = plain.hits_for("s.test")
    assert cookie_names(insecure.headers["cookie"]) == {"all"}
    assert "referer" not in insecure.headers  # RFC 9110 §10.1.3: no Referer from https to http


def idle_connections(client: Fetcher) -> list[Any]:
    """The connections ``client`` keeps open between requests, of every host's pool."""
    pools = client.pool.pools  # urllib3's container: keys(), and no iteration
    return [conn for key in pools.keys() for conn in list(pools[key].pool.queue) if conn]  # noqa: SIM118


@needs_openssl
def test_a_request_counts_as_sent_once_it_goes_out(serve, tls):
    """A host's crawl delay counts from its last request's sending (on_send, which
    calls mark_request_sent). Called before the connection was made, a host far away
    (its TLS handshake 0.3 s) had the page that reused robots.txt's connection arrive
    0.3 s less than the delay after robots.txt, which had waited for the handshake."""
    context, _cafile = tls
    server = serve({"s.test": {"/": html(), "/a": html()}}, ssl_context=context,
                   handshake_delay=0.3)  # fmt: skip
    client = Fetcher(CrawlSettings(resolve=server.resolve, verify_tls=False, cookies=False))
    sent: list[float] = []
    for path in ("/", "/a"):  # the second reuses the first's connection
        response = client.get(
            f"https://s.test{path}", on_send=lambda: sent.append(time.monotonic())
        )
        assert response.status == 200
    [handshake] = server.handshakes
    assert len(sent) == 2 and handshake <= sent[0] <= sent[1]


@needs_openssl
def test_each_host_s_connection_is_kept_however_many_hosts(serve, crawler, tls):
    """A crawl asks many hosts in turn, each again before long. urllib3 kept the
    connections of the 64 hosts asked last: 200 polite HTTPS hosts had 1,381 TLS
    handshakes for 1,400 requests (each a few round trips to a host far away), and the
    crawl took 13 times its politeness limit on loopback. Now one connection a host."""
    context, _cafile = tls
    hosts = [f"h{n}.test" for n in range(100)]
    server = serve({host: {"/": html("/a"), "/a": html()} for host in hosts},
                   ssl_context=context)  # fmt: skip
    result = crawler.run([f"https://{host}/" for host in hosts], server.resolve,
                         crawl={"verify_tls": False})  # fmt: skip
    assert result.finished
    assert len(server.hits) == 3 * len(hosts)  # robots.txt, / and /a of each
    assert len(server.handshakes) == len(hosts)


@needs_openssl
def test_every_tls_connection_shares_one_context(serve, tls):
    """urllib3 made a TLS context for each connection and loaded the system's
    certificates into it: 25 ms of CPU a connection, and about a megabyte kept by each
    open one (300 polite HTTPS hosts: 14.8 CPU s and 338 MB, with one context 8.9 s
    and 97 MB)."""
    context, _cafile = tls
    hosts = ("a.test", "b.test")
    server = serve({host: {"/": html()} for host in hosts}, ssl_context=context)
    client = Fetcher(CrawlSettings(resolve=server.resolve, verify_tls=False, cookies=False))
    for host in hosts:
        assert client.get(f"https://{host}/").status == 200
    kept = idle_connections(client)
    assert len(kept) == len(hosts)  # each host's connection, open and idle
    assert len({id(conn.sock.context) for conn in kept}) == 1


@needs_openssl
def test_the_connections_of_hosts_the_crawl_is_done_with_are_closed(serve, tls):
    """An idle TLS connection holds about 90 KB; kept until evicted, a long crawl would
    hold one for every site it had crawled: the manager has the fetcher forget the
    hosts of the sites that ended."""
    context, _cafile = tls
    hosts = ("a.test", "b.test")
    server = serve({host: {"/": html()} for host in hosts}, ssl_context=context)
    client = Fetcher(CrawlSettings(resolve=server.resolve, verify_tls=False, cookies=False))

    def kept() -> list[str]:
        return sorted(str(conn.server_hostname) for conn in idle_connections(client))

    for host in hosts:
        assert client.get(f"https://{host}/").status == 200
    assert kept() == ["a.test", "b.test"]
    client.forget_hosts(["a.test"])
    assert kept() == ["b.test"]
    assert client.get("https://a.test/").status == 200  # connects anew
    assert len(server.handshakes) == 3 and kept() == ["a.test", "b.test"]


@contextlib.contextmanager
def keep_alive_server(
    close_unanswered: Callable[[int, int], bool], tls: ssl.SSLContext | None = None
) -> Iterator[tuple[Fetcher, list[tuple[int, int, str]]]]:
    """A raw HTTP/1.1 server that keeps connections alive (over TLS with ``tls``), and a
    client of it (s.test): the ``n``-th request of connection ``c`` (both from 1) is
    answered, unless ``close_unanswered(c, n)``: the connection is then closed with no
    answer, as a server does whose keep-alive timeout ran out as the request came.
    Yields the client and the server's log, (connection, request, "answered" or
    "closed")."""
    log: list[tuple[int, int, str]] = []
    accepted = itertools.count(1)

    def talk(conn: socket.socket, number: int, stop: threading.Event) -> None:
        buffer = b""
        for n in itertools.count(1):
            while b"\r\n\r\n" not in buffer and not stop.is_set():
                chunk = conn.recv(4096)
                if not chunk:
                    return  # the client closed it
                buffer += chunk
            if stop.is_set():
                return  # the test is over
            buffer = buffer.split(b"\r\n\r\n", 1)[1]
            if close_unanswered(number, n):
                log.append((number, n, "closed"))
                return
            log.append((number, n, "answered"))  # before the client can read it
            body = f"connection {number} request {n}".encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        number = next(accepted)
        with contextlib.suppress(OSError), conn:
            conn.settimeout(5)
            if tls is None:
                talk(conn, number, stop)
                return
            with tls.wrap_socket(conn, server_side=True) as wrapped:
                talk(wrapped, number, stop)

    with tcp_server(answer) as port:
        where = {f"s.test:{443 if tls else 80}": f"127.0.0.1:{port}"}
        client = Fetcher(CrawlSettings(resolve=where, verify_tls=False, cookies=False))
        try:
            yield client, log
        finally:
            client.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_request_on_a_kept_alive_connection_its_server_closed_is_sent_again(scheme, request):
    """A server closes an idle connection as its keep-alive timeout runs out; a request
    sent as that close is on its way finds the connection closed, unanswered (at a crawl
    delay near the timeout, Apache's 5 s, that is a request in many). It never reached
    the site: it is sent again at once on a new connection, as curl and browsers do,
    where it had failed the page as a connection error."""
    context = request.getfixturevalue("tls")[0] if scheme == "https" else None
    with keep_alive_server(lambda c, n: (c, n) == (1, 2), context) as (client, log):
        assert client.get(f"{scheme}://s.test/a").body == b"connection 1 request 1"
        sent: list[str] = []
        again = client.get(f"{scheme}://s.test/b", on_send=lambda: sent.append("sent"))
        assert again.status == 200 and again.body == b"connection 2 request 1"
        assert log == [(1, 1, "answered"), (1, 2, "closed"), (2, 1, "answered")]
        assert sent == ["sent"]  # the host's delay counts from the first sending


def test_a_new_connection_closed_unanswered_is_not_sent_again():
    """A connection closed before it answered its first request is the server's
    answer, not a race: the request fails, once, and the site sees it once."""
    with keep_alive_server(lambda connection, request: True) as (client, log):
        with pytest.raises(FetchError) as failed:
            client.get("http://s.test/")
        assert failed.value.kind == "connection"
        assert log == [(1, 1, "closed")]


def test_cookies_off_sends_none(serve, crawler):
    server = serve({"a.test": {
        "/": setting_cookies(html("/a"), "id=1"), "/a": html(),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, crawl={"cookies": False})
    assert result.finished
    assert all("cookie" not in hit.headers for hit in server.hits_for("a.test"))
    assert not (crawler.root / "state" / "cookies.txt").exists()


def read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def spawn(config: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-m", "rccrawler", "--config", str(config), "--no-tui", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_cookies_survive_kill_9(serve, crawler):
    """Cookies are saved as they change, not only at the end of a run: the first change at
    once, later ones within ``cookie_save_interval``."""
    jar = crawler.root / "state" / "cookies.txt"
    stuck = threading.Event()
    first_slow = threading.Event()
    saved_before_kill: list[str] = []

    def slow(request: Request) -> Resource:
        if not first_slow.is_set():
            # /slow was found on /next, so both cookies are in the jar by now.
            deadline = time.monotonic() + 10
            while "step=" not in (text := read(jar)) and time.monotonic() < deadline:
                time.sleep(0.02)
            saved_before_kill.append(text)
            first_slow.set()
            stuck.wait(30)  # the crawler is killed while waiting for this answer
        return html()

    server = serve({"a.test": {
        "/": setting_cookies(html("/next"), "sid=42; Max-Age=3600"),
        "/next": setting_cookies(html("/slow"), "step=2"),
        "/slow": slow,
    }})  # fmt: skip
    proc = spawn(crawler.settings_file(["a.test"], server.resolve))
    try:
        assert first_slow.wait(60), proc.communicate()[1] if proc.poll() is not None else ""
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        stuck.set()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    assert "sid=" in saved_before_kill[0] and "step=" in saved_before_kill[0]
    server.reset()
    result = crawler.run(["a.test"], server.resolve)  # resume: /slow was in flight
    assert result.finished
    [again] = server.hits_for("a.test")
    assert again.path == "/slow" and cookie_names(again.headers["cookie"]) == {"sid", "step"}


# -- 4. redirects ---------------------------------------------------------------------------


def test_redirect_loops_and_long_chains_end_in_an_error(serve, crawler):
    def endless(request: Request) -> Resource:
        n = int(request.path.rpartition("=")[2])
        return redirect(f"/endless?n={n + 1}", 302)

    site: dict[str, Any] = {
        "/": html("/self", "/q?n=1", "/Case", "/endless?n=0", "/ten0", "/eleven0", "/x", "/y"),
        "/self": redirect("/self"),
        "/q?n=1": redirect("/q?n=2"),  # only the query changes
        "/q?n=2": redirect("/q?n=1"),
        "/Case": redirect("/case"),  # only the case changes
        "/case": redirect("/Case"),
        "/x": redirect("/y"),  # two pages that redirect to each other
        "/y": redirect("/x"),
        "/ten10": html(text="ten"),
        "/eleven11": html(text="eleven"),
    }
    for i in range(10):
        site[f"/ten{i}"] = redirect(f"/ten{i + 1}", 307)
    for i in range(11):
        site[f"/eleven{i}"] = redirect(f"/eleven{i + 1}", 308)
    for n in range(100):
        site[f"/endless?n={n}"] = endless
    server = serve({"a.test": site})
    result = crawler.run(["a.test"], server.resolve, crawl={"max_redirects": 10})
    assert result.finished
    paths = server.paths_for("a.test")
    assert sorted(p for p in paths if p.startswith("/q")) == ["/q?n=1", "/q?n=2"]
    assert paths.count("/self") == 1 and paths.count("/Case") == paths.count("/case") == 1
    # A chain of 10 redirects is followed; an 11th redirect is not.
    assert "/ten10" in paths and "/eleven11" not in paths
    assert len([p for p in paths if p.startswith("/endless")]) == 11
    graph = result.graph("a.test")
    assert graph.urls == {"http://a.test/", "http://a.test/ten10"}
    errors = result.report["sites"]["a.test"]["errors_by_kind"]
    # self, query, case, endless, eleven and one of x/y (the other is its alias).
    assert errors == {"redirect_loop": 6}
    # A page that ends in a loop keeps the URL it was redirected from last.
    pages = pages_of(result)
    loop = {url for url, page in pages.items() if page.error_code == "redirect_loop"}
    expected = {"/self", "/q?n=2", "/case", "/endless?n=10", "/eleven10"}
    assert {f"http://a.test{path}" for path in expected} <= loop
    assert len(loop & {"http://a.test/x", "http://a.test/y"}) == 1


# -- 5. encodings ---------------------------------------------------------------------------


def test_compressed_bodies_are_decoded_and_a_broken_one_is_a_page_error(serve, crawler):
    def encoded(coding: str, data: bytes) -> Resource:
        return Resource(data, headers=(*HTML, ("Content-Encoding", coding)))

    def body(name: str) -> bytes:
        return html(f"/from-{name}", text=f"{name} " * 200).body

    raw_deflate = zlib.compressobj(wbits=-15)
    server = serve({"a.test": {
        "/": html("/gzip", "/deflate", "/raw-deflate", "/br", "/broken"),
        "/gzip": Resource(body("gzip"), gzip=True),
        "/deflate": encoded("deflate", zlib.compress(body("deflate"))),
        "/raw-deflate": encoded("deflate", raw_deflate.compress(body("raw")) + raw_deflate.flush()),
        "/br": encoded("br", brotli.compress(body("br"))),
        "/broken": Resource(b"", broken_gzip=True),
        **{f"/from-{name}": html(text=name) for name in ("gzip", "deflate", "raw", "br")},
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    assert result.finished
    hits = {hit.path: hit for hit in server.hits_for("a.test")}
    assert {"/from-gzip", "/from-deflate", "/from-raw", "/from-br"} <= set(hits)
    assert hits["/br"].headers["accept-encoding"] == "gzip, deflate, br"
    report = result.report["sites"]["a.test"]
    assert report["errors_by_kind"] == {"decode": 1}
    pages = pages_of(result)
    assert pages["http://a.test/broken"].error_code == "decode"
    assert len(result.graph("a.test").urls) == 9
    # Bodies are kept decoded: the size that counts is the decoded one.
    assert pages["http://a.test/gzip"].bytes == len(body("gzip"))
    assert pages["http://a.test/br"].bytes == len(body("br"))


CHARSET_PAGES = {
    # path: (encoding used for the bytes, how it is declared, title, link path)
    "/cp1251": ("cp1251", "header", "Привет, мир", "/страница"),
    "/gb2312": ("gb2312", "meta", "中文网页", "/页面"),
    "/sjis": ("shift_jis", "http-equiv", "日本語のページ", "/ページ"),
    "/latin": ("cp1252", "header-latin1", "Café – 5 €", "/café"),
    "/bom8": ("utf-8-sig", "bom, header says latin-1", "Ünïcödé ✓", "/ünï"),
    "/bom16": ("utf-16", "bom", "Ελληνικά", "/σελίδα"),
}


def charset_page(encoding: str, how: str, title: str, link: str) -> Resource:
    meta = ""
    content_type = "text/html"
    if how == "header":
        content_type = f"text/html; charset={encoding}"
    elif how == "header-latin1" or how.startswith("bom,"):
        content_type = "text/html; charset=iso-8859-1"
    elif how == "meta":
        meta = f'<meta charset="{encoding}">'
    elif how == "http-equiv":
        meta = f'<meta http-equiv="Content-Type" content="text/html; charset={encoding}">'
    text = (
        f"<html><head>{meta}<title>{title}</title></head>"
        f'<body><p>{title}</p><a href="{link}">{title}</a></body></html>'
    )
    return Resource(text.encode(encoding), headers=(("Content-Type", content_type),))


def test_charsets_give_the_right_text_and_links(serve, crawler):
    from urllib.parse import quote

    site: dict[str, Resource] = {"/": html(*CHARSET_PAGES)}
    for path, spec in CHARSET_PAGES.items():
        site[path] = charset_page(*spec)
        site[quote(spec[3])] = html()  # the server sees the link UTF-8 percent-encoded
    server = serve({"a.test": site})
    result = crawl(crawler, ["a.test"], server.resolve, prepare=record_texts)
    assert result.finished
    paths = set(server.paths_for("a.test"))
    texts = result.manager.context.texts  # type: ignore[attr-defined]
    for path, (_encoding, how, title, link) in CHARSET_PAGES.items():
        assert texts[f"http://a.test{path}"] == (title, f"{title} {title}"), how
        assert quote(link) in paths, (path, how)
    assert result.report["sites"]["a.test"]["errors"] == 0


# -- 6. rate limits and faults --------------------------------------------------------------


def test_retry_after_holds_back_the_whole_host(serve, crawler):
    wall: dict[str, list[float]] = {"a": [], "b": []}
    date = {}

    def busy_seconds(request: Request) -> Resource:
        wall["a"].append(time.time())
        if len(wall["a"]) == 1:
            return Resource(b"busy", 503, (*TEXT, ("Retry-After", "1")))
        return html()

    def busy_date(request: Request) -> Resource:
        wall["b"].append(time.time())
        if len(wall["b"]) == 1:
            date["at"] = email.utils.formatdate(time.time() + 2, usegmt=True)
            return Resource(b"slow down", 429, (*TEXT, ("Retry-After", date["at"])))
        return html()

    server = serve({
        "a.test": {"/": html("/busy", "/other"), "/busy": busy_seconds, "/other": html()},
        "b.test": {"/": html("/busy"), "/busy": busy_date},
    })  # fmt: skip
    result = crawler.run(["a.test", "b.test"], server.resolve,
                         crawl={"max_downloads_at_time": 1})  # fmt: skip
    assert result.finished
    a_hits = server.hits_for("a.test")
    refused = next(i for i, hit in enumerate(a_hits) if hit.path == "/busy")
    later = a_hits[refused + 1 :]
    assert [hit.path for hit in later].count("/busy") == 1
    # No request to a.test at all before Retry-After has passed, not only /busy.
    assert all(hit.at - a_hits[refused].at >= 1.0 - 0.005 for hit in later)
    assert len(wall["b"]) == 2
    assert wall["b"][1] >= email.utils.parsedate_to_datetime(date["at"]).timestamp()
    pages = pages_of(result)
    assert pages["http://a.test/busy"].download_attempts == 2
    assert pages["http://b.test/busy"].download_attempts == 2
    assert (
        result.report["sites"]["a.test"]["errors"]
        == result.report["sites"]["b.test"]["errors"]
        == 0
    )


class ResetServer(socketserver.ThreadingTCPServer):
    """One request per connection; the first ``resets[path]`` requests of a path get a TCP
    reset (RST) instead of an answer. Records (path, time.monotonic()) of every request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, pages: dict[str, bytes], resets: dict[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _ResetHandler)
        self.pages, self.resets = pages, resets
        self.hits: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A reset connection is the point, not an error."""

    def times(self, path: str) -> list[float]:
        with self.lock:
            return [at for hit, at in self.hits if hit == path]


class _ResetHandler(socketserver.StreamRequestHandler):
    server: ResetServer

    def handle(self) -> None:
        self.reset = False
        path = self.rfile.readline().decode("latin-1").split()[1]
        while self.rfile.readline().strip():
            pass
        with self.server.lock:
            self.server.hits.append((path, time.monotonic()))
            count = sum(1 for hit, _ in self.server.hits if hit == path)
        if count <= self.server.resets.get(path, 0):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.reset = True
            return
        body = self.server.pages.get(path)
        head = "200 OK" if body is not None else "404 Not Found"
        body = body if body is not None else b"not found"
        self.wfile.write(
            f"HTTP/1.1 {head}\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )

    def finish(self) -> None:
        if not self.reset:
            super().finish()


@pytest.fixture
def reset_server() -> Iterator[Callable[..., ResetServer]]:
    with contextlib.ExitStack() as stack:

        def start(pages: dict[str, bytes], resets: dict[str, int]) -> ResetServer:
            return stack.enter_context(serving(ResetServer(pages, resets), "reset-server"))

        yield start


def test_resets_and_timeouts_are_retried_with_backoff_and_4xx_is_final(
    serve, crawler, reset_server
):
    flaky = reset_server(
        {"/": html("/dead").body, "/dead": html().body}, resets={"/": 1, "/dead": 99}
    )
    site = serve({"b.test": {
        "/": html("/slow", "/gone", "/forbidden", "/missing"),
        "/slow": Resource(html().body, delay=5.0),
        "/gone": Resource(b"gone", 410, TEXT),
        "/forbidden": Resource(b"no", 403, TEXT),
    }})  # fmt: skip
    resolve = {"a.test:80": f"127.0.0.1:{flaky.server_address[1]}", **site.resolve}
    result = crawler.run(
        ["a.test", "b.test"], resolve,
        crawl={"obey_robots": False, "timeout_s": 0.75, "max_download_attempts": 3},
    )  # fmt: skip
    assert result.finished
    # A reset start page is fetched again after a backoff, and then crawled.
    start = flaky.times("/")
    assert len(start) == 2 and start[1] - start[0] >= 0.5 - 0.005
    dead = flaky.times("/dead")
    assert len(dead) == 3  # max_download_attempts
    assert dead[1] - dead[0] >= 0.5 - 0.005 and dead[2] - dead[1] >= 1.0 - 0.005
    assert site.paths_for("b.test").count("/slow") == 3
    for path in ("/gone", "/forbidden", "/missing"):
        assert site.paths_for("b.test").count(path) == 1  # a 4xx is final
    pages = pages_of(result)
    assert pages["http://a.test/"].download_attempts == 2
    assert (
        pages["http://a.test/dead"].error_code,
        pages["http://a.test/dead"].download_attempts,
    ) == ("connection", 3)
    assert (
        pages["http://b.test/slow"].error_code,
        pages["http://b.test/slow"].download_attempts,
    ) == ("timeout", 3)
    assert result.report["sites"]["a.test"]["errors_by_kind"] == {"connection": 1}
    assert result.report["sites"]["b.test"]["errors_by_kind"] == {
        "timeout": 1, "http_410": 1, "http_403": 1, "http_404": 1,
    }  # fmt: skip


# -- auto-throttle --------------------------------------------------------------------------


def test_auto_throttle_follows_latency_and_never_goes_below_the_delay(tmp_path):
    now = [1000.0]
    data = SQLiteDataManager(tmp_path / "crawl.sqlite3", clock=lambda: now[0])
    data.open()
    try:
        data.add_site(HostData(host="a.test", crawl_delay=0.1), "http://a.test/", "http://a.test/")
        data.store_robots("a.test", 404, "", None, blocked=False)
        pages = iter(range(1, 100))

        def fetched(elapsed: float, status: int = 200, throttle: bool = True) -> float:
            """Lease a page, store an answer that took ``elapsed`` s; the host's new delay."""
            now[0] += 100
            page = data.take_for_download()
            assert page is not None
            n = next(pages)
            result = DownloadResult(status=status, content_type="text/html", body=b"%d" % n,
                                    elapsed=elapsed, throttle=throttle)  # fmt: skip
            data.store_download(page.id, result, f"hash{n}")
            if status == 200:
                parsed = data.take_for_parsing()
                assert parsed is not None
                urls = [f"http://a.test/{n}{side}" for side in "ab"]
                data.store_parse(parsed[0].id, [FoundLink(url, url) for url in urls], [])
            host = data.host("a.test")
            assert host is not None
            return host.crawl_delay

        assert fetched(2.0) == 2.0  # slower than the delay: all the way up at once
        assert fetched(0.0) == 1.0  # faster: halfway down
        assert fetched(0.0, status=404) == 1.0  # an error page never lowers it
        assert fetched(0.0, status=503) == 1.0
        assert fetched(0.0) == 0.5
        assert fetched(0.0) == 0.25
        assert fetched(0.0) == 0.125
        assert fetched(0.0) == 0.1  # never below crawl_delay_ms
        assert fetched(0.0) == 0.1
        assert fetched(1000.0) == 60.0  # nor above the ceiling
        assert fetched(0.0, throttle=False) == 60.0  # auto_throttle off: nothing moves
    finally:
        data.close()


def test_auto_throttle_spaces_requests_to_a_slow_host(serve, crawler):
    slow = {f"/{i}": Resource(html().body, delay=0.2) for i in range(5)}
    server = serve({
        "slow.test": {"/": Resource(html(*slow).body, delay=0.2), **slow},
        "fast.test": {"/": html(*slow), **{path: html() for path in slow}},
    })  # fmt: skip
    result = crawler.run(["slow.test", "fast.test"], server.resolve,
                         crawl={"auto_throttle": True, "crawl_delay_ms": 50})  # fmt: skip
    assert result.finished
    sites = result.report["sites"]
    # Every answer took >= 0.2 s, so the delay rose to at least that.
    assert sites["slow.test"]["crawl_delay_s"] >= 0.2
    assert sites["fast.test"]["crawl_delay_s"] >= 0.05  # never below crawl_delay_ms
    level1 = [
        hit.at for hit in server.hits_for("slow.test") if hit.path not in ("/", "/robots.txt")
    ]
    assert len(level1) == 5
    # Without auto-throttle they would be 0.05 s apart, four at a time (max_downloads_at_time
    # 4): about 0.2 s from first to last. With it, each waits for the 0.2 s latency. The span
    # is compared, not each gap, so that the server's own timing jitter cannot matter.
    assert level1[-1] - level1[0] >= 0.6


# -- 7. TLS ---------------------------------------------------------------------------------


@needs_openssl
def test_self_signed_https_is_refused_by_default_with_a_tls_error(serve, crawler, tls):
    context, _cafile = tls
    server = serve({"s.test": {"/": html("/a"), "/a": html()}}, ssl_context=context)
    result = crawler.run(["https://s.test/"], server.resolve)
    assert result.finished
    assert server.hits == []  # no request got past the handshake
    assert result.report["sites"]["s.test"]["errors_by_kind"] == {"tls": 1}
    assert pages_of(result)["https://s.test/"].error_code == "tls"


@needs_openssl
def test_verify_tls_false_crawls_a_self_signed_site(serve, crawler, tls):
    context, _cafile = tls
    server = serve({"s.test": {"/": html("/a"), "/a": html()}}, ssl_context=context)
    result = crawler.run(["https://s.test/"], server.resolve, crawl={"verify_tls": False})
    assert result.finished
    assert result.graph("s.test").urls == {"https://s.test/", "https://s.test/a"}
    assert sorted(server.paths_for("s.test")) == ["/", "/a", "/robots.txt"]


@needs_openssl
def test_verified_https_checks_the_name_through_resolve(serve, crawler, tls, monkeypatch):
    """With the certificate trusted, s.test is crawled verified, and the same server under a
    name its certificate does not carry is refused: SNI and the check use the site's name,
    not the 127.0.0.1 that ``resolve:`` connects to."""
    context, cafile = tls
    monkeypatch.setenv("SSL_CERT_FILE", cafile)  # what OpenSSL's default trust store reads
    server = serve({"s.test": {"/": html("/a"), "/a": html()},
                    "wrong.test": {"/": html()}}, ssl_context=context)  # fmt: skip
    result = crawler.run(["https://s.test/", "https://wrong.test/"], server.resolve)
    assert result.finished
    assert result.graph("s.test").urls == {"https://s.test/", "https://s.test/a"}
    assert server.hits_for("wrong.test") == []
    assert result.report["sites"]["wrong.test"]["errors_by_kind"] == {"tls": 1}


# -- 8. body limits -------------------------------------------------------------------------


def test_a_body_over_max_body_bytes_is_cut_and_marked_truncated(serve, crawler):
    padding = "<p>" + "x" * 3000 + "</p>"
    big = (
        f'<html><body><a href="/a">a</a><a href="/b">b</a>{padding}<a href="/c">c</a></body></html>'
    )
    server = serve({"a.test": {
        "/": html("/big", "/gzbig", "/endless"),
        "/big": Resource(big.encode()),
        "/gzbig": Resource(re.sub(r'href="/', 'href="/g', big).encode(), gzip=True),
        "/endless": Resource(b'<a href="/e">e</a>' + b" " * 1000, endless=True),
        **{p: html() for p in ("/a", "/b", "/c", "/ga", "/gb", "/gc", "/e")},
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, crawl={"max_body_bytes": 2000})
    assert result.finished
    paths = set(server.paths_for("a.test"))
    assert {"/a", "/b", "/ga", "/gb", "/e"} <= paths  # links before the cut count
    assert not {"/c", "/gc"} & paths  # links after it do not
    pages = pages_of(result)
    for path in ("/big", "/gzbig", "/endless"):
        page = pages[f"http://a.test{path}"]
        assert page.truncated and page.bytes == 2000 and page.http_status == 200, path
    assert not pages["http://a.test/"].truncated
    assert {"http://a.test/big", "http://a.test/endless"} <= result.graph("a.test").urls
