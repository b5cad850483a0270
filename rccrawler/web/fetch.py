"""The HTTP layer: one GET over urllib3, polite headers, bounded bodies, no automatic redirects."""

from __future__ import annotations

import contextlib
import email.utils
import functools
import heapq
import itertools
import logging
import math
import socket
import ssl
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.client import RemoteDisconnected
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3
import urllib3.connection
from publicsuffixlist import PublicSuffixList
from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    HTTPError,
    InsecureRequestWarning,
    LocationParseError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util.retry import Retry
from urllib3.util.ssl_ import create_urllib3_context

from rccrawler.exceptions import FetchError
from rccrawler.records import DownloadResult, HttpExchange
from rccrawler.web import headers as header_parse

if TYPE_CHECKING:
    from rccrawler.config import CrawlSettings
logger = logging.getLogger(__name__)

header_parse.install()  # every response's header block, without the email package (see there)


ERROR_KINDS = ("connection_refused", "dns", "tls", "timeout", "connection", "proxy",
               "decode", "bad_url", "bad_redirect", "http_NNN", "http")  # fmt: skip
"""The error names a page can end with, as docs/output.md, "Error kinds", lists them (a test
holds the two together); stable. ``http_NNN`` stands for ``http_404`` and the like."""


def _accept_encoding() -> str:
    try:
        import brotli  # noqa: F401
    except ImportError:
        return "gzip, deflate"
    return "gzip, deflate, br"


@dataclass(frozen=True, slots=True)
class Response:
    """A raw answer: status, headers and the (decoded, possibly truncated) body."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool
    elapsed: float
    exchange: HttpExchange | None = None
    """The heads as sent and received (for archives)."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: a number of seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def referer_header(referer: str, url: str) -> str:
    """The Referer to send when requesting ``url``, a link found on page ``referer``.

    RFC 9110 §10.1.3: never the fragment or userinfo of the referring URL, and no
    Referer at all on a plain-HTTP request made from a page that came over HTTPS.
    """
    if not referer:
        return ""
    return _referer_for(referer, url[:6].lower() == "https:")


@functools.lru_cache(maxsize=1024)
def _referer_for(referer: str, to_https: bool) -> str:
    # Cached: breadth first, the links of one page are requested one after another.
    parts = urlsplit(referer)
    if parts.scheme.lower() == "https" and not to_https:
        return ""
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))


MAX_COOKIES_PER_DOMAIN = 50
"""Cookies kept per cookie domain; browsers cap near 50 (RFC 6265 §6.1 asks for at least 50)."""
MAX_COOKIES = 3000
"""Cookies kept in the whole jar (RFC 6265 §6.1 asks for at least 3000)."""
MAX_COOKIE_BYTES = 4096
"""Name + value + attributes of one cookie, as browsers cap it (RFC 6265 §6.1)."""
MAX_COOKIE_HEADER_BYTES = 4096
"""A Cookie request header never grows past this: the most specific cookies are sent,
the rest left out, so a site that sets many cannot make every later request fail (431)."""


@functools.cache
def _public_suffixes() -> PublicSuffixList:
    """The Public Suffix List as the ``publicsuffixlist`` package ships it (loaded once)."""
    return PublicSuffixList()


def is_public_suffix(domain: str) -> bool:
    """Whether ``domain`` is a public suffix (``co.uk``, ``github.io``): no site owns it."""
    domain = domain.strip(".").lower()
    return bool(domain) and bool(_public_suffixes().is_public(domain))


class CrawlerCookiePolicy(DefaultCookiePolicy):
    """The standard library's cookie rules, tightened where RFC 6265 and browsers are stricter.

    * http.cookiejar's default (Netscape) policy sends a cookie set without ``Domain``
      to subdomains too; RFC 6265 §5.3 makes such a cookie host-only.
    * ``Domain=`` a public suffix (``co.uk``, ``github.io``) is refused (RFC 6265 §5.3
      step 5), unless it is the request host itself: otherwise one site would set
      cookies for every other site under that suffix.
    * A cookie over :data:`MAX_COOKIE_BYTES` is refused, and so is a new one once its
      domain holds :data:`MAX_COOKIES_PER_DOMAIN` or the jar :data:`MAX_COOKIES`
      (replacing a cookie already kept is always allowed).

    Domain and path matching, ``Secure`` and expiry stay the jar's own.

    Args:
        jar: the jar this policy guards, to count what it holds.
    """

    def __init__(self, jar: CookieJar) -> None:
        super().__init__(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)
        self.jar = jar

    def set_ok(self, cookie: Cookie, request: urllib.request.Request) -> bool:
        if not super().set_ok(cookie, request):
            return False
        size = len(cookie.name) + len(cookie.value or "") + len(cookie.path) + len(cookie.domain)
        if size > MAX_COOKIE_BYTES:
            logger.debug("cookie %s refused: %d bytes", cookie.name, size)
            return False
        domain = cookie.domain.lstrip(".").lower()
        if cookie.domain_specified and is_public_suffix(domain):
            host = (urlsplit(request.get_full_url()).hostname or "").lower().rstrip(".")
            if host != domain:
                logger.debug("cookie %s refused: Domain=%s is a public suffix", cookie.name, domain)
                return False
        total = in_domain = 0
        for kept in self.jar:
            if (kept.domain, kept.path, kept.name) == (cookie.domain, cookie.path, cookie.name):
                return True  # a replacement never grows the jar
            total += 1
            in_domain += kept.domain.lstrip(".").lower() == domain
        if in_domain >= MAX_COOKIES_PER_DOMAIN or total >= MAX_COOKIES:
            logger.debug("cookie %s refused: the jar is full for %s", cookie.name, domain)
            return False
        return True


def cap_cookie_header(value: str, limit: int = MAX_COOKIE_HEADER_BYTES) -> str:
    """``value`` cut at a cookie boundary so that it holds at most ``limit`` bytes.

    The jar lists the most specific (longest path) cookies first, so those are kept.
    """
    if len(value.encode("utf-8", "replace")) <= limit:
        return value
    kept: list[str] = []
    size = 0
    for pair in value.split("; "):
        cost = len(pair.encode("utf-8", "replace")) + (2 if kept else 0)
        if size + cost > limit:
            continue  # a smaller cookie further on may still fit
        kept.append(pair)
        size += cost
    return "; ".join(kept)


def location_text(raw: str) -> str:
    """A Location header as the server meant it.

    http.client decodes header bytes as latin-1, but servers send non-ASCII URLs as
    UTF-8 (as browsers read them); re-reading those bytes as UTF-8 keeps ``/café`` from
    becoming ``/cafÃ©``, percent-encoded twice. Bytes that are not UTF-8 stay latin-1.
    """
    if raw.isascii():
        return raw
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return raw


def robots_tags(exchange: HttpExchange | None) -> tuple[str, ...]:
    """The ``X-Robots-Tag`` values of a response, each header line as sent (a line may
    name the crawler it is for, so they are not merged)."""
    if exchange is None:
        return ()
    return tuple(
        value for name, value in exchange.response_headers if name.lower() == "x-robots-tag"
    )


def request_deadline(timeout_s: float) -> float:
    """Seconds one whole request (connect, headers, body) may take: ``2 × timeout_s``.

    ``timeout_s`` bounds each wait (connecting, and each read), which a server that
    drips one byte at a time never trips; this bounds their sum (docs/settings.md, crawl.timeout_s).
    """
    return 2.0 * timeout_s


def transport_error(exc: Exception) -> FetchError:
    """The FetchError kind of a transport exception (docs/output.md, "Error kinds").

    Order matters: urllib3's NameResolutionError is a NewConnectionError, which is
    a ConnectTimeoutError, so the most specific classes are tested first.
    """
    if isinstance(exc, FetchError):
        return exc
    text = str(exc)
    if isinstance(exc, NameResolutionError):
        return FetchError("dns", text, retryable=True)
    if isinstance(exc, NewConnectionError):
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ConnectionRefusedError):
            return FetchError("connection_refused", text, retryable=True)
        if isinstance(cause, socket.gaierror):
            return FetchError("dns", text, retryable=True)
        return FetchError("connection", text, retryable=True)
    for classes, kind, retryable in _ERROR_KINDS:
        if isinstance(exc, classes):
            return FetchError(kind, text, retryable=retryable)
    raise exc


_ERROR_KINDS: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str, bool], ...] = (
    ((ConnectTimeoutError, ReadTimeoutError, TimeoutError), "timeout", True),
    (SSLError, "tls", False),
    (DecodeError, "decode", False),
    (ProxyError, "proxy", True),
    (ProtocolError, "connection", True),
    (LocationParseError, "bad_url", False),
    (HTTPError, "http", True),
    ((OSError, ValueError), "connection", True),
)
"""After the connection errors: exception classes -> error kind and whether another
attempt may succeed, the most specific first."""


# -- the request deadline: a watchdog that shuts sockets down ----------------------


@dataclass(eq=False)
class _Deadline:
    """One request's deadline and the sockets it has used so far."""

    at: float
    sockets: list[socket.socket] = field(default_factory=list)
    expired: bool = False
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.append(sock)
            expired = self.expired
        if expired:  # the deadline passed while connecting: cut at once
            _shut(sock)

    def finish(self) -> None:
        with self.lock:
            self.done = True
            self.sockets.clear()

    def expire(self) -> None:
        with self.lock:
            if self.done:
                return
            self.expired = True
            sockets = list(self.sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown(), not close(): the reading thread still owns the descriptor, and a
    # closed number could be reused by another thread's new socket. The plain socket
    # method also works on an SSLSocket without touching its TLS state.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One thread that ends requests whose deadline passed, by shutting their sockets.

    Checking the clock between reads cannot stop a server that sends one byte just
    before each read timeout: the read never returns. Shutting the socket down from
    another thread makes that blocked read return at once, whatever the server does.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._asleep_until = math.inf
        """When the thread, asleep, looks at the heap again by itself: a deadline later than
        that needs no wake-up."""

    def watch(self, deadline: _Deadline) -> None:
        with self._wake:
            # Finished requests leave the heap here, oldest first, so it holds about the
            # requests in flight, not every request of the last 2 × timeout_s.
            while self._heap and self._heap[0][2].done:
                heapq.heappop(self._heap)
            # Deadlines are mostly later than the one the thread sleeps until: it need not
            # wake (a wake-up per request cost a context switch and a turn of the GIL). The
            # heap's first deadline is no guide: once the requests before have finished and
            # left the heap, it is empty, and every request had woken the thread.
            earliest = deadline.at < self._asleep_until
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="fetch-deadlines", daemon=True
                )
                self._thread.start()
            if earliest:
                self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._heap.clear()
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._heap or self._heap[0][0] > self.clock()):
                    self._asleep_until = self._heap[0][0] if self._heap else math.inf
                    wait = self._asleep_until - self.clock() if self._heap else None
                    self._wake.wait(wait)
                if self._closed:
                    return
                _, _, due = heapq.heappop(self._heap)
            due.expire()


def _start_deadline(watchdog: _Watchdog, at: float) -> _Deadline:
    """Make ``at`` the deadline of every socket this thread uses until
    :func:`_end_deadline` (two plain calls, not a generator-based context manager: this
    runs once per request)."""
    deadline = _Deadline(at)
    _current.deadline = deadline
    watchdog.watch(deadline)
    return deadline


def _end_deadline(deadline: _Deadline) -> None:
    _current.deadline = None
    deadline.finish()


def _request_sent() -> None:
    """The request this thread is making went out (its first bytes, once connected):
    call what the caller asked to be told then, once."""
    sent: Callable[[], None] | None = getattr(_current, "on_send", None)
    if sent is not None:
        _current.on_send = None
        sent()


_current = threading.local()
"""The deadline of the request this thread is making, and what to call once it is sent
(read by the connections below)."""


def _attach(sock: socket.socket | None) -> None:
    deadline: _Deadline | None = getattr(_current, "deadline", None)
    if deadline is not None and sock is not None:
        deadline.attach(sock)


class _SteadyTimeoutSocket(socket.socket):
    """A socket whose ``settimeout`` makes no system call when the timeout stays the
    same. urllib3 sets it twice a request (before the request and before the response),
    each an ``ioctl`` with the GIL let go, and the Fetcher's connect and read timeouts
    are one value. (``gettimeout`` reads what every method that changes the mode set.)"""

    __slots__ = ()

    def settimeout(self, value: float | None) -> None:
        if value != self.gettimeout():
            super().settimeout(value)


class _GuardedMixin:
    """Hands every socket a connection uses to the current request's deadline.

    ``sock`` is a property so that both the plain socket (set before the TLS handshake,
    which a server can drip too) and the wrapped one are seen, whatever urllib3 does
    in between; a kept-alive connection reports its socket at each new request.
    """

    _guarded_sock: socket.socket | None = None
    _sent_on: socket.socket | None = None
    """The socket a request of this connection last went out on."""

    @property
    def sock(self) -> socket.socket | None:
        return self._guarded_sock

    @sock.setter
    def sock(self, value: socket.socket | None) -> None:
        if type(value) is socket.socket:  # a plain TCP socket (TLS wraps it later)
            value.__class__ = _SteadyTimeoutSocket
        self._guarded_sock = value
        _attach(value)

    def request(self, *args: object, **kwargs: object) -> None:
        _attach(self._guarded_sock)
        # Kept alive: an earlier request went out on this very socket (a new one is
        # connected here, or for TLS just before).
        _current.reused = self._guarded_sock is not None and self._guarded_sock is self._sent_on
        super().request(*args, **kwargs)  # type: ignore[misc]
        self._sent_on = self._guarded_sock

    def send(self, data: object) -> None:
        super().send(data)  # type: ignore[misc]
        _request_sent()


class _GuardedHTTPConnection(_GuardedMixin, urllib3.connection.HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedMixin, urllib3.connection.HTTPSConnection):
    pass


class _GuardedHTTPConnectionPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSConnectionPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


_GUARDED_POOLS = {"http": _GuardedHTTPConnectionPool, "https": _GuardedHTTPSConnectionPool}

_NO_RETRIES = Retry(total=False, redirect=False)
"""What urllib3 makes of ``retries=False`` on every call, made once (it is immutable)."""

KEPT_ALIVE_TRIES = 3
"""Times a request is sent at most while each try fails on a kept-alive connection that
the server closed unanswered (see Fetcher._open)."""

_CLOSED_UNANSWERED = (RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                      ConnectionAbortedError)  # fmt: skip
"""What a connection closed by its server before any answer raises (urllib3 wraps it in
a ProtocolError)."""


def closed_unanswered(exc: Exception) -> bool:
    """Whether ``exc`` is the connection closing before any byte of an answer came."""
    return isinstance(exc, ProtocolError) and any(
        isinstance(arg, _CLOSED_UNANSWERED) for arg in exc.args
    )


UNREACHABLE_KINDS = frozenset({"dns", "connection_refused"})
"""Failures that say a host cannot answer at all: its name does not resolve, or nothing
listens on its port. Each is remembered for the rest of the run (:class:`UnreachableHosts`)."""


class UnreachableHosts:
    """The hosts of this run whose name did not resolve or whose port refused the
    connection, so that each is tried once per run, not once per URL (a link checker's
    800 links to a dead host cost 800 lookups and as many crawl delays).

    Until a host has answered once (or failed otherwise: a timeout is no verdict on the
    name), its requests take turns, so that several threads do not all try the dead
    host at once. A new run (a resume) tries every host again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: dict[str, str] = {}
        """"host" (DNS) or "host:port" (refused) -> the error kind."""
        self._turns: dict[str, threading.Lock] = {}
        """A lock per host not reached yet, held by the one request trying it."""
        self._reached: set[str] = set()

    def cause(self, host: str, port: int) -> str | None:
        """The error kind that made ``host`` (at ``port``) unreachable this run, or None."""
        if not self._failed:
            return None
        return self._failed.get(host) or self._failed.get(f"{host}:{port}")

    @contextlib.contextmanager
    def first_contact(self, host: str, port: int) -> Iterator[None]:
        """Around a request: until the host answered once, one request at a time, and a
        DNS failure or refusal that escapes is remembered. A host that answered before is
        not given up on when it refuses later (a server restarting)."""
        key = f"{host}:{port}"
        if key in self._reached:  # a set lookup: the common case takes no lock
            yield
            return
        with self._lock:
            turn = self._turns.setdefault(key, threading.Lock())
        with turn:
            trying = key not in self._reached
            if trying:
                cause = self.cause(host, port)
                if cause is not None:
                    raise FetchError(cause, f"{key} failed earlier in this run", retryable=False)
                try:
                    yield
                except FetchError as exc:
                    if exc.kind in UNREACHABLE_KINDS:
                        with self._lock:
                            self._failed[host if exc.kind == "dns" else key] = exc.kind
                            self._turns.pop(key, None)
                        logger.info("%s: %s; not tried again in this run", key, exc.kind)
                    else:
                        self._contacted(key)
                    raise
                self._contacted(key)
        if not trying:
            # It answered while this request waited its turn: the requests that waited
            # go together now, not one after another (a host a worker took over sent
            # its first 4 pages 51, 103, 155 and 207 ms after they were taken).
            yield

    def _contacted(self, key: str) -> None:
        with self._lock:
            self._reached.add(key)
            self._turns.pop(key, None)


@functools.lru_cache(maxsize=4096)
def _authority(scheme: str, netloc: str) -> tuple[str, int, str]:
    """A URL's host as the settings name it (lowercase, no final dot: "a.test." must not
    slip past crawl.resolve), its port, and its host as urllib3 connects to it; cached:
    a crawl's URLs share a few authorities.

    Raises:
        ValueError: an authority urllib.parse refuses ("[::1", a port that is no number).
    """
    parts = urlsplit(f"{scheme}://{netloc}")
    host = (parts.hostname or "").lower().rstrip(".")
    return host, parts.port or (443 if scheme == "https" else 80), parts.hostname or ""


class Fetcher:
    """Sends GET requests the way a polite robot must, for every DownloadingThread.

    It is a service like a connection pool (urllib3's PoolManager is
    thread-safe); threads exchange nothing through it.

    With ``crawl.proxy`` every request goes through that HTTP forward proxy
    (absolute-form GET for http, a CONNECT tunnel for https) and the proxy
    resolves host names, so ``crawl.resolve`` does not apply.

    Args:
        settings: the ``crawl:`` section.
        cookie_jar: where cookies live (RFC 6265 rules are the jar's); None = no cookies.
        on_cookies_changed: called (without locks held) after a response set or
            removed cookies, so the owner can save the jar.
        hosts_kept: hosts whose connections stay open between their requests, the most
            recently asked first (urllib3's ``num_pools``): past them, a host's next
            request opens a new connection, and over TLS a new handshake.
    """

    def __init__(
        self,
        settings: CrawlSettings,
        cookie_jar: CookieJar | None = None,
        *,
        on_cookies_changed: Callable[[], None] | None = None,
        hosts_kept: int = 64,
    ) -> None:
        self.settings = settings
        self.hosts_kept = max(1, hosts_kept)
        self.cookie_jar = cookie_jar if settings.cookies else None
        self.cookie_lock = threading.RLock()
        """Held around every use of the jar; hold it to serialize the jar consistently."""
        self.on_cookies_changed = on_cookies_changed
        if self.cookie_jar is not None:
            self.cookie_jar.set_policy(CrawlerCookiePolicy(self.cookie_jar))
        self.timeout = urllib3.Timeout(connect=settings.timeout_s, read=settings.timeout_s)
        self.resolve = dict(settings.resolve)
        headers = {
            "User-Agent": settings.user_agent,
            "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5",
            "Accept-Encoding": _accept_encoding(),
        }
        if settings.from_:
            headers["From"] = settings.from_
        headers.update(settings.headers)
        self.headers = headers
        pool_kwargs: dict[str, object] = {
            "num_pools": self.hosts_kept,
            "maxsize": 16,
            "block": False,
            "retries": False,
            "timeout": self.timeout,
        }
        # One TLS context for every connection. urllib3 made one for each, and loaded the
        # system's certificates into it: 25 ms of CPU a connection, and about a megabyte
        # kept by each open one (a polite crawl of 300 HTTPS hosts, a connection each:
        # 14.8 CPU s and 338 MB; with one context 8.9 s and 97 MB).
        context = create_urllib3_context(
            cert_reqs=ssl.CERT_REQUIRED if settings.verify_tls else ssl.CERT_NONE
        )
        pool_kwargs["ssl_context"] = context
        if settings.verify_tls:
            context.load_default_certs()
        else:
            pool_kwargs["cert_reqs"] = "CERT_NONE"
            pool_kwargs["assert_hostname"] = False
            # The user asked for it once in settings.yaml; urllib3 would warn on every request.
            warnings.filterwarnings("ignore", category=InsecureRequestWarning)
            logger.warning("TLS certificates are not verified (crawl.verify_tls: false)")
        self.pool: urllib3.PoolManager
        if settings.proxy and self.resolve:
            logger.info("crawl.resolve does not apply through crawl.proxy: the proxy resolves")
        if settings.proxy:
            self.pool = urllib3.ProxyManager(
                settings.proxy,
                proxy_headers=_proxy_auth_headers(settings.proxy),
                **pool_kwargs,  # type: ignore[arg-type]
            )
        else:
            self.pool = urllib3.PoolManager(**pool_kwargs)  # type: ignore[arg-type]
        # Our connection classes report their sockets to the request's deadline.
        self.pool.pool_classes_by_scheme = _GUARDED_POOLS
        self._pools: dict[tuple[str, int, str], urllib3.HTTPConnectionPool] = {}
        self.request_deadline_s = request_deadline(settings.timeout_s)
        self.watchdog = _Watchdog()
        self.unreachable = UnreachableHosts()
        """Hosts whose name did not resolve or that refused the connection, this run."""

    def forget_hosts(self, hosts: Iterable[str]) -> None:
        """Close the connections kept for ``hosts``: the crawl is done with them (their
        sites ended). An idle TLS connection holds about 90 KB; kept until evicted, a
        long crawl would hold one for every site it had crawled, up to ``hosts_kept``.
        A later request to one of them connects anew."""
        names = {_authority("http", host)[0] for host in hosts}
        for key in self.pool.pools.keys():  # noqa: SIM118 (the container has no iter)
            if key.key_host in names or key.key_server_hostname in names:
                with contextlib.suppress(KeyError):
                    del self.pool.pools[key]  # closes its pool's idle connections

    def close(self) -> None:
        self.watchdog.close()
        self._pools.clear()
        self.pool.clear()

    def get(
        self,
        url: str,
        *,
        referer: str = "",
        max_bytes: int | None = None,
        on_send: Callable[[], None] | None = None,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """GET ``url`` (or HEAD it, for a link checker); redirects are returned, not followed.

        The body is decoded (gzip, deflate, br) and cut after ``max_bytes``
        (default ``crawl.max_body_bytes``), which also ends an endless body.

        Raises:
            FetchError: a transport failure, with whether to retry.
        """
        max_bytes = self.settings.max_body_bytes if max_bytes is None else max_bytes
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            host, port, address = _authority(scheme, parts.netloc)
        except ValueError as exc:  # "http://[::1", a port that is not a number
            raise FetchError("bad_url", str(exc), retryable=False) from exc
        cause = self.unreachable.cause(host, port)
        if cause is not None:
            raise FetchError(cause, f"{url}: {host} failed earlier in this run", retryable=False)
        headers = {**self.headers, **headers} if headers else self.headers.copy()
        referer = referer_header(referer, url)
        if referer:
            headers["Referer"] = referer
        if self.cookie_jar is not None:
            cookie = self._cookie_header(url)
            if cookie:
                headers["Cookie"] = cookie
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        started = time.monotonic()
        deadline = _start_deadline(self.watchdog, started + self.request_deadline_s)
        # Through a proxy, the proxy resolves and connects: its failures are not the host's.
        contact = (
            contextlib.nullcontext() if self.settings.proxy
            else self.unreachable.first_contact(host, port)
        )  # fmt: skip
        try:
            with contact:
                resp, body, truncated = self._send(
                    url, parts.netloc, scheme, host, port, target, headers, max_bytes, on_send,
                    method, address=address,
                )  # fmt: skip
        except FetchError as exc:
            if deadline.expired:
                raise FetchError("timeout", f"{url}: over the request deadline",
                                 retryable=True) from exc  # fmt: skip
            raise
        finally:
            _end_deadline(deadline)
        if deadline.expired:  # a body without a length just ends when cut
            raise FetchError("timeout", f"{url}: over the request deadline", retryable=True)
        received = tuple(resp.headers.items())  # one pass over urllib3's header dict
        response_headers = {k.lower(): v for k, v in received}
        if self.cookie_jar is not None:
            self._store_cookies(url, resp.headers)
        headers.setdefault("Host", parts.netloc.rsplit("@", 1)[-1])
        exchange = HttpExchange(
            url=url, method=method, target=target, request_headers=tuple(headers.items()),
            http_version="HTTP/1.0" if resp.version == 10 else "HTTP/1.1",
            reason=resp.reason or "", response_headers=received,
        )  # fmt: skip
        return Response(
            exchange=exchange,
            status=resp.status,
            headers=response_headers,
            body=body,
            truncated=truncated,
            elapsed=time.monotonic() - started,
        )

    def unreachable_cause(self, url: str) -> str | None:
        """Why ``url``'s host cannot be reached in this run (``dns``, ``connection_refused``),
        or None: a request to it would fail at once, so a caller need not wait its turn."""
        try:
            parts = urlsplit(url)
            host, port, _address = _authority(parts.scheme.lower(), parts.netloc)
        except ValueError:
            return None
        return self.unreachable.cause(host, port)

    def _connection_pool(self, address: str, port: int, scheme: str) -> urllib3.HTTPConnectionPool:
        """urllib3's pool for a host, looked up once per host, not per request: the
        PoolManager builds and normalizes a key under its lock for every lookup. A pool
        the manager has since closed (it keeps the ``num_pools`` most recent) is looked
        up again; past as many hosts as the manager keeps, this forgets them all."""
        key = (address, port, scheme)
        pool = self._pools.get(key)
        if pool is None or pool.pool is None:  # None: closed by the manager
            pool = self.pool.connection_from_host(address, port, scheme)
            if len(self._pools) >= self.hosts_kept:
                self._pools.clear()
            self._pools[key] = pool
        return pool

    def _send(
        self,
        url: str,
        netloc: str,
        scheme: str,
        host: str,
        port: int,
        target: str,
        headers: dict[str, str],
        max_bytes: int,
        on_send: Callable[[], None] | None,
        method: str = "GET",
        *,
        address: str = "",
    ) -> tuple[urllib3.BaseHTTPResponse, bytes, bool]:
        """Send the request and read the body; transport failures become FetchError.

        ``address`` is the URL's host as urllib3 connects to it (``host`` is the name
        the settings know it by, its final dot dropped)."""
        # on_send is called as the request goes out: after the name lookup, the connection
        # and the TLS handshake (round trips to a host far away), since the host's crawl
        # delay counts from it. Called first, it had let a request reuse the connection
        # robots.txt opened arrive less than the delay after robots.txt itself.
        _current.on_send = on_send
        try:
            mapped = self.resolve.get(f"{host}:{port}") if self.resolve else None
            if mapped is not None and not self.settings.proxy:
                # Connect to the mapped address, but speak to the named host: Host
                # header, SNI and the certificate check all use the name (curl --resolve).
                ip, _, mapped_port = mapped.rpartition(":")
                headers["Host"] = netloc.rsplit("@", 1)[-1]
                pool_kwargs = {"server_hostname": host} if scheme == "https" else None
                if scheme == "https" and self.settings.verify_tls:
                    pool_kwargs = {"server_hostname": host, "assert_hostname": host}
                conn = self.pool.connection_from_host(
                    ip.strip("[]"), int(mapped_port), scheme, pool_kwargs=pool_kwargs
                )
            elif self.settings.proxy or not address:
                conn = None  # the proxy manager picks the connection from the whole URL
            else:
                # What PoolManager.urlopen would do, from the URL already split: it
                # would parse the URL again, for its pool and for the target.
                conn = self._connection_pool(address, port, scheme)
            resp = self._open(conn, method, url, target, headers)
            truncated = False
            try:
                # One read of at most max_bytes + 1 decoded bytes: the whole of an
                # ordinary page in one call (not a loop over 64 KiB pieces), and an
                # endless or huge body is cut there.
                body = resp.read(max_bytes + 1, decode_content=True)
                if len(body) > max_bytes:
                    truncated = True
                    body = body[:max_bytes]
            finally:
                if truncated or not resp.closed:
                    resp.close()  # never drain an endless or huge body
                resp.release_conn()
        except Exception as exc:
            raise transport_error(exc) from exc
        finally:
            _request_sent()  # a request that failed before it went out counts as well
        return resp, body, truncated

    def _open(
        self, conn: urllib3.HTTPConnectionPool | None, method: str, url: str, target: str,
        headers: dict[str, str],
    ) -> urllib3.BaseHTTPResponse:  # fmt: skip
        """Send the request (through ``conn``'s pool, or the manager's) until its answer
        starts; again, on another connection, if a kept-alive one turns out closed.

        A server closes an idle connection when its keep-alive timeout runs out; a
        request sent as its close is on the way (a round trip's window) finds it closed
        with no answer. The request never reached the site, and curl and browsers send
        it again at once; this failed the page, retried much later as a connection
        error. Only GET and HEAD are sent, and only a kept-alive connection is tried
        again: a new connection closed unanswered is the server's answer, as is a
        request deadline run out.
        """
        tries_left = KEPT_ALIVE_TRIES
        while True:
            tries_left -= 1
            _current.reused = False
            try:
                if conn is None:
                    return self.pool.urlopen(
                        method, url, headers=headers, redirect=False, retries=_NO_RETRIES,
                        preload_content=False, timeout=self.timeout,
                    )  # fmt: skip
                return conn.urlopen(
                    method, target, headers=headers, redirect=False, retries=_NO_RETRIES,
                    preload_content=False, assert_same_host=False, timeout=self.timeout,
                )  # fmt: skip
            except ProtocolError as exc:
                deadline: _Deadline | None = getattr(_current, "deadline", None)
                expired = deadline is not None and deadline.expired
                if not (tries_left and _current.reused and closed_unanswered(exc)) or expired:
                    raise
                logger.debug("%s: the kept-alive connection was closed unanswered; "
                             "sent again", url)  # fmt: skip

    def download(
        self,
        url: str,
        *,
        referer: str = "",
        on_send: Callable[[], None] | None = None,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> DownloadResult:
        """GET ``url`` and describe the outcome as a DownloadResult (errors are data).

        ``headers`` are a site's own extra request headers (``sites:`` overrides).
        """
        try:
            response = self.get(
                url, referer=referer, on_send=on_send, headers=headers, max_bytes=max_bytes
            )
        except FetchError as exc:
            # The kind goes to the report; the detail (which certificate, which
            # socket error) is only here.
            level = logging.DEBUG if exc.retryable else logging.INFO
            logger.log(level, "GET %s failed: %s", url, exc)
            return DownloadResult(error=exc.kind, retryable=exc.retryable)
        location = ""
        if 300 <= response.status < 400:
            location = location_text(response.headers.get("location", "")).strip()
        retry_after = None
        if response.status in (429, 503):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            cap = self.settings.max_crawl_delay_ms / 1000.0
            if retry_after is not None and retry_after > cap:
                # The same ceiling as robots.txt's Crawl-delay: "come back in a year"
                # must not keep the site (and so the crawl) from ever ending.
                logger.warning("%s: Retry-After %.0f s is capped to %g s "
                               "(crawl.max_crawl_delay_ms)", url, retry_after, cap)  # fmt: skip
                retry_after = cap
        return DownloadResult(
            status=response.status,
            content_type=response.headers.get("content-type", ""),
            body=response.body,
            location=location,
            retry_after=retry_after,
            truncated=response.truncated,
            elapsed=response.elapsed,
            throttle=self.settings.auto_throttle,
            exchange=response.exchange,
            robots_tags=robots_tags(response.exchange),
            etag=response.headers.get("etag", "").strip(),
            last_modified=response.headers.get("last-modified", "").strip(),
        )

    # -- cookies: the standard library's jar does the RFC 6265 matching ---------
    def _cookie_header(self, url: str) -> str:
        assert self.cookie_jar is not None
        with self.cookie_lock:
            if not len(self.cookie_jar):
                return ""  # most sites set none: skip building a Request per page
            request = urllib.request.Request(url)
            self.cookie_jar.add_cookie_header(request)
        return cap_cookie_header(request.get_header("Cookie") or "")

    def _store_cookies(self, url: str, headers: urllib3.HTTPHeaderDict) -> None:
        assert self.cookie_jar is not None
        if "set-cookie" not in headers and "set-cookie2" not in headers:
            return
        response = _CookieResponse(headers)
        with self.cookie_lock:
            self.cookie_jar.extract_cookies(response, urllib.request.Request(url))  # type: ignore[arg-type]
        if self.on_cookies_changed is not None:
            self.on_cookies_changed()


class _CookieMessage:
    """The slice of email.message.Message that CookieJar.extract_cookies reads."""

    def __init__(self, headers: urllib3.HTTPHeaderDict) -> None:
        self._headers = headers

    def get_all(self, name: str, default: list[str] | None = None) -> list[str]:
        values = self._headers.getlist(name)
        return values if values else (default if default is not None else [])


class _CookieResponse:
    def __init__(self, headers: urllib3.HTTPHeaderDict) -> None:
        self._message = _CookieMessage(headers)

    def info(self) -> _CookieMessage:
        return self._message


def _proxy_auth_headers(proxy: str) -> dict[str, str] | None:
    """Proxy-Authorization (Basic) from ``http://user:pass@host:port``; urllib3 does not
    take credentials from the proxy URL itself."""
    parts = urlsplit(proxy)
    if parts.username is None:
        return None
    return urllib3.make_headers(
        proxy_basic_auth=f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    )
