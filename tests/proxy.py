"""A small HTTP forward proxy on loopback, so proxy tests need no proxy package and no internet.

It really forwards: an absolute-form ``GET http://host/path`` is sent on to the origin
with http.client (adding ``Via``, dropping hop-by-hop headers), and ``CONNECT host:443``
opens a TCP tunnel that carries the client's TLS untouched. Like a real proxy it resolves
the host names itself: its ``resolve`` map (the crawler's ``resolve:`` format) routes the
test's names to the loopback server. Every request is recorded as a :class:`ProxyHit`.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlsplit

from support.loopback import serving

__all__ = ["VIA", "ForwardProxy", "ProxyHit", "serve_proxy"]

VIA = "1.1 rccrawler-test-proxy"
"""The ``Via`` header the proxy adds to what it forwards: proof a request went through it."""

# RFC 9110 §7.6.1: connection-specific fields a proxy must not forward.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


@dataclass(frozen=True, slots=True)
class ProxyHit:
    """One request as the proxy received it."""

    method: str
    target: str
    """``http://host/path`` for GET, ``host:port`` for CONNECT."""
    headers: dict[str, str]
    """Names lowercased."""
    authorized: bool
    """Whether the request carried the proxy's credentials (always True without them)."""


class ForwardProxy(ThreadingHTTPServer):
    """A forward proxy for HTTP (absolute-form GET) and HTTPS (CONNECT).

    Args:
        resolve: ``{"host:port": "ip:port"}``; names not listed are connected to as they are.
        credentials: ``(user, password)`` the clients must send as Basic
            Proxy-Authorization; without them the proxy answers 407.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, resolve: Mapping[str, str], *, credentials: tuple[str, str] | None = None
    ) -> None:
        self.routes = {name.lower(): target for name, target in resolve.items()}
        self.credentials = credentials
        self.hits: list[ProxyHit] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def url(self) -> str:
        """The ``crawl.proxy`` setting, credentials included when the proxy wants them."""
        if self.credentials is None:
            return f"http://127.0.0.1:{self.server_port}"
        user, password = (quote(part, safe="") for part in self.credentials)
        return f"http://{user}:{password}@127.0.0.1:{self.server_port}"

    def hits_copy(self) -> list[ProxyHit]:
        with self._lock:
            return list(self.hits)

    def route(self, host: str, port: int) -> tuple[str, int]:
        ip, _, mapped = self.routes.get(f"{host.lower()}:{port}", f"{host}:{port}").rpartition(":")
        return ip.strip("[]"), int(mapped)

    def expected_authorization(self) -> str | None:
        if self.credentials is None:
            return None
        token = base64.b64encode(":".join(self.credentials).encode()).decode("ascii")
        return f"Basic {token}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Keep test output quiet: a client that hangs up is not a proxy error."""

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()


class _ProxyHandler(BaseHTTPRequestHandler):
    server: ForwardProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def _record(self) -> bool:
        """Record the request; True when it may go on (credentials right or not needed)."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        expected = self.server.expected_authorization()
        authorized = expected is None or headers.get("proxy-authorization") == expected
        with self.server._lock:
            self.server.hits.append(ProxyHit(self.command, self.path, headers, authorized))
        if not authorized:
            self.send_response(407)
            self.send_header("Proxy-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
        return authorized

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.scheme != "http" or not parts.hostname:
            self.send_error(400, "a forward proxy wants an absolute http:// URL")
            return
        if not self._record():
            return
        ip, port = self.server.route(parts.hostname, parts.port or 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        upstream = http.client.HTTPConnection(ip, port, timeout=10)
        try:
            upstream.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            upstream.putheader("Via", VIA)
            upstream.endheaders()
            answer = upstream.getresponse()
            body = answer.read()
        except OSError as exc:
            self.send_error(502, f"upstream failed: {exc}")
            return
        finally:
            upstream.close()
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Via", VIA)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if not host or not port.isdigit():
            self.send_error(400, "CONNECT wants host:port")
            return
        if not self._record():
            return
        try:
            upstream = socket.create_connection(self.server.route(host, int(port)), timeout=10)
        except OSError as exc:
            self.send_error(502, f"cannot reach {self.path}: {exc}")
            return
        self.send_response_only(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        with upstream:
            self._relay(self.connection, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        """Copy bytes both ways until either side closes (or the proxy shuts down)."""
        peers = {client: upstream, upstream: client}
        while not self.server._closing.is_set():
            readable, _, _ = select.select(list(peers), [], [], 0.1)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                try:
                    peers[sock].sendall(data)
                except OSError:
                    return


@contextlib.contextmanager
def serve_proxy(
    resolve: Mapping[str, str], *, credentials: tuple[str, str] | None = None
) -> Iterator[ForwardProxy]:
    """Run a :class:`ForwardProxy` in a daemon thread for the ``with`` block."""
    with serving(ForwardProxy(resolve, credentials=credentials), "test-proxy") as proxy:
        yield proxy
