"""The HTTP layer: one GET over urllib3, polite headers, bounded bodies, no automatic redirects."""

from __future__ import annotations

import email.utils
import logging
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    HTTPError,
    InsecureRequestWarning,
    LocationParseError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

from rccrawler.records import DownloadResult

if TYPE_CHECKING:
    from rccrawler.config import CrawlSettings

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024


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
    wire_bytes: int


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
    parts = urlsplit(referer)
    if parts.scheme.lower() == "https" and urlsplit(url).scheme.lower() != "https":
        return ""
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))


def rfc6265_cookie_policy() -> DefaultCookiePolicy:
    """The standard library's cookie rules, tightened where RFC 6265 is stricter.

    http.cookiejar's default (Netscape) policy sends a cookie set without ``Domain``
    to subdomains too; RFC 6265 §5.3 makes such a cookie host-only. Domain matching,
    path matching, ``Secure`` and expiry (``Max-Age``, ``Expires``) are the jar's own.
    """
    return DefaultCookiePolicy(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)


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
    """

    def __init__(
        self,
        settings: CrawlSettings,
        cookie_jar: CookieJar | None = None,
        *,
        on_cookies_changed: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.cookie_jar = cookie_jar if settings.cookies else None
        self.cookie_lock = threading.RLock()
        """Held around every use of the jar; hold it to serialize the jar consistently."""
        self.on_cookies_changed = on_cookies_changed
        if self.cookie_jar is not None:
            self.cookie_jar.set_policy(rfc6265_cookie_policy())
        self.timeout = urllib3.Timeout(connect=settings.timeout_s, read=settings.timeout_s)
        self.resolve = dict(settings.resolve)
        headers = {
            "User-Agent": settings.user_agent,
            "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5",
            "Accept-Encoding": _accept_encoding(),
        }
        if settings.from_:
            headers["From"] = settings.from_
        self.headers = headers
        pool_kwargs: dict[str, object] = {
            "num_pools": 64,
            "maxsize": 16,
            "block": False,
            "retries": False,
            "timeout": self.timeout,
        }
        if not settings.verify_tls:
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

    def close(self) -> None:
        self.pool.clear()

    def get(
        self,
        url: str,
        *,
        referer: str = "",
        max_bytes: int | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> Response:
        """GET ``url``; redirects are returned, not followed.

        The body is decoded (gzip, deflate, br) and cut after ``max_bytes``
        (default ``crawl.max_body_bytes``), which also ends an endless body.

        Raises:
            FetchError: a transport failure, with whether to retry.
        """
        from rccrawler.exceptions import FetchError

        max_bytes = self.settings.max_body_bytes if max_bytes is None else max_bytes
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if scheme == "https" else 80)
        headers = dict(self.headers)
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
        deadline = started + 2 * self.settings.timeout_s
        try:
            if on_send is not None:
                on_send()
            mapped = self.resolve.get(f"{host}:{port}")
            if mapped is not None and not self.settings.proxy:
                # Connect to the mapped address, but speak to the named host: Host
                # header, SNI and the certificate check all use the name (curl --resolve).
                ip, _, mapped_port = mapped.rpartition(":")
                headers["Host"] = parts.netloc.rsplit("@", 1)[-1]
                pool_kwargs = {"server_hostname": host} if scheme == "https" else None
                if scheme == "https" and self.settings.verify_tls:
                    pool_kwargs = {"server_hostname": host, "assert_hostname": host}
                conn = self.pool.connection_from_host(
                    ip.strip("[]"), int(mapped_port), scheme, pool_kwargs=pool_kwargs
                )
                resp = conn.urlopen(
                    "GET", target, headers=headers, redirect=False, retries=False,
                    preload_content=False, assert_same_host=False, timeout=self.timeout,
                )  # fmt: skip
            else:
                resp = self.pool.urlopen(
                    "GET", url, headers=headers, redirect=False, retries=False,
                    preload_content=False, timeout=self.timeout,
                )  # fmt: skip
            truncated = False
            try:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.stream(_CHUNK, decode_content=True):
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        truncated = True
                        break
                    if time.monotonic() > deadline:
                        raise FetchError("timeout", f"body of {url} too slow", retryable=True)
                body = b"".join(chunks)
                if truncated:
                    body = body[:max_bytes]
                wire = resp.tell()
            finally:
                if truncated or not resp.closed:
                    resp.close()  # never drain an endless or huge body
                resp.release_conn()
        except (ConnectTimeoutError, ReadTimeoutError) as exc:
            raise FetchError("timeout", str(exc), retryable=True) from exc
        except SSLError as exc:
            raise FetchError("tls", str(exc), retryable=False) from exc
        except DecodeError as exc:
            raise FetchError("decode", str(exc), retryable=False) from exc
        except (NewConnectionError, ProxyError) as exc:
            raise FetchError("connection", str(exc), retryable=True) from exc
        except ProtocolError as exc:
            raise FetchError("connection", str(exc), retryable=True) from exc
        except LocationParseError as exc:
            raise FetchError("bad_url", str(exc), retryable=False) from exc
        except HTTPError as exc:
            raise FetchError("http", str(exc), retryable=True) from exc
        except OSError as exc:
            raise FetchError("connection", str(exc), retryable=True) from exc
        response_headers = {k.lower(): v for k, v in resp.headers.items()}
        if self.cookie_jar is not None:
            self._store_cookies(url, resp.headers)
        return Response(
            status=resp.status,
            headers=response_headers,
            body=body,
            truncated=truncated,
            elapsed=time.monotonic() - started,
            wire_bytes=wire,
        )

    def download(
        self, url: str, *, referer: str = "", on_send: Callable[[], None] | None = None
    ) -> DownloadResult:
        """GET ``url`` and describe the outcome as a DownloadResult (errors are data)."""
        from rccrawler.exceptions import FetchError

        try:
            response = self.get(url, referer=referer, on_send=on_send)
        except FetchError as exc:
            # The kind goes to the report; the detail (which certificate, which
            # socket error) is only here.
            level = logging.DEBUG if exc.retryable else logging.INFO
            logger.log(level, "GET %s failed: %s", url, exc)
            return DownloadResult(error=exc.kind, retryable=exc.retryable)
        location = ""
        if 300 <= response.status < 400:
            location = response.headers.get("location", "").strip()
        retry_after = None
        if response.status in (429, 503):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        return DownloadResult(
            status=response.status,
            content_type=response.headers.get("content-type", ""),
            body=response.body,
            location=location,
            retry_after=retry_after,
            truncated=response.truncated,
            elapsed=response.elapsed,
            wire_bytes=response.wire_bytes,
            throttle=self.settings.auto_throttle,
        )

    # -- cookies: the standard library's jar does the RFC 6265 matching ---------
    def _cookie_header(self, url: str) -> str:
        assert self.cookie_jar is not None
        with self.cookie_lock:
            if not len(self.cookie_jar):
                return ""  # most sites set none: skip building a Request per page
            request = urllib.request.Request(url)
            self.cookie_jar.add_cookie_header(request)
        return request.get_header("Cookie") or ""

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
