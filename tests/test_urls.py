"""Tests for rccrawler.web.urls: SPEC §6 identities, RFC 3986 §5 resolution, scopes, sites."""

from __future__ import annotations

import random
import socket

import pytest

from rccrawler.web import urls
from rccrawler.web.urls import (
    NormalizeOptions,
    host_of,
    link_scope,
    normalize_url,
    request_url,
    resolve_link,
    site_start_url,
)

# --- normalize_url: one case (or more) per SPEC §6 rule -----------------------------------

NORMALIZE_CASES = [
    # lowercase scheme and host
    ("HTTP://A.TEST/", "http://a.test/"),
    ("HtTpS://Www.Example.Org/Path", "https://www.example.org/Path"),  # path case is kept
    # default ports removed, for both schemes; others kept
    ("http://a.test:80/", "http://a.test/"),
    ("https://a.test:443/", "https://a.test/"),
    ("http://a.test:443/", "http://a.test:443/"),
    ("https://a.test:80/", "https://a.test:80/"),
    ("http://a.test:8080/x", "http://a.test:8080/x"),
    ("http://a.test:080/", "http://a.test/"),  # leading zeros
    ("http://a.test:/", "http://a.test/"),  # empty port
    # percent-escapes: uppercase hex, decode unreserved, keep reserved encoded
    ("http://a.test/%7euser", "http://a.test/~user"),
    ("http://a.test/%41%62%2D%2e%5F%7E%30", "http://a.test/Ab-._~0"),
    ("http://a.test/a%2fb", "http://a.test/a%2Fb"),
    ("http://a.test/%c3%bc", "http://a.test/%C3%BC"),
    ("http://a.test/?q=a%3db%26c", "http://a.test/?q=a%3Db%26c"),
    ("http://a.test/%zz", "http://a.test/%25zz"),  # a stray "%" is itself encoded
    # characters that must be encoded: space, non-ASCII, other disallowed ASCII
    ("http://a.test/a b", "http://a.test/a%20b"),
    ("http://a.test/ü", "http://a.test/%C3%BC"),
    ("http://a.test/?q=a b&r=é", "http://a.test/?q=a%20b&r=%C3%A9"),
    ('http://a.test/<x>"{|}^`\\', "http://a.test/%3Cx%3E%22%7B%7C%7D%5E%60%5C"),
    ("http://a.test/!$&'()*+,;=:@", "http://a.test/!$&'()*+,;=:@"),  # allowed raw: kept
    # empty path -> "/"
    ("http://a.test", "http://a.test/"),
    ("http://a.test?b=1", "http://a.test/?b=1"),
    # dot segments
    ("http://a.test/a/./b", "http://a.test/a/b"),
    ("http://a.test/a/b/../c", "http://a.test/a/c"),
    ("http://a.test/a/b/..", "http://a.test/a/"),
    ("http://a.test/a/b/.", "http://a.test/a/b/"),
    ("http://a.test/../../x", "http://a.test/x"),
    ("http://a.test/a/%2E%2e/b", "http://a.test/b"),  # encoded dots are dots
    ("http://a.test/a/.b/..c/c..", "http://a.test/a/.b/..c/c.."),  # not dot segments
    # fragment dropped
    ("http://a.test/x#frag", "http://a.test/x"),
    ("http://a.test/x?b=1#", "http://a.test/x?b=1"),
    # "//" collapsed
    ("http://a.test//a///b//", "http://a.test/a/b/"),
    ("http://a.test/a//../b", "http://a.test/b"),  # collapsed before dot segments
    # query parameters sorted by key then value, raw form kept
    ("http://a.test/?b=2&a=1", "http://a.test/?a=1&b=2"),
    ("http://a.test/?a=2&b=1&a=1&a=10", "http://a.test/?a=1&a=10&a=2&b=1"),
    ("http://a.test/?a-b=1&a=1", "http://a.test/?a=1&a-b=1"),  # by key, not by "key=value"
    ("http://a.test/?q=x+y&p=%2B", "http://a.test/?p=%2B&q=x+y"),
    ("http://a.test/?k=a=b&j=1", "http://a.test/?j=1&k=a=b"),
    ("http://a.test/?x=1&x=1", "http://a.test/?x=1&x=1"),  # duplicates kept
    # empty "?" dropped
    ("http://a.test/x?", "http://a.test/x"),
    ("http://a.test/x?#f", "http://a.test/x"),
    # empty parameters dropped
    ("http://a.test/?a&b=1", "http://a.test/?b=1"),
    ("http://a.test/?a=&b=1", "http://a.test/?b=1"),
    ("http://a.test/?&&b=1&&", "http://a.test/?b=1"),
    ("http://a.test/?a&c=", "http://a.test/"),
    ("http://a.test/?=v", "http://a.test/?=v"),  # a value with an empty key is kept
    # IDN hosts to punycode
    ("http://Bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://BÜCHER.example/", "http://xn--bcher-kva.example/"),
    ("http://例え.テスト/", "http://xn--r8jz45g.xn--zckzah/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://b%C3%BCcher.example/", "http://xn--bcher-kva.example/"),  # escaped host
    # trailing dot of the host
    ("http://a.test./", "http://a.test/"),
    ("http://A.Test.:8080", "http://a.test:8080/"),
    # userinfo dropped (credentials are not part of the identity)
    ("http://user:pw@a.test/", "http://a.test/"),
    ("http://user@a.test:80/", "http://a.test/"),
    # IP hosts
    ("http://127.0.0.1:80/", "http://127.0.0.1/"),
    ("http://[2001:DB8:0:0::1]/", "http://[2001:db8::1]/"),
    ("https://[::1]:443/", "https://[::1]/"),
    ("http://[::1]:8080/", "http://[::1]:8080/"),
    # whitespace around and tabs/newlines inside are ignored, as browsers do
    ("  http://a.test/x\n", "http://a.test/x"),
    ("http://a.\ttest/a\r\nb", "http://a.test/ab"),
]


@pytest.mark.parametrize(("url", "expected"), NORMALIZE_CASES)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(("url", "expected"), NORMALIZE_CASES)
def test_normalize_url_is_idempotent(url: str, expected: str) -> None:
    assert normalize_url(expected) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "/relative/path",
        "a.test/x",
        "//a.test/x",  # network-path reference: no scheme
        "ftp://a.test/",
        "mailto:someone@a.test",
        "javascript:void(0)",
        "data:text/html,hi",
        "http:g",  # no authority
        "http:///x",  # empty host
        "http://",
        "http://a b/",
        "http://a..test/",
        "http://.a.test/",
        "http://a.test:99999/",
        "http://a.test:8o/",
        "http://a.test:1:2/",
        "http://[::1/",
        "http://[::1]x/",
        "http://[not-ipv6]/",
        "http://a<b>.test/",
        "http://%FF.test/",  # not UTF-8
        "http://" + "a" * 64 + "é.test/",  # IDNA label too long
    ],
)
def test_normalize_url_rejects(url: str) -> None:
    assert normalize_url(url) is None


VARIANTS = [
    "http://www.example.com/a/c/~user/?a=1&b=2",
    "HTTP://WWW.EXAMPLE.COM/a/c/~user/?a=1&b=2",
    "http://www.example.com:80/a/c/~user/?a=1&b=2",
    "http://www.example.com./a/c/~user/?a=1&b=2",
    "http://www.example.com/a/c/%7Euser/?a=1&b=2",
    "http://www.example.com/a/c/%7euser/?a=1&b=2",
    "http://www.example.com/a/b/../c/./~user/?a=1&b=2",
    "http://www.example.com//a//c//~user/?a=1&b=2",
    "http://www.example.com/a/c/~user/?b=2&a=1",
    "http://www.example.com/a/c/~user/?b=2&x&a=1&y=",
    "http://www.example.com/a/c/~user/?a=1&b=2#top",
    "http://user:secret@www.example.com/a/c/~user/?a=1&b=2",
    "http://www.example.com/%61/%63/~user/?%61=1&b=%32",
    "  http://www.example.com/a/c/~user/?a=1&b=2\n",
    "HTTP://user@Www.Example.COM.:080//a/./b/../c//%7Euser/?&b=2&y=&a=1&x#frag",
]


def test_spelling_variants_share_one_identity() -> None:
    identities = {normalize_url(url) for url in VARIANTS}
    assert identities == {"http://www.example.com/a/c/~user/?a=1&b=2"}


def test_http_and_https_are_distinct_identities() -> None:
    assert normalize_url("http://a.test/") != normalize_url("https://a.test/")


# --- the option flags ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://a.test/a", "http://a.test/a/"),
        ("http://a.test/a/b?x=1", "http://a.test/a/b/?x=1"),
        ("http://a.test/a/", "http://a.test/a/"),
        ("http://a.test/a/page.html", "http://a.test/a/page.html"),  # has a dot: a file
        ("http://a.test/v1.2/x", "http://a.test/v1.2/x/"),  # only the last segment counts
        ("http://a.test", "http://a.test/"),
    ],
)
def test_add_trailing_slash(url: str, expected: str) -> None:
    assert normalize_url(url, NormalizeOptions(add_trailing_slash=True)) == expected


def test_options_are_off_by_default() -> None:
    assert NormalizeOptions() == NormalizeOptions(add_trailing_slash=False, ip_to_domain=False)
    assert normalize_url("http://a.test/a") == "http://a.test/a"


def test_ip_to_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    # Identities and reverse-DNS answers are cached for the process; start from empty caches.
    urls._normalize.cache_clear()
    urls._domain_of_ip.cache_clear()
    names = {"192.0.2.10": "Host-10.Example.NET.", "2001:db8::10": "v6.example.net"}
    lookups: list[str] = []

    def fake_gethostbyaddr(ip: str) -> tuple[str, list[str], list[str]]:
        lookups.append(ip)
        if ip not in names:
            raise socket.herror(1, "Unknown host")
        return names[ip], [], [ip]

    monkeypatch.setattr(socket, "gethostbyaddr", fake_gethostbyaddr)
    on = NormalizeOptions(ip_to_domain=True)
    assert normalize_url("http://192.0.2.10:8080/x", on) == "http://host-10.example.net:8080/x"
    assert normalize_url("http://[2001:db8::10]/", on) == "http://v6.example.net/"
    assert normalize_url("http://192.0.2.11/", on) == "http://192.0.2.11/"  # lookup fails
    assert normalize_url("http://a.test/", on) == "http://a.test/"  # not an IP: no lookup
    assert normalize_url("http://192.0.2.12/") == "http://192.0.2.12/"  # option off
    assert lookups == ["192.0.2.10", "2001:db8::10", "192.0.2.11"]


# --- resolve_link: RFC 3986 §5.4, fragments dropped ---------------------------------------

RFC_BASE = "http://a/b/c/d;p?q"

RFC_NORMAL: list[tuple[str, str | None]] = [  # §5.4.1
    ("g:h", "g:h"),
    ("g", "http://a/b/c/g"),
    ("./g", "http://a/b/c/g"),
    ("g/", "http://a/b/c/g/"),
    ("/g", "http://a/g"),
    ("//g", "http://g"),
    ("?y", "http://a/b/c/d;p?y"),
    ("g?y", "http://a/b/c/g?y"),
    ("#s", "http://a/b/c/d;p?q"),  # RFC: ...?q#s
    ("g#s", "http://a/b/c/g"),  # RFC: ...g#s
    ("g?y#s", "http://a/b/c/g?y"),  # RFC: ...g?y#s
    (";x", "http://a/b/c/;x"),
    ("g;x", "http://a/b/c/g;x"),
    ("g;x?y#s", "http://a/b/c/g;x?y"),  # RFC: ...?y#s
    ("", None),  # RFC: the base; an empty href is not a link here
    (".", "http://a/b/c/"),
    ("./", "http://a/b/c/"),
    ("..", "http://a/b/"),
    ("../", "http://a/b/"),
    ("../g", "http://a/b/g"),
    ("../..", "http://a/"),
    ("../../", "http://a/"),
    ("../../g", "http://a/g"),
]

RFC_ABNORMAL: list[tuple[str, str | None]] = [  # §5.4.2
    ("../../../g", "http://a/g"),
    ("../../../../g", "http://a/g"),
    ("/./g", "http://a/g"),
    ("/../g", "http://a/g"),
    ("g.", "http://a/b/c/g."),
    (".g", "http://a/b/c/.g"),
    ("g..", "http://a/b/c/g.."),
    ("..g", "http://a/b/c/..g"),
    ("./../g", "http://a/b/g"),
    ("./g/.", "http://a/b/c/g/"),
    ("g/./h", "http://a/b/c/g/h"),
    ("g/../h", "http://a/b/c/h"),
    ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
    ("g;x=1/../y", "http://a/b/c/y"),
    ("g?y/./x", "http://a/b/c/g?y/./x"),
    ("g?y/../x", "http://a/b/c/g?y/../x"),
    ("g#s/./x", "http://a/b/c/g"),  # RFC: ...g#s/./x
    ("g#s/../x", "http://a/b/c/g"),  # RFC: ...g#s/../x
    ("http:g", "http:g"),  # the strict reading (urljoin gives http://a/b/c/g)
]


@pytest.mark.parametrize(("href", "expected"), RFC_NORMAL + RFC_ABNORMAL)
def test_resolve_link_rfc3986_examples(href: str, expected: str | None) -> None:
    assert resolve_link(RFC_BASE, href) == expected


@pytest.mark.parametrize(
    ("base", "href", "expected"),
    [
        ("http://a.test/x/y", "  z \n", "http://a.test/x/z"),  # surrounding whitespace
        ("http://a.test/x/y", "\tz", "http://a.test/x/z"),
        ("http://a.test/x/y", "a\n/b\t/c\r", "http://a.test/x/a/b/c"),  # inner tab/newline
        ("http://a.test/x/y", "a b", "http://a.test/x/a b"),  # as found; encoded later
        ("http://a.test/x/y", " \n\t ", None),
        ("http://a.test/x/y#f", "#other", "http://a.test/x/y"),
        ("http://a.test/x/y?q=1#f", "#", "http://a.test/x/y?q=1"),
        ("http://a.test", "x", "http://a.test/x"),  # base with an empty path
        ("http://a.test/x/", "mailto:me@a.test", "mailto:me@a.test"),
        ("http://a.test/x/", "JavaScript:void(0)", "JavaScript:void(0)"),
        ("https://a.test/x/", "//b.test/y#z", "https://b.test/y"),
        ("http://a.test/x/", "1:x", "http://a.test/x/1:x"),  # "1" is not a scheme
        ("http://a.test/x/", "/a/b/../c?q=/../#f", "http://a.test/a/c?q=/../"),
        ("/relative/base", "x", None),
        ("", "x", None),
        ("not a base", "http://a.test/abs", "http://a.test/abs"),  # base unused
    ],
)
def test_resolve_link(base: str, href: str, expected: str | None) -> None:
    assert resolve_link(base, href) == expected


def _rfc_remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, the buffer loop exactly as written, to check the fast version."""
    out = ""
    while path:
        if path.startswith("../"):
            path = path[3:]
        elif path.startswith(("./", "/./")):
            path = path[2:]
        elif path == "/.":
            path = "/"
        elif path.startswith("/../") or path == "/..":
            path = "/" + path[4:]
            out = out[: max(out.rfind("/"), 0)]
        elif path in (".", ".."):
            path = ""
        else:
            end = path.find("/", 1 if path.startswith("/") else 0)
            end = len(path) if end < 0 else end
            out, path = out + path[:end], path[end:]
    return out


def _random_paths(count: int) -> list[str]:
    rng = random.Random(3986)
    pieces = ["a", "b", ".", "..", "", "c.", ".d"]
    return ["/".join(rng.choices(pieces, k=rng.randint(1, 7))) for _ in range(count)]


def test_dot_segments_match_the_rfc_algorithm() -> None:
    for path in _random_paths(3000):
        if not path or path.startswith("//"):  # empty href / network-path reference
            continue
        if path.startswith("/"):  # absolute path against an http base
            assert resolve_link("http://h", path) == "http://h" + _rfc_remove_dot_segments(path)
        # A base without authority and with an empty path keeps a relative path relative.
        assert resolve_link("x:", path) == "x:" + _rfc_remove_dot_segments(path), path


# --- request_url --------------------------------------------------------------------------


REQUEST_URLS = {
    "http://a.test/x?b=2&a=1": "http://a.test/x?b=2&a=1",  # order kept
    "http://a.test/x?b=2&a=1#frag": "http://a.test/x?b=2&a=1",  # fragment dropped
    "http://a.test/a b?q=c d": "http://a.test/a%20b?q=c%20d",  # space encoded
    "http://a.test/ü?é": "http://a.test/%C3%BC?%C3%A9",
    "http://a.test/%7euser/%2f": "http://a.test/%7euser/%2f",  # escapes as found
    "http://a.test/100%": "http://a.test/100%25",  # stray "%"
    "http://a.test/a?x[]=1|2": "http://a.test/a?x%5B%5D=1%7C2",
    "HTTP://A.Test:80/./a//b/../c?a&b=": "HTTP://A.Test:80/./a//b/../c?a&b=",
    "http://a.test/?": "http://a.test/?",
    "http://a.test": "http://a.test",
    "http://Bücher.example:8080/x": "http://xn--bcher-kva.example:8080/x",
    "http://us er@a.test/": "http://us%20er@a.test/",
    " http://a.test/\tx\n": "http://a.test/x",
}


@pytest.mark.parametrize(("url", "expected"), REQUEST_URLS.items())
def test_request_url(url: str, expected: str) -> None:
    assert request_url(url) == expected


@pytest.mark.parametrize("url", [url for url, _ in NORMALIZE_CASES] + VARIANTS)
def test_request_url_keeps_the_identity(url: str) -> None:
    assert normalize_url(request_url(url)) == normalize_url(url)


def test_request_url_rejects_a_bad_idn_host() -> None:
    with pytest.raises(ValueError, match="IDNA"):
        request_url("http://" + "a" * 64 + "é.test/")


# --- site_start_url -----------------------------------------------------------------------


SITE_START_URLS = {
    # a sites: entry → the start URL it stands for
    "example.org": "http://example.org/",
    "example.org:8080": "http://example.org:8080/",
    "docs.example.org/guide/": "http://docs.example.org/guide/",
    "localhost:8080/x": "http://localhost:8080/x",
    "  a.test  ": "http://a.test/",
    "https://example.org/": "https://example.org/",
    "https://example.org": "https://example.org/",
    "HTTP://a.test/start?x=1#top": "http://a.test/start?x=1",
    "http://a.test:8080/docs/": "http://a.test:8080/docs/",
    "Bücher.example": "http://xn--bcher-kva.example/",
    "127.0.0.1:8000": "http://127.0.0.1:8000/",
}


@pytest.mark.parametrize(("site", "expected"), SITE_START_URLS.items())
def test_site_start_url(site: str, expected: str) -> None:
    assert site_start_url(site) == expected


@pytest.mark.parametrize(
    ("site", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("exa mple.org", "whitespace"),
        ("http://a b.test/", "whitespace"),
        ("ftp://example.org/", "scheme 'ftp' is not http or https"),
        ("mailto:me@example.org", "scheme 'mailto' is not http or https"),
        ("javascript:alert(1)", "scheme 'javascript' is not http or https"),
        ("://example.org", "scheme '' is not http or https"),
        ("http:example.org", "expected http://host/"),
        ("http://", "no valid host"),
        ("https:///path", "no valid host"),
        ("a..test", "no valid host"),
        ("a.test:99999", "no valid host"),
        ("/just/a/path", "no valid host"),
    ],
)
def test_site_start_url_rejects(site: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        site_start_url(site)


# --- host_of ------------------------------------------------------------------------------


HOSTS = {
    "http://A.Test/x": "a.test",
    "http://a.test:80/": "a.test",
    "https://a.test:443/": "a.test",
    "https://a.test:80/": "a.test:80",
    "http://a.test:8080/": "a.test:8080",
    "http://user:pw@a.test./": "a.test",
    "http://Bücher.example/": "xn--bcher-kva.example",
    "http://[::1]:8080/": "[::1]:8080",
    "http://127.0.0.1/": "127.0.0.1",
}


@pytest.mark.parametrize(("url", "expected"), HOSTS.items())
def test_host_of(url: str, expected: str) -> None:
    assert host_of(url) == expected


@pytest.mark.parametrize("url", ["/x", "mailto:me@a.test", "http:g", "http://a b/", "http://"])
def test_host_of_rejects(url: str) -> None:
    with pytest.raises(ValueError, match="no valid host"):
        host_of(url)


# --- link_scope ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "site_host", "expected"),
    [
        ("http://a.test/x", "a.test", None),
        ("https://a.test/x", "a.test", None),  # http vs https: internal
        ("HTTP://A.TEST:80/x", "a.test", None),
        ("http://a.test./x", "a.test", None),
        ("http://a.test:8080/x", "a.test:8080", None),
        ("http://Bücher.example/", "xn--bcher-kva.example", None),
        ("http://sub.a.test/", "a.test", "subdomain"),
        ("https://deep.sub.a.test:8080/", "a.test", "subdomain"),
        ("http://b.test/", "a.test", "external"),
        ("http://aa.test/", "a.test", "external"),  # a suffix, not a subdomain
        ("http://a.test.evil/", "a.test", "external"),
        ("http://a.test:8080/", "a.test", "external"),  # same host, other port
        ("http://a.test/", "a.test:8080", "external"),
        ("http://a b/", "a.test", "external"),  # unusable host
        ("mailto:me@a.test", "a.test", "scheme"),
        ("javascript:void(0)", "a.test", "scheme"),
        ("tel:+123456", "a.test", "scheme"),
        ("ftp://a.test/file", "a.test", "scheme"),
        ("data:text/html,hi", "a.test", "scheme"),
        ("/relative", "a.test", "scheme"),
    ],
)
def test_link_scope(url: str, site_host: str, expected: str | None) -> None:
    assert link_scope(url, site_host) == expected
