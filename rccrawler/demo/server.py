"""The demo's web server: one loopback HTTP/1.1 server answering for every host of the
sample site, picked by the Host header.

``rccrawler demo`` crawls named sites (``demo.test``) without DNS: the crawler's
``resolve:`` setting (SPEC §4, like ``curl --resolve``) routes each name here. Static
answers only; the tests' server (tests/support/loopback.py) extends :class:`Resource`
with the faults a crawler must survive (slow, endless and broken bodies).

Standard library only, because it ships in the package.
"""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = [
    "HTML",
    "NOT_FOUND",
    "TEXT",
    "DemoServer",
    "Resource",
    "host_without_port",
    "redirect",
    "serve_demo",
    "serving",
]

_S = TypeVar("_S", bound=socketserver.BaseServer)

HTML: tuple[tuple[str, str], ...] = (("Content-Type", "text/html; charset=utf-8"),)
TEXT: tuple[tuple[str, str], ...] = (("Content-Type", "text/plain; charset=utf-8"),)


@dataclass(frozen=True, slots=True)
class Resource:
    """One canned answer. ``headers=()`` gives a response without Content-Type."""

    body: bytes = b""
    status: int = 200
    headers: tuple[tuple[str, str], ...] = HTML


NOT_FOUND = Resource(b"not found", 404, TEXT)


def redirect(location: str, status: int = 301) -> Resource:
    """A redirect to ``location`` (absolute URL or path, sent as given)."""
    return Resource(b"", status, (("Location", location), *TEXT))


def host_without_port(host: str) -> str:
    """The Host header's name, lowercased, without its port (``[::1]:80`` → ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


class DemoServer(ThreadingHTTPServer):
    """Serves ``sites`` (host → path → :class:`Resource`) on 127.0.0.1; counts requests."""

    daemon_threads = True

    def __init__(self, sites: Mapping[str, Mapping[str, Resource]], port: int = 0) -> None:
        self.sites = {host.lower(): site for host, site in sites.items()}
        self.requests = 0
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _DemoHandler)

    @property
    def resolve(self) -> dict[str, str]:
        """The ``resolve:`` setting that routes every site to this server."""
        return {f"{host}:80": f"127.0.0.1:{self.server_port}" for host in self.sites}

    def answer(self, host: str, path: str) -> Resource:
        with self._lock:
            self.requests += 1
        return self.sites.get(host_without_port(host), {}).get(path, NOT_FOUND)


class _DemoHandler(BaseHTTPRequestHandler):
    server: DemoServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """An answer leaves in two writes, headers then body: on a kept-alive connection
    Nagle's algorithm held the body until the crawler's delayed ACK, 40 ms an answer."""

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the crawl's own log says what was fetched."""

    def _answer(self, *, send_body: bool) -> None:
        resource = self.server.answer(self.headers.get("Host", ""), self.path)
        self.send_response(resource.status)
        for name, value in resource.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(resource.body)))
        self.end_headers()
        if send_body:
            self.wfile.write(resource.body)


@contextlib.contextmanager
def serving(server: _S, name: str = "site-server") -> Iterator[_S]:
    """Run any socketserver in a daemon thread for the ``with`` block, then close it."""
    # A short poll interval makes shutdown() quick: tests start hundreds of servers.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name=name, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serve_demo(
    sites: Mapping[str, Mapping[str, Resource]],
) -> contextlib.AbstractContextManager[DemoServer]:
    """Run a :class:`DemoServer` in a daemon thread for the ``with`` block."""
    return serving(DemoServer(sites), "demo-server")
