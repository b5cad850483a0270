"""A hostile site (traps, garbage, endless or dripping bodies, bad HTTP) never hangs a crawl."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator

import pytest
from webserver import Request, Resource

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
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    answers = [b"\x00\xff garbage, not HTTP at all\r\n\r\n" + GARBAGE[:1000]]
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError), conn:
                conn.settimeout(2)
                conn.recv(4096)
                conn.sendall(answers[0])

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], answers
    finally:
        stop.set()
        thread.join(5)
        listener.close()


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
    assert raw["stop_reason"] == "robots.txt unreachable"
