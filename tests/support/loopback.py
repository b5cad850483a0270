"""The tests' loopback HTTP/1.1 server: many virtual hosts, picked by the Host header,
and the faults a crawler must survive (slow, endless, lying and broken bodies).

The benchmarks and the tests crawl named sites (``a.test``, ``sub.a.test``) without DNS:
one server on 127.0.0.1 answers for every host, and the crawler's ``resolve:`` setting
(SPEC §4, like ``curl --resolve``) routes each name to it. The server records every
request (:class:`Hit`) and the per-host peak of concurrent requests, so politeness
(crawl delay, per-host concurrency) can be asserted. It also serves the demo's static
answers (:class:`rccrawler.demo.server.Resource`), which :class:`Resource` extends.
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip as gzip_module
import hashlib
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from rccrawler.demo.server import HTML, TEXT, host_without_port, redirect, serving
from rccrawler.demo.server import Resource as StaticResource

__all__ = [
    "HTML",
    "NOT_FOUND",
    "TEXT",
    "Answer",
    "Hit",
    "Request",
    "Resource",
    "Responder",
    "Site",
    "SiteServer",
    "Sites",
    "redirect",
    "serve_sites",
    "serving",
]

CHUNK = 1024
"""Bytes written between two ``chunk_delay`` sleeps."""

_ENDLESS_BLOCK = 64 * 1024
"""Bytes per chunk of an endless body without ``chunk_delay``: large, so streams are fast."""

_CORRUPT_GZIP = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 32
"""A valid gzip header followed by a deflate block of the reserved type 3: never decodes."""


@dataclass(frozen=True, slots=True)
class Resource(StaticResource):
    """One canned answer, with the faults to inject. ``headers=()`` gives a response
    without Content-Type."""

    delay: float = 0.0
    """Seconds to wait before answering, so that requests overlap or time out."""
    chunk_delay: float = 0.0
    """Seconds to sleep between 1 KiB chunks of the body: a slow body (read timeouts)."""
    endless: bool = False
    """Stream ``body`` repeated forever (chunked) until the client disconnects."""
    gzip: bool = False
    """Send the body gzip-compressed (``Content-Encoding: gzip``) if the client accepts it.

    Ignored for endless bodies."""
    broken_gzip: bool = False
    """Send ``Content-Encoding: gzip`` with bytes that do not decode."""
    validators: bool = False
    """Send an ``ETag`` (a hash of the body) and a ``Last-Modified`` (``modified``), and
    answer a request whose ``If-None-Match`` names that ETag, or (without one) whose
    ``If-Modified-Since`` is not before ``modified``, with ``304 Not Modified`` and no
    body (RFC 9110 §13.1), as nginx does for a static file."""
    modified: float = 1_700_000_000.0
    """The ``Last-Modified`` time (seconds since the epoch) of a resource with validators."""


@dataclass(frozen=True, slots=True)
class Request:
    """What a :data:`Responder` sees of a request."""

    host: str
    """Host header, port stripped, lowercased."""
    path: str
    """Request target in origin form, query included (``/search?q=a``)."""
    method: str
    headers: dict[str, str]
    """A copy, names lowercased; repeated headers joined with ``", "``."""
    at: float
    """time.monotonic() when the request arrived."""

    def header(self, name: str, default: str = "") -> str:
        """The value of header ``name`` (any case), or ``default``."""
        return self.headers.get(name.lower(), default)


Responder = Callable[[Request], StaticResource]
"""A dynamic resource: cookies, Retry-After, answers that change with each hit."""

Site = Mapping[str, StaticResource | Responder]
"""Path (request target, query included) → answer. Any Mapping, so huge sites can be lazy."""

Sites = dict[str, Site]
"""Host → site, e.g. ``{"a.test": {"/": Resource(b"...")}}``."""

NOT_FOUND = Resource(b"not found", 404, TEXT)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server sent for one request (recorded once it is sent)."""

    host: str
    path: str
    status: int
    body_bytes: int
    """Bytes of body written (0 for a 304 or a HEAD)."""
    headers: dict[str, str] = field(default_factory=dict)
    """The request's headers, names lowercased."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One request as the server received it."""

    host: str
    path: str
    at: float
    """time.monotonic() when the request arrived."""
    headers: dict[str, str] = field(default_factory=dict)
    """A copy, names lowercased."""
    method: str = "GET"


class SiteServer(ThreadingHTTPServer):
    """One loopback HTTP/1.1 server for every virtual host of ``sites``.

    Args:
        sites: host → path → :class:`Resource` or :data:`Responder`. Hosts are
            matched lowercased; an unknown host or path answers 404.
        port: 0 picks a free port.
        ssl_context: a server-side context makes this an HTTPS server.
        timeout: socket timeout of a connection, so a client that stops reading
            or leaves a keep-alive connection open cannot hold a thread forever.
        handshake_delay: seconds an HTTPS connection waits before its TLS handshake,
            like a server far away (the handshake's round trips).
    """

    daemon_threads = True
    # server_close() closes the open connections itself, then joins with a bound.
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        sites: Mapping[str, Site],
        *,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float | None = 60.0,
        handshake_delay: float = 0.0,
    ) -> None:
        self.sites: dict[str, Site] = {host.lower(): site for host, site in sites.items()}
        self.ssl_context = ssl_context
        self.connection_timeout = timeout
        self.handshake_delay = handshake_delay
        self.handshakes: list[float] = []
        """time.monotonic() as each TLS handshake began (after ``handshake_delay``)."""
        self.hits: list[Hit] = []
        self.answers: list[Answer] = []
        """Every answer sent, in the order sent (a conditional request's 304 among them)."""
        self.errors: list[BaseException] = []
        """Exceptions raised by responders (answered 500), for tests to re-raise."""
        self.peak_in_flight: Counter[str] = Counter()
        self.peak_total_in_flight = 0
        """The most requests of all hosts answered at once."""
        self._in_flight: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._hit = threading.Condition(self._lock)
        """Notified at every request, for :meth:`wait_for_hits`."""
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._conn_threads: set[threading.Thread] = set()
        super().__init__(("127.0.0.1", port), _Handler)

    # -- what tests and the demo read ----------------------------------------

    @property
    def https(self) -> bool:
        return self.ssl_context is not None

    @property
    def scheme(self) -> str:
        return "https" if self.https else "http"

    @property
    def default_port(self) -> int:
        return 443 if self.https else 80

    @property
    def resolve(self) -> dict[str, str]:
        """The ``resolve:`` setting that routes every site to this server."""
        return {
            f"{host}:{self.default_port}": f"127.0.0.1:{self.server_port}" for host in self.sites
        }

    def url(self, host: str, path: str = "/") -> str:
        """The URL of ``path`` on ``host`` as the crawler sees it (no port)."""
        return f"{self.scheme}://{host}{path}"

    def hits_for(self, host: str) -> list[Hit]:
        with self._lock:
            return [hit for hit in self.hits if hit.host == host]

    def paths_for(self, host: str) -> list[str]:
        """Requested paths of ``host`` in arrival order (repeats kept)."""
        with self._lock:
            return [hit.path for hit in self.hits if hit.host == host]

    def in_flight(self, host: str) -> int:
        """Requests of ``host`` being answered now.

        A request leaves just after its last byte is written, so a client may see
        its answer a moment before this drops: poll it rather than assert it at once.
        """
        with self._lock:
            return self._in_flight[host]

    def answers_for(self, host: str) -> list[Answer]:
        with self._lock:
            return [answer for answer in self.answers if answer.host == host]

    def total_in_flight(self) -> int:
        """Requests of every host being answered now (a responder's own included)."""
        with self._lock:
            return self._in_flight.total()

    def reset(self) -> None:
        """Forget hits, answers, errors and peaks, e.g. between the two halves of a resume
        test."""
        with self._lock:
            self.hits.clear()
            self.answers.clear()
            self.errors.clear()
            self.peak_in_flight = Counter(+self._in_flight)
            self.peak_total_in_flight = self._in_flight.total()

    # -- bookkeeping ----------------------------------------------------------

    def wait_for_hits(
        self,
        count: int,
        host: str | None = None,
        *,
        timeout: float = 60.0,
        alive: Callable[[], bool] | None = None,
    ) -> bool:
        """Wait until ``count`` requests (to ``host``, or to any) have arrived, woken by
        each request rather than polling. Returns False after ``timeout`` seconds, or as
        soon as ``alive()`` says the client is gone."""
        deadline = time.monotonic() + timeout

        def reached() -> bool:
            return sum(1 for h in self.hits if host is None or h.host == host) >= count

        with self._hit:
            while not reached():
                left = deadline - time.monotonic()
                if left <= 0 or (alive is not None and not alive()):
                    return False
                # Woken by every request; the bound only lets alive() be asked again.
                self._hit.wait(min(left, 0.1) if alive is not None else left)
            return True

    def _enter(self, hit: Hit) -> None:
        with self._lock:
            self._hit.notify_all()
            self.hits.append(hit)
            self._in_flight[hit.host] += 1
            self.peak_in_flight[hit.host] = max(
                self.peak_in_flight[hit.host], self._in_flight[hit.host]
            )
            self.peak_total_in_flight = max(self.peak_total_in_flight, self._in_flight.total())

    def _leave(self, host: str) -> None:
        with self._lock:
            self._in_flight[host] -= 1

    def _sent(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless the server closes meanwhile; True means "go on"."""
        return not self._closing.wait(seconds)

    # -- socketserver hooks ---------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"site-server-{client_address[1]}",
            daemon=True,
        )
        with self._lock:
            self._conn_threads.add(thread)
            self._connections.add(request)
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._conn_threads.discard(threading.current_thread())
                self._connections.discard(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        # The TLS handshake runs here, in the connection's thread, so a slow or
        # failing client cannot stall the accept loop.
        if self.handshake_delay and not self._sleep(self.handshake_delay):
            return
        with self._lock:
            self.handshakes.append(time.monotonic())
        try:
            request.settimeout(self.connection_timeout)
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except OSError:
            return
        # wrap_socket detached the plain socket: track and close the TLS one instead.
        with self._lock:
            self._connections.discard(request)
            self._connections.add(tls)
        try:
            super().finish_request(tls, client_address)
        finally:
            with self._lock:
                self._connections.discard(tls)
            self.shutdown_request(tls)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Keep test output quiet: a client that hangs up is not a server error."""

    def server_close(self) -> None:
        """Stop listening, hang up on open connections, join their threads (bounded)."""
        self._closing.set()
        super().server_close()
        with self._lock:
            connections = list(self._connections)
            threads = list(self._conn_threads)
        for conn in connections:
            with contextlib.suppress(OSError):
                # The plain-socket method: SSLSocket.shutdown would drop its SSL
                # object under the feet of the thread still using it.
                socket.socket.shutdown(conn, socket.SHUT_RDWR)
        deadline = time.monotonic() + 5.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    server: SiteServer
    protocol_version = "HTTP/1.1"
    wbufsize = 0  # unbuffered: a vanished client shows up at the write that fails

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.connection_timeout)
        # Headers and body leave in two writes; without NODELAY, Nagle and the
        # client's delayed ACK stall every keep-alive answer by ~40 ms.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._answer(send_body=True)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    # -- the answer -----------------------------------------------------------

    def _request(self) -> Request:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        host, path = headers.get("host", ""), self.path
        if "://" in path.split("?", 1)[0]:
            # Absolute form, as a client talking to a proxy sends it: its
            # authority wins over Host (RFC 9112 §3.2.2).
            parts = urlsplit(path)
            host = parts.netloc
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Request(host_without_port(host), path, self.command, headers, time.monotonic())

    def _resolve(self, request: Request) -> Resource:
        answer = self.server.sites.get(request.host, {}).get(request.path, NOT_FOUND)
        try:
            if not isinstance(answer, StaticResource):
                answer = answer(request)
        except Exception as exc:
            with self.server._lock:
                self.server.errors.append(exc)
            return Resource(f"responder failed: {exc!r}".encode(), 500, TEXT)
        if isinstance(answer, Resource):
            return answer
        return Resource(answer.body, answer.status, answer.headers)  # a static answer

    def _answer(self, *, send_body: bool) -> None:
        request = self._request()
        self.server._enter(
            Hit(request.host, request.path, request.at, dict(request.headers), request.method)
        )
        try:
            res = self._resolve(request)
            if res.delay and not self.server._sleep(res.delay):
                self.close_connection = True
                return
            self._send(res, request, send_body=send_body)
        except OSError:
            # The client hung up (BrokenPipe, ConnectionReset), stopped reading
            # (timeout) or broke TLS: end this connection and its thread.
            self.close_connection = True
        finally:
            self.server._leave(request.host)

    def _send(self, res: Resource, request: Request, *, send_body: bool) -> None:
        body = res.body
        names = {name.lower() for name, _ in res.headers}
        extra: list[tuple[str, str]] = []
        if res.validators and res.status == 200:
            etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
            modified = email.utils.formatdate(res.modified, usegmt=True)
            if _not_modified(request, etag, res.modified):
                self.send_response(304)
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", modified)
                self.end_headers()
                self.server._sent(Answer(request.host, request.path, 304, 0, request.headers))
                return
            extra += [("ETag", etag), ("Last-Modified", modified)]
        if res.broken_gzip:
            body = _CORRUPT_GZIP
            extra.append(("Content-Encoding", "gzip"))
        elif res.gzip and not res.endless and _accepts_gzip(request.header("accept-encoding")):
            body = gzip_module.compress(body, mtime=0)
            extra.append(("Content-Encoding", "gzip"))
        if res.gzip or res.broken_gzip:
            extra.append(("Vary", "Accept-Encoding"))
        if res.endless:
            extra.append(("Transfer-Encoding", "chunked"))
            self.close_connection = True
        elif "content-length" not in names:
            extra.append(("Content-Length", str(len(body))))
        else:
            # A resource that declares its own length may lie about it; never
            # reuse the connection after that.
            self.close_connection = True

        self.send_response(res.status)
        for name, value in (*res.headers, *extra):
            self.send_header(name, value)
        self.end_headers()
        if not send_body or res.status in (204, 304) or 100 <= res.status < 200:
            self.server._sent(Answer(request.host, request.path, res.status, 0, request.headers))
            return
        if res.endless:
            self._stream_forever(body or b"\n", res.chunk_delay)
        elif res.chunk_delay:
            for start in range(0, len(body), CHUNK):
                if start and not self.server._sleep(res.chunk_delay):
                    self.close_connection = True
                    return
                self.wfile.write(body[start : start + CHUNK])
        else:
            self.wfile.write(body)
        if not res.endless:
            answer = Answer(request.host, request.path, res.status, len(body), request.headers)
            self.server._sent(answer)

    def _stream_forever(self, body: bytes, chunk_delay: float) -> None:
        """Write ``body`` over and over as HTTP chunks until the client disconnects."""
        size = CHUNK if chunk_delay else _ENDLESS_BLOCK
        data = (body * (size // len(body) + 1))[:size]
        chunk = b"%x\r\n%b\r\n" % (len(data), data)
        while not self.server._closing.is_set():
            self.wfile.write(chunk)  # raises BrokenPipe/ConnectionReset once the client is gone
            if chunk_delay and not self.server._sleep(chunk_delay):
                break


def _not_modified(request: Request, etag: str, modified: float) -> bool:
    """Whether a conditional GET is answered 304 (RFC 9110 §13.2.2): ``If-None-Match``
    names the ETag (weak comparison, or ``*``), or without it ``If-Modified-Since`` is not
    before the resource's time."""
    if request.method not in ("GET", "HEAD"):
        return False
    match = request.header("if-none-match")
    if match:
        tags = [tag.strip().removeprefix("W/") for tag in match.split(",")]
        return "*" in tags or etag in tags
    since = request.header("if-modified-since")
    if not since:
        return False
    try:
        when = email.utils.parsedate_to_datetime(since).timestamp()
    except (TypeError, ValueError):
        return False
    return int(modified) <= when


def _accepts_gzip(accept_encoding: str) -> bool:
    """True if Accept-Encoding lists gzip (or ``*``) with a non-zero q."""
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        q = params.strip().lower()
        if q.startswith("q="):
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
        return True
    return False


@contextlib.contextmanager
def serve_sites(sites: Mapping[str, Site], **kwargs: Any) -> Iterator[SiteServer]:
    """Run a :class:`SiteServer` in a daemon thread for the ``with`` block.

    Keyword arguments go to :class:`SiteServer` (``port``, ``ssl_context``, ``timeout``).
    """
    with serving(SiteServer(sites, **kwargs)) as server:
        yield server
