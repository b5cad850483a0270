"""A hostile site (traps, garbage, endless or dripping bodies, bad HTTP) never hangs a crawl."""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator, Mapping
from http.cookiejar import CookieJar

import pytest
import yaml
from rawtcp import tcp_server
from webserver import HTML, NOT_FOUND, TEXT, Request, Resource, redirect

from rccrawler.config import CrawlSettings
from rccrawler.manager import load_settings
from rccrawler.unloaders import MAX_STEM_BYTES, host_file_stem
from rccrawler.web.fetch import MAX_COOKIE_HEADER_BYTES, MAX_COOKIES_PER_DOMAIN, Fetcher
from rccrawler.web.urls import named_authorities, own_request_block

pytestmark = pytest.mark.both_backends
GARBAGE = os.urandom(64 * 1024)


def html(body: str) -> Resource:
    return Resource(f"<html><body>{body}</body></html>".encode())


def trap(request: Request) -> Resource:
    """An endless space of pages: /trap/n links to /trap/n+1 and to a longer URL still."""
    n = int(request.path.rsplit("/", 1)[1] or 0)
    return html(f'<a href="/trap/{n + 1}">next</a> <a href="/trap/{n}x/{n + 1}">deeper</a>')


@pytest.fixture
def raw_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server that answers every connection with bytes that are not HTTP."""
    answers = [b"\x00\xff garbage, not HTTP at all\r\n\r\n" + GARBAGE[:1000]]

    def answer(conn: socket.socket, _stop: threading.Event) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(2)
            conn.recv(4096)
            conn.sendall(answers[0])

    with tcp_server(answer) as port:
        yield port, answers


def test_a_hostile_site_ends_with_errors_not_a_hang(serve, crawler, raw_server):
    raw_port, _ = raw_server
    server = serve({"h.test": {
        "/": html(" ".join(f'<a href="{p}">x</a>' for p in (
            "/garbage", "/nul", "/endless", "/drip", "/trap/0", "/bad-location",
            "/huge-header-link", "/empty", "/lies", "/fine",
        ))),
        "/garbage": Resource(GARBAGE),
        "/nul": Resource(b"<html>\x00\x00<a href='/fine2'>x</a>\x00" + GARBAGE[:500]),
        "/endless": Resource(b"<a href='/x'>x</a>", endless=True),
        # 1 KiB every 0.4 s: each read is quick, the whole body is not.
        "/drip": Resource(b"<html>" + b" " * 12_000 + b"</html>", chunk_delay=0.4),
        "/bad-location": Resource(b"", 301, (("Location", "http://[::1:bad/"),)),
        "/huge-header-link": html(f'<a href="/{"a" * 100_000}">long</a>'),
        "/empty": Resource(b""),
        "/lies": Resource(b"short", headers=(("Content-Type", "text/html"),
                                             ("Content-Length", "100000"))),
        "/fine": html('<a href="/fine2">x</a>'),
        "/fine2": html("the end"),
        **{f"/trap/{n}": trap for n in range(1000)},
    }})  # fmt: skip
    resolve = {**server.resolve, "raw.test:80": f"127.0.0.1:{raw_port}"}
    result = crawler.run(
        ["h.test", "raw.test"], resolve,
        crawl={"timeout_s": 1, "max_depth": 6, "max_download_attempts": 1,
               "max_body_bytes": 200_000},
    )  # fmt: skip
    assert result.finished
    graph = result.graph("h.test")
    assert "http://h.test/fine2" in graph.urls
    assert "http://h.test/garbage" in graph.urls  # garbage typed as HTML is still a page
    levels = [int(n["level"]) for n in graph.nodes]
    assert max(levels) <= 6  # the trap ends at max_depth
    assert "depth" in {s["reason"] for s in graph.skipped}
    site = result.report["sites"]["h.test"]
    kinds = site["errors_by_kind"]
    assert kinds["timeout"] == 1  # the dripping body hit the deadline of its request
    assert kinds["connection"] == 1  # the body shorter than its Content-Length
    assert kinds["bad_redirect"] == 1
    assert graph.skip_reason("http://h.test/drip") == "error"
    assert "http://h.test/endless" in graph.urls  # cut at max_body_bytes, still a page
    raw = result.report["sites"]["raw.test"]
    assert raw["pages_done"] == 0
    assert raw["stop_reason"] == "robots.txt unreachable (connection)"  # the cause, too


# -- cookies by the rules -------------------------------------------------------------------


def cookie_fetcher(server) -> tuple[Fetcher, CookieJar]:
    jar = CookieJar()
    return Fetcher(CrawlSettings(resolve=server.resolve), jar), jar


@pytest.mark.parametrize("suffix", ["co.uk", "github.io", "appspot.com"])
def test_a_cookie_for_a_public_suffix_reaches_no_other_site(serve, suffix):
    evil, victim = f"evil.{suffix}", f"victim.{suffix}"
    server = serve({
        evil: {"/": Resource(b"x", headers=(*HTML, ("Set-Cookie", f"track=1; Domain={suffix}"),
                                              ("Set-Cookie", "own=1")))},
        victim: {"/": html("victim")},
    })  # fmt: skip
    client, jar = cookie_fetcher(server)
    try:
        client.get(f"http://{evil}/")
        client.get(f"http://{evil}/")
        client.get(f"http://{victim}/")
    finally:
        client.close()
    assert [c.name for c in jar] == ["own"]  # the site's own host-only cookie is kept
    assert server.hits_for(evil)[1].headers.get("cookie") == "own=1"
    assert "cookie" not in server.hits_for(victim)[0].headers


def test_a_cookie_flood_is_capped_per_domain_and_in_the_header(serve):
    def flood(request: Request) -> Resource:
        n = int(request.path.strip("/") or 0)
        cookies = [("Set-Cookie", f"c{n}_{i}={'v' * 900}") for i in range(90)]
        return Resource(b"<html></html>", headers=(*HTML, *cookies,
                        ("Set-Cookie", f"huge={'h' * 5000}")))  # fmt: skip

    server = serve({"flood.test": {f"/{n}": flood for n in range(5)}})
    client, jar = cookie_fetcher(server)
    try:
        for n in range(5):
            client.get(f"http://flood.test/{n}")
    finally:
        client.close()
    assert len(jar) == MAX_COOKIES_PER_DOMAIN
    assert "huge" not in {c.name for c in jar}  # over 4 KB: refused
    sent = [len(hit.headers.get("cookie", "")) for hit in server.hits_for("flood.test")]
    assert sent[0] == 0 and 0 < max(sent) <= MAX_COOKIE_HEADER_BYTES


# -- politeness with a ceiling --------------------------------------------------------------


def run_bounded(crawler, sites, resolve, **options):
    """Run a crawl in a thread; stop it if it is still going after a generous bound."""
    path = crawler.settings_file(sites, resolve, **options)
    manager_cls, settings = load_settings(path)
    manager = manager_cls(settings)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(manager.run()), daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        manager.request_stop("test bound")
        thread.join(30)
    return manager, outcome


def test_a_huge_robots_crawl_delay_is_capped_with_a_warning(serve, crawler, caplog):
    server = serve({"slow.test": {
        "/robots.txt": Resource(b"User-agent: *\nCrawl-delay: 100000\n", headers=TEXT),
        "/": html('<a href="/a">a</a> <a href="/b">b</a>'), "/a": html("a"), "/b": html("b"),
    }})  # fmt: skip
    with caplog.at_level(logging.WARNING):
        manager, outcome = run_bounded(
            crawler, ["slow.test"], server.resolve, crawl={"max_crawl_delay_ms": 50}
        )
    assert outcome == [True]  # finished, not stopped by the bound
    assert manager.report["sites"]["slow.test"]["pages_done"] == 3
    assert manager.report["sites"]["slow.test"]["crawl_delay_s"] == 0.05
    assert "Crawl-delay 100000 s is capped to 0.05 s" in caplog.text


# -- robots.txt redirects stay in scope -----------------------------------------------------


def test_a_robots_redirect_never_reaches_an_address_the_settings_do_not_name(serve, crawler):
    admin = serve({"127.0.0.1": {"/admin?delete=all": html("deleted!")},
                   "localhost": {"/admin": html("deleted!")}})  # fmt: skip
    port = admin.server_port
    server = serve({
        "ip.test": {"/robots.txt": redirect(f"http://127.0.0.1:{port}/admin?delete=all"),
                    "/": html("home")},
        "name.test": {"/robots.txt": redirect(f"http://localhost:{port}/admin"), "/": html("x")},
        "www.test": {"/robots.txt": redirect("http://other.test/robots.txt"), "/": html("www")},
        "other.test": {"/robots.txt": Resource(b"User-agent: *\nDisallow: /\n", headers=TEXT)},
    })  # fmt: skip
    result = crawler.run(["ip.test", "name.test", "www.test"], server.resolve)
    assert result.finished
    assert admin.hits == []  # no request to where none should go
    # The named host was followed (RFC 9309 allows another host), and its rules apply.
    assert server.paths_for("other.test") == ["/robots.txt"]
    assert result.report["sites"]["www.test"]["pages_done"] == 0
    # An unfollowed redirect leaves robots.txt unavailable: the site is crawled.
    assert result.report["sites"]["ip.test"]["pages_done"] == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8080/admin", "ip_literal"),
        ("http://[::1]/", "ip_literal"),
        ("http://169.254.169.254/latest/meta-data/", "ip_literal"),
        ("http://2130706433/", "ip_literal"),
        ("http://localhost/", "private_address"),
        ("http://localhost./", "private_address"),
        ("ftp://a.test/robots.txt", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("http://no-such-host.invalid/", "dns"),
        ("http://a.test/robots.txt", None),
        ("http://A.TEST:80/robots.txt", None),
        ("http://10.0.0.1:8080/x", None),
        ("http://a.test:8080/", "dns"),
    ],
)
def test_the_own_request_guard(url, reason):
    named = named_authorities(("http://a.test/",), {"10.0.0.1:8080": "127.0.0.1:1"})
    assert own_request_block(url, named) == reason


def test_a_trailing_dot_does_not_bypass_resolve(serve):
    server = serve({"a.test": {"/": html("home")}})
    client = Fetcher(CrawlSettings(resolve=server.resolve, cookies=False))
    try:
        response = client.get("http://a.test./")
    finally:
        client.close()
    # It went to the loopback server (before the fix: a DNS lookup of "a.test.").
    assert response.status in (200, 404)
    assert [hit.path for hit in server.hits] == ["/"]


# -- output that cannot be lost -------------------------------------------------------------

LONG_HOST = ".".join(["x" * 61] * 4)[:244] + ".test"  # 249 characters, every label <= 63


def test_host_file_stems_fit_a_file_name():
    assert len(LONG_HOST) == 249
    stem = host_file_stem(LONG_HOST)
    assert len(stem) <= MAX_STEM_BYTES and stem.startswith("x" * 61 + ".")
    assert host_file_stem(LONG_HOST[:-5] + ".tests") != stem  # a hash of the whole name
    assert host_file_stem("a.test:8080") == "a.test_8080"


def test_a_long_host_and_a_failing_site_lose_no_other_output(serve, tmp_path):
    server = serve({LONG_HOST: {"/": html("long")}, "a.test": {"/": html("a")},
                    "b.test": {"/": html("b")}})  # fmt: skip
    out = tmp_path / "out"
    (out / "b.test.nodes.csv").mkdir(parents=True)  # b.test's unload fails: a folder in the way
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({
        "sites": [LONG_HOST, "a.test", "b.test"], "state_dir": str(tmp_path / "state"),
        "output_dir": str(out), "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0},
    }))  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "rccrawler", "--config", str(path), "--no-tui"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "b.test: CsvGraphUnloader failed" in proc.stderr
    stem = host_file_stem(LONG_HOST)
    for name in (f"{stem}.nodes.csv", f"{stem}.graphml", "a.test.nodes.csv", "a.test.arcs.csv",
                 "b.test.graphml", "b.test.skipped.csv", "report.json"):  # fmt: skip
        assert (out / name).is_file(), name


# -- bounded work per page ------------------------------------------------------------------

MEASURE = """\
import resource, sys
from rccrawler.commands.main import main
code = main(sys.argv[1:])
print("MAXRSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""
PEAK_MB = 150
"""Peak memory of a whole crawl process (Python, SQLite, one 10 MB body and its parse).
Before the caps, the million-link page alone took it to 885 MB."""


def crawl_measured(tmp_path, server, sites, **crawl):
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({
        "sites": sites, "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0, **crawl},
    }))  # fmt: skip
    # Through sh, which forks the crawl: Linux keeps a process's peak across exec, so a
    # child forked straight from this (large) test process would report its size.
    command = [sys.executable, "-c", MEASURE, "--config", str(path), "--no-tui"]
    proc = subprocess.run(["/bin/sh", "-c", '"$0" "$@"; exit $?', *command],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak_kb = int(proc.stderr.rsplit("MAXRSS_KB ", 1)[1].split()[0])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    return proc, peak_kb / 1024, report


def test_a_million_link_page_and_100000_nested_divs_finish_in_bounded_memory(serve, tmp_path):
    links = b"".join(b'<a href="/p%d">x</a>' % i for i in range(1_000_000))
    nested = b"<div>" * 100_000 + b'<a href="/deep">deep</a>' + b"</div>" * 100_000
    server = serve({
        "links.test": {"/": Resource(b"<html><body>" + links + b"</body></html>")},
        "deep.test": {"/": Resource(b"<html><body>" + nested + b"</body></html>"),
                      "/deep": html("found")},
    })  # fmt: skip
    proc, peak_mb, report = crawl_measured(
        tmp_path, server, ["links.test", "deep.test"], max_depth=1, max_links_per_page=1000
    )
    assert peak_mb < PEAK_MB, f"peak {peak_mb:.0f} MB"
    assert "parse budget: markup after 4000 <a> tags left out" in proc.stderr
    assert "elements nested deeper than 512 flattened" in proc.stderr
    assert report["sites"]["links.test"]["skipped_by_reason"]["truncated"] == 1
    # The cut pages are still pages, and the link under 100,000 divs was found and crawled.
    assert report["sites"]["links.test"]["pages_done"] >= 1
    assert report["sites"]["deep.test"]["pages_done"] == 2


def gzip_of_zeros(megabytes: int) -> bytes:
    """A decompression bomb: ``megabytes`` MiB of zero bytes after an HTML head, gzipped
    (about a thousandth of that on the wire), made without holding the whole in memory."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    zeros = bytes(1 << 20)
    parts = [packer.compress(b"<html><body><a href='/after'>after</a>")]
    parts += [packer.compress(zeros) for _ in range(megabytes)]
    return b"".join([*parts, packer.flush()])


def test_a_gzip_bomb_is_cut_at_max_body_bytes_in_bounded_memory(serve, tmp_path):
    """1 GiB of zeros in 1 MB of gzip: the page is kept as its first max_body_bytes of
    decoded bytes, truncated, and the crawl never holds much more than that."""
    bomb = Resource(
        gzip_of_zeros(1024), headers=(("Content-Type", "text/html"), ("Content-Encoding", "gzip"))
    )
    server = serve({"bomb.test": {"/": bomb, "/after": html("after the bomb")}})
    _proc, peak_mb, report = crawl_measured(
        tmp_path, server, ["bomb.test"], max_body_bytes=10_000_000
    )
    assert peak_mb < PEAK_MB, f"peak {peak_mb:.0f} MB"
    site = report["sites"]["bomb.test"]
    assert site["pages_done"] == 2  # the link before the cut was followed
    assert site["truncated"] == 1
    with (tmp_path / "out" / "bomb.test.nodes.csv").open(newline="") as nodes:
        assert {row["url"] for row in csv.DictReader(nodes)} == {
            "http://bomb.test/",
            "http://bomb.test/after",
        }


def test_ten_megabytes_of_tags_are_parsed_only_up_to_max_html_tags(serve, tmp_path):
    """A page of 3.3 million <p> took the parser 590 MB; cut at max_html_tags, its links
    before the cut are kept and the first one after it is named in skipped.csv."""
    flood = b"<p>" * 3_300_000
    body = b"<html><body><a href='/before'>b</a>" + flood + b"<a href='/after'>a</a>"
    server = serve({"tags.test": {"/": Resource(body), "/before": html("before")}})
    proc, peak_mb, report = crawl_measured(tmp_path, server, ["tags.test"])
    assert peak_mb < PEAK_MB, f"peak {peak_mb:.0f} MB"
    assert "parse budget: markup after 250000 tags left out" in proc.stderr
    site = report["sites"]["tags.test"]
    assert (site["pages_done"], site["skipped_by_reason"]["truncated"]) == (2, 1)
    skipped = (tmp_path / "out" / "tags.test.skipped.csv").read_text()
    assert "http://tags.test/after,truncated," in skipped


# -- smaller holes --------------------------------------------------------------------------


def test_utf8_in_a_location_header_is_read_as_utf8(serve, crawler):
    # http.server writes header text as latin-1: this sends the UTF-8 bytes of "/café".
    location = "/café".encode().decode("latin-1")
    server = serve({"a.test": {"/": html('<a href="/old">old</a>'), "/old": redirect(location),
                               "/caf%C3%A9": html("coffee")}})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    assert "/caf%C3%A9" in server.paths_for("a.test")  # not /caf%C3%83%C2%A9
    assert "http://a.test/caf%C3%A9" in result.graph("a.test").urls


def test_redirects_to_javascript_or_data_are_skipped_with_reason_scheme(serve, crawler):
    server = serve({"a.test": {
        "/": html('<a href="/js">js</a> <a href="/data">data</a>'),
        "/js": redirect("javascript:alert(document.cookie)"),
        "/data": redirect("data:text/html,<script>alert(1)</script>"),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    graph = result.graph("a.test")
    assert graph.skip_reason("http://a.test/js") == "scheme"
    assert graph.skip_reason("http://a.test/data") == "scheme"
    assert "bad_redirect" not in result.report["sites"]["a.test"]["errors_by_kind"]


def test_a_trap_of_unique_query_strings_is_bounded(serve, crawler):
    def calendar(request: Request) -> Resource:
        day = int(request.path.partition("=")[2] or 0)
        return html(" ".join(f'<a href="/cal?d={day * 10 + i}">d</a>' for i in range(1, 11)))

    long_path = "/" + "x" * 3000
    start = html(f'<a href="/cal?d=0">calendar</a> <a href="{long_path}">long</a>')

    class Calendar(Mapping[str, object]):  # every /cal?d=N exists, like a real calendar
        def __getitem__(self, path: str) -> object:
            return start if path == "/" else calendar if path.startswith("/cal?d=") else NOT_FOUND

        def __iter__(self) -> Iterator[str]:
            return iter(("/",))

        def __len__(self) -> int:
            return 1

    server = serve({"trap.test": Calendar()})
    result = run_bounded(crawler, ["trap.test"], server.resolve,
                         crawl={"max_query_variants": 30, "max_depth": 50})[0]  # fmt: skip
    report = result.report["sites"]["trap.test"]
    assert result.finished
    assert report["pages_done"] == 1 + 30  # the start page and 30 days
    assert report["skipped_by_reason"]["too_many_queries"] > 0
    assert report["skipped_by_reason"]["too_long"] == 1
    assert long_path not in server.paths_for("trap.test")


def test_a_huge_retry_after_is_capped_like_crawl_delay(serve, crawler):
    hits: list[int] = []

    def busy(request: Request) -> Resource:
        hits.append(1)
        if len(hits) == 1:
            return Resource(b"busy", 503, (*TEXT, ("Retry-After", "31536000")))  # a year
        return html("back")

    server = serve({"busy.test": {"/": html('<a href="/busy">b</a>'), "/busy": busy}})
    manager, outcome = run_bounded(crawler, ["busy.test"], server.resolve,
                                   crawl={"max_crawl_delay_ms": 100})  # fmt: skip
    assert outcome == [True]
    assert manager.report["sites"]["busy.test"]["pages_done"] == 2
    assert len(hits) == 2  # asked again once the capped wait was over


def test_a_huge_robots_txt_is_read_only_up_to_500_kib_everywhere(serve, crawler):
    """Both the fetch and every thread's robots_for() read the first 500 KiB only."""
    rules = b"".join(b"Disallow: /private/%d\n" % i for i in range(400_000))  # ~8.6 MB
    robots = b"User-agent: *\n" + rules + b"Disallow: /late\n"
    server = serve({"big.test": {
        "/robots.txt": Resource(robots, headers=TEXT),
        "/": html('<a href="/late">late</a> <a href="/private/7">p</a>'), "/late": html("late"),
    }})  # fmt: skip
    result = crawler.run(["big.test"], server.resolve, crawl={"max_body_bytes": 20_000_000})
    assert result.finished
    paths = server.paths_for("big.test")
    assert "/late" in paths  # its rule lies past the cut
    assert "/private/7" not in paths  # an early rule holds
    assert result.graph("big.test").skip_reason("http://big.test/private/7") == "robots"
