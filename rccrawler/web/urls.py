"""URL identity (SPEC §6), link resolution (RFC 3986 §5) and link scope: pure functions."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

__all__ = [
    "SCHEME",
    "SUB_DELIMS_CLASS",
    "UNRESERVED_CLASS",
    "NormalizeOptions",
    "canonical_escape",
    "escape_pattern",
    "host_of",
    "link_scope",
    "named_authorities",
    "normalize_url",
    "own_request_block",
    "request_url",
    "resolve_link",
    "site_start_url",
]

_CACHE_SIZE = 4_096  # sized for repeated navigation links; unique ones only cost memory
_AUTHORITY_CACHE_SIZE = 8_192
_DNS_CACHE_SIZE = 4_096

_DEFAULT_PORTS = {"http": "80", "https": "443"}

# RFC 3986 Appendix B, except that the scheme must be ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
# (§3.1): "a b:c" or "1:x" are then relative paths, as browsers read them. It matches any string.
SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"
"""RFC 3986 §3.1 scheme syntax, as a regex."""
_URI = re.compile(
    rf"(?:({SCHEME}):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?",
    re.DOTALL,
)
# WHATWG URL: strip leading/trailing C0 controls and spaces, drop tabs and newlines anywhere.
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
UNRESERVED_CLASS = r"A-Za-z0-9\-._~"
"""RFC 3986 §2.3 unreserved characters, as the inside of a regex character class."""
SUB_DELIMS_CLASS = r"!$&'()*+,;="
"""RFC 3986 §2.2 sub-delims, as the inside of a regex character class."""


def escape_pattern(allowed: str) -> re.Pattern[str]:
    """A percent-escape, or one character outside ``allowed`` (the inside of a character
    class): what a component's normalization rewrites. A stray "%" is such a character."""
    return re.compile(rf"%[0-9A-Fa-f]{{2}}|[^{allowed}]")


# What RFC 3986 allows raw in each component: §3.3 pchar and "/", §3.4 adds "?".
_PATH_FIX = escape_pattern(UNRESERVED_CLASS + SUB_DELIMS_CLASS + ":@/")
_QUERY_FIX = escape_pattern(UNRESERVED_CLASS + SUB_DELIMS_CLASS + ":@/?")
_USERINFO_FIX = escape_pattern(UNRESERVED_CLASS + SUB_DELIMS_CLASS + ":")
_SLASHES = re.compile(r"//+")
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")
_REG_NAME = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")
_IPV4 = re.compile(r"[0-9]+(?:\.[0-9]+){3}")
# "mailto:x" has a scheme; "localhost:8080" or "a.test:8080/x" is a bare host with a port.
_SITE_SCHEME = re.compile(rf"{SCHEME}:(?![0-9]*(?:[/?#]|$))")


@dataclass(frozen=True, slots=True)
class NormalizeOptions:
    """The two SPEC §6 normalizations that are off by default (they can merge distinct pages)."""

    add_trailing_slash: bool = False
    """"/a" -> "/a/" when the last path segment has no dot (looks like a directory)."""
    ip_to_domain: bool = False
    """Replace an IP host by its reverse-DNS name (cached per process); a failed lookup keeps it."""


_DEFAULT_OPTIONS = NormalizeOptions()


def normalize_url(url: str, options: NormalizeOptions = _DEFAULT_OPTIONS) -> str | None:
    """The page identity (SPEC §6) of an absolute http(s) URL: one identity = one page.

    Userinfo (``user:pass@``) is dropped: credentials do not name a different page, and an
    identity is written to the output, where credentials must not leak.

    Args:
        url: An absolute URL, typically from :func:`resolve_link`.
        options: The optional normalizations.

    Returns:
        The normalized URL, or None when ``url`` is not a usable http(s) URL.
    """
    return _normalize(url, options.add_trailing_slash, options.ip_to_domain)


def resolve_link(base: str, href: str) -> str | None:
    """Resolve ``href`` against the absolute ``base`` per RFC 3986 §5.2, without the fragment.

    ``urllib.parse.urljoin`` is not used: it gives ``http://a/b/c/g`` for ``http:g`` (the
    RFC's "backward compatibility" reading), and we follow the strict one (§5.4.2).
    Surrounding whitespace and inner tabs/newlines are removed, as browsers do.

    Returns:
        The absolute URL as found (not normalized, maybe of another scheme), or None when
        ``href`` is empty or ``base`` is not absolute.
    """
    href = _clean(href)
    if not href:
        return None
    return _resolve(_clean(base), href)


def request_url(url: str) -> str:
    """The URL to send on the wire (SPEC §6): the URL as found, fragment dropped.

    Only what a request target may not contain is changed: such characters (space,
    non-ASCII as UTF-8, a stray ``%``...) are percent-encoded and an IDN host is punycoded.
    Parameter order, case and existing escapes are kept, since a server may care.

    Raises:
        ValueError: The host cannot be IDNA-encoded (``normalize_url`` gives None for it).
    """
    scheme, authority, path, query, _fragment = _split(_clean(url))
    parts = []
    if scheme is not None:
        parts.append(scheme + ":")
    if authority is not None:
        parts.append("//" + _request_authority(authority))
    parts.append(_PATH_FIX.sub(_keep_escape, path))
    if query is not None:
        parts.append("?" + _QUERY_FIX.sub(_keep_escape, query))
    return "".join(parts)


def site_start_url(site: str) -> str:
    """The start URL of a ``sites:`` entry (SPEC §4), ready to be requested.

    A bare ``example.org``, ``example.org:8080`` or ``example.org/docs/`` gets ``http://``;
    a URL keeps its scheme, host, port, path and query. An empty path becomes ``/``.

    Raises:
        ValueError: The entry is empty, contains whitespace, has a non-http(s) scheme or no
            valid host.
    """
    text = site.strip()
    if not text:
        raise ValueError("empty site entry")
    if any(ch.isspace() for ch in text):
        raise ValueError(f"site {site!r} contains whitespace")
    if "://" in text:
        given = text.partition("://")[0]
        if given.lower() not in _DEFAULT_PORTS:
            raise ValueError(f"site {site!r}: scheme {given!r} is not http or https")
    elif match := _SITE_SCHEME.match(text):
        given = match.group()[:-1]
        if given.lower() in _DEFAULT_PORTS:
            raise ValueError(f"site {site!r}: expected {given.lower()}://host/")
        raise ValueError(f"site {site!r}: scheme {given!r} is not http or https")
    else:
        text = "http://" + text
    scheme, authority, path, query, _fragment = _split(text)
    if scheme is None or not authority or _normalize(text, False, False) is None:
        raise ValueError(f"site {site!r} has no valid host")
    url = f"{scheme.lower()}://{authority}{path or '/'}"
    if query is not None:
        url += "?" + query
    return request_url(url)


def host_of(url: str) -> str:
    """The ``HostData.host`` key of a URL: lowercase, punycoded ``host[:port]``.

    The default port of the scheme is removed, so http://a.test and https://a.test are one
    host (they share politeness limits).

    Raises:
        ValueError: The URL has no valid host.
    """
    scheme, authority, *_ = _split(_clean(url))
    host_port = (
        _split_authority(scheme.lower(), authority)
        if scheme is not None and authority is not None
        else None
    )
    if host_port is None:
        raise ValueError(f"{url!r} has no valid host")
    return _join_host_port(*host_port)


def link_scope(url: str, site_host: str) -> str | None:
    """Classify an absolute URL against a site (SPEC §5.3); only None is followed.

    Args:
        url: An absolute URL, e.g. from :func:`resolve_link`.
        site_host: The site's :func:`host_of` value.

    Returns:
        None when the URL is internal (same host and port; http and https alike);
        ``"scheme"`` when it is not http(s) (mailto:, javascript:, tel:, ftp:, data:... and
        URLs without a scheme, which cannot be fetched); ``"subdomain"`` when its host ends
        with ``"." + site host``; ``"external"`` for any other host, an unusable one included.
    """
    scheme, authority, *_ = _split(_clean(url))
    if scheme is None or scheme.lower() not in _DEFAULT_PORTS:
        return "scheme"
    host_port = _split_authority(scheme.lower(), authority) if authority is not None else None
    if host_port is None:
        return "external"
    if _join_host_port(*host_port) == site_host:
        return None
    if host_port[0].endswith("." + _host_name(site_host)):
        return "subdomain"
    return "external"


def own_request_block(url: str, named: frozenset[str]) -> str | None:
    """Why the crawler must not request ``url`` on its own initiative; None when it may.

    A request the crawler decides to make itself, not one a site's own link leads to
    within its host (a robots.txt redirect, a sitemap), could be aimed by a hostile site
    at services on the crawler's own network. It may go only to http(s), and never to a
    loopback, link-local, private or otherwise non-public address, nor to an IP literal,
    unless the settings name that ``host:port`` (as a site or a ``resolve:`` key).
    Names are resolved once here; every address they give must be public.

    Args:
        url: the absolute URL about to be requested.
        named: the ``host:port`` keys the settings name (ports always written).

    Returns:
        None, or a short reason: ``"scheme"``, ``"bad_url"``, ``"ip_literal"``,
        ``"private_address"``, ``"dns"``.
    """
    scheme, authority, *_ = _split(_clean(url))
    if scheme is None or scheme.lower() not in _DEFAULT_PORTS or authority is None:
        return "scheme"
    scheme = scheme.lower()
    host_port = _split_authority(scheme, authority)
    if host_port is None:
        return "bad_url"
    host, port = host_port
    if f"{host}:{port or _DEFAULT_PORTS[scheme]}" in named:
        return None
    if host.startswith("[") or _IPV4.fullmatch(host) or host.isdigit():
        return "ip_literal"
    try:
        infos = socket.getaddrinfo(host, int(port or _DEFAULT_PORTS[scheme]),
                                   type=socket.SOCK_STREAM)  # fmt: skip
    except (OSError, UnicodeError):
        return "dns"
    for *_rest, address in infos:
        ip = ipaddress.ip_address(str(address[0]).partition("%")[0])
        if not ip.is_global:
            return "private_address"
    return None


def named_authorities(sites: tuple[str, ...], resolve: Mapping[str, str]) -> frozenset[str]:
    """The ``host:port`` keys (port always written) that settings name: sites and ``resolve:``."""
    named = set()
    for url in (*sites, *(f"http://{key}" for key in resolve)):
        scheme, authority, *_ = _split(_clean(url))
        if scheme is None or authority is None or scheme.lower() not in _DEFAULT_PORTS:
            continue
        host_port = _split_authority(scheme.lower(), authority)
        if host_port is not None:
            host, port = host_port
            named.add(f"{host}:{port or _DEFAULT_PORTS[scheme.lower()]}")
    return frozenset(named)


# --- helpers -------------------------------------------------------------------------------


_Parts = tuple[str | None, str | None, str, str | None, str | None]


def _split(text: str) -> _Parts:
    """(scheme, authority, path, query, fragment); None for an absent part, "" for an empty one."""
    match = _URI.fullmatch(text)
    assert match is not None  # the pattern matches every string
    return match.groups()  # type: ignore[return-value]


@lru_cache(maxsize=64)
def _split_base(base: str) -> _Parts:
    """_split() of a base URL: a page resolves all its links against the same one."""
    return _split(base)


def _clean(text: str) -> str:
    """Remove what browsers ignore around and inside a URL (WHATWG URL parser, first steps)."""
    text = text.strip(_C0_AND_SPACE)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.translate(_TAB_NEWLINE)
    return text


@lru_cache(maxsize=_CACHE_SIZE)
def _normalize(url: str, add_trailing_slash: bool, ip_to_domain: bool) -> str | None:
    """normalize_url() with hashable arguments, cached: big pages repeat their links."""
    scheme, authority, path, query, _fragment = _split(_clean(url))
    if scheme is None or authority is None:  # "http:g" has no host to fetch from
        return None
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    host_port = _split_authority(scheme, authority)
    if host_port is None:
        return None
    host, port = host_port
    if ip_to_domain and (host.startswith("[") or _IPV4.fullmatch(host)):
        host = _domain_of_ip(host)

    if path:
        path = _PATH_FIX.sub(canonical_escape, path)
        if "//" in path:
            path = _SLASHES.sub("/", path)
        # After decoding, so that "%2E%2E" is a dot segment too (RFC 3986 §6.2.2 order).
        if _DOT_SEGMENT.search(path):
            path = _remove_dot_segments(path)
    if not path:
        path = "/"
    elif add_trailing_slash and path[-1] != "/" and "." not in path.rpartition("/")[2]:
        path += "/"

    query = _normalize_query(query) if query else ""
    return f"{scheme}://{_join_host_port(host, port)}{path}{'?' if query else ''}{query}"


def _normalize_query(query: str) -> str:
    """Sort the parameters by key, then value; drop those without a value (``a``, ``a=``)."""
    query = _QUERY_FIX.sub(canonical_escape, query)
    params = []
    for param in query.split("&"):
        key, _, value = param.partition("=")
        if value:
            params.append((key, value))
    params.sort()
    return "&".join([f"{key}={value}" for key, value in params])


def canonical_escape(match: re.Match[str]) -> str:
    """Decode an escape of an unreserved character, uppercase others, encode a bad char
    (RFC 3986 §6.2.2): the one form URLs and robots.txt patterns are compared in."""
    text = match.group()
    if len(text) == 3:
        char = chr(int(text[1:], 16))
        return char if char in _UNRESERVED else text.upper()
    return _percent_encode(text)


def _keep_escape(match: re.Match[str]) -> str:
    """Keep an escape exactly as found; encode a character that may not be sent raw."""
    text = match.group()
    return text if len(text) == 3 else _percent_encode(text)


def _percent_encode(char: str) -> str:
    # surrogatepass: a lone surrogate (from broken HTML) still gets a deterministic encoding.
    return "".join([f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")])


@lru_cache(maxsize=_AUTHORITY_CACHE_SIZE)
def _split_authority(scheme: str, authority: str) -> tuple[str, str] | None:
    """(host, port) in normal form, port "" when default or absent; None if invalid.

    Cached: a page links to few hosts, and IDNA encoding is slow.
    """
    host_port = authority.rpartition("@")[2]
    if host_port.startswith("["):
        host, bracket, port = host_port[1:].partition("]")
        if not bracket or (port and port[0] != ":"):
            return None
        try:
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            return None
        port = port[1:]
    else:
        reg_name, _, port = host_port.partition(":")
        normal = _normal_host(reg_name)
        if normal is None:
            return None
        host = normal
    if port:
        if not (port.isascii() and port.isdigit()) or int(port) > 65_535:
            return None
        port = str(int(port))  # "080" -> "80"
        if port == _DEFAULT_PORTS.get(scheme):
            port = ""
    return host, port


def _normal_host(host: str) -> str | None:
    """Lowercase, punycoded reg-name or IPv4 without a trailing dot; None if invalid."""
    if "%" in host:
        try:
            host = unquote(host, errors="strict")
        except UnicodeDecodeError:
            return None
    if host.endswith("."):  # the root label: "a.test." is "a.test"
        host = host[:-1]
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    host = host.lower()
    return host if _REG_NAME.fullmatch(host) else None


@lru_cache(maxsize=_DNS_CACHE_SIZE)
def _domain_of_ip(host: str) -> str:
    """Reverse DNS of an IP host (``[v6]`` or v4); the host itself when the lookup fails."""
    try:
        name = socket.gethostbyaddr(host.strip("[]"))[0]
    except (OSError, UnicodeError):
        return host
    return _normal_host(name) or host


def _join_host_port(host: str, port: str) -> str:
    return f"{host}:{port}" if port else host


def _host_name(host_port: str) -> str:
    """The host of a ``host[:port]`` key, IPv6 brackets kept."""
    if host_port.startswith("["):
        return host_port.partition("]")[0] + "]"
    return host_port.partition(":")[0]


def _request_authority(authority: str) -> str:
    """Encode what may not be sent raw; punycode a non-ASCII host; keep the rest as found."""
    userinfo, at, host_port = authority.rpartition("@")
    if userinfo:
        userinfo = _USERINFO_FIX.sub(_keep_escape, userinfo)
    if not host_port.isascii():
        host, colon, port = host_port.partition(":")
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ValueError(f"cannot IDNA-encode host {host!r}: {exc}") from exc
        host_port = host + colon + port
    return userinfo + at + host_port


@lru_cache(maxsize=_CACHE_SIZE)
def _resolve(base: str, href: str) -> str | None:
    """RFC 3986 §5.2.2 (strict) and §5.3, fragment left out; cached like _normalize."""
    scheme, authority, path, query, _fragment = _split(href)
    if scheme is None:
        base_scheme, base_authority, base_path, base_query, _ = _split_base(base)
        if base_scheme is None:
            return None
        scheme = base_scheme
        if authority is None:
            if not path:
                path = base_path
                if query is None:
                    query = base_query
            elif path.startswith("/"):
                path = _remove_dot_segments(path)
            else:
                # §5.2.3 merge
                if base_authority is not None and not base_path:
                    path = "/" + path
                else:
                    path = base_path[: base_path.rfind("/") + 1] + path
                path = _remove_dot_segments(path)
            authority = base_authority
        else:
            path = _remove_dot_segments(path)
    else:
        path = _remove_dot_segments(path)
    result = scheme + ":"
    if authority is not None:
        result += "//" + authority
    result += path
    if query is not None:
        result += "?" + query
    return result


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, segment by segment instead of the RFC's buffer-scanning loop."""
    if not _DOT_SEGMENT.search(path):
        return path
    absolute = path.startswith("/")
    segments = path.split("/")
    if absolute:
        del segments[0]
    out: list[str] = []
    for segment in segments:
        if segment == "..":
            if out:
                out.pop()
                # The RFC loop leaves "/rest" after removing the first segment of a relative
                # path ("a/../b" -> "/b"), so the result becomes absolute.
                absolute = absolute or not out
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    joined = "/".join(out)
    return "/" + joined if absolute else joined
