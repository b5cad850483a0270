"""Scope rules: exclude strings, include/exclude regular expressions, extra request
headers and per-site crawl overrides; one scope decision for links and redirects."""

from __future__ import annotations

import re

import pytest
from support.loopback import Resource, redirect
from test_config import GOOD, assert_refused

from rccrawler.config import settings_from_mapping
from rccrawler.policy import ScopeRules, scope_skip
from rccrawler.records import SkipReason

# -- the one decision ----------------------------------------------------------------------


def rules(**kw: object) -> ScopeRules:
    for key in ("include_regex", "exclude_regex"):
        if key in kw:
            kw[key] = tuple(re.compile(p) for p in kw[key])  # type: ignore[union-attr]
    return ScopeRules(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scope", "url", "reason"),
    [
        ({}, "http://a.test/x", None),
        ({"exclude": ("/tmp/",)}, "http://a.test/tmp/x", SkipReason.EXCLUDE),
        ({"exclude": ("/tmp/",)}, "http://a.test/tmpx", None),
        ({"exclude_regex": (r"\.pdf$",)}, "http://a.test/a.pdf", SkipReason.EXCLUDE),
        ({"exclude_regex": (r"\.pdf$",)}, "http://a.test/a.pdf?x=1", None),
        ({"include": ("/docs/",)}, "http://a.test/blog/", SkipReason.INCLUDE),
        ({"include": ("/docs/",)}, "http://a.test/docs/1", None),
        ({"include_regex": (r"^http://a\.test/(docs/|$)",)}, "http://a.test/", None),
        ({"include_regex": (r"^http://a\.test/(docs/|$)",)}, "http://a.test/b",
         SkipReason.INCLUDE),
        # Exclusion wins over inclusion.
        ({"include": ("/docs/",), "exclude": ("old",)}, "http://a.test/docs/old",
         SkipReason.EXCLUDE),
        ({"include_regex": ("docs",), "exclude_regex": ("draft",)},
         "http://a.test/docs/draft", SkipReason.EXCLUDE),
        # Both inclusions must hold when both are set.
        ({"include": ("/docs/",), "include_regex": (r"\d$",)}, "http://a.test/docs/a",
         SkipReason.INCLUDE),
    ],
)  # fmt: skip
def test_scope_skip(scope, url, reason):
    assert scope_skip(url, rules(**scope)) == reason


# -- settings ------------------------------------------------------------------------------

BAD = [
    ({**GOOD, "crawl": {"include_regex": "docs/(unclosed"}}, "crawl.include_regex"),
    ({**GOOD, "crawl": {"exclude_regex": ["ok", "*bad"]}}, "crawl.exclude_regex[1]"),
    ({**GOOD, "crawl": {"exclude": "not-a-list"}}, "crawl.exclude"),
    ({**GOOD, "crawl": {"exclude": [""]}}, "crawl.exclude"),
    ({**GOOD, "crawl": {"headers": {"Host": "evil.test"}}}, "crawl.headers.Host"),
    ({**GOOD, "crawl": {"headers": {"X-A": "1\r\nX-B: 2"}}}, "crawl.headers.X-A"),
    ({**GOOD, "crawl": {"headers": {"Bad Name": "1"}}}, "crawl.headers"),
    ({**GOOD, "crawl": {"headers": {"X-A": 3}}}, "crawl.headers.X-A"),
    ({**GOOD, "sites": [{"url": "a.test", "crawl": {"timeout_s": 3}}]}, "sites[0].crawl.timeout_s"),
    ({**GOOD, "sites": [{"url": "a.test", "crawl": {"max_depth": -1}}]},
     "sites[0].crawl.max_depth"),
    ({**GOOD, "sites": ["b.test", {"url": "a.test", "crawl": {"include_regex": "("}}]},
     "sites[1].crawl.include_regex"),
    ({**GOOD, "sites": [{"crawl": {}}]}, "sites[0].url"),
    ({**GOOD, "sites": [{"url": "a.test", "depth": 2}]}, "sites[0].depth"),
    ({**GOOD, "sites": [{"url": "a.test", "crawl": [1]}]}, "sites[0].crawl"),
]  # fmt: skip


@pytest.mark.parametrize(("settings", "key"), BAD, ids=[key for _, key in BAD])
def test_bad_scope_settings_exit_2_naming_the_key(tmp_path, settings, key):
    assert_refused(tmp_path, settings, key)


def test_a_site_override_keeps_the_other_crawl_keys():
    settings = settings_from_mapping({
        "sites": ["a.test", {"url": "https://c.test/docs/", "crawl": {"max_depth": 1}}],
        "crawl": {"max_depth": 5, "exclude": ["x"], "crawl_delay_ms": 7},
    })  # fmt: skip
    assert settings.sites == ("http://a.test/", "https://c.test/docs/")
    own = settings.crawl_for("c.test")
    assert (own.max_depth, own.exclude, own.crawl_delay_ms) == (1, ("x",), 7)
    assert settings.crawl_for("a.test") is settings.crawl
    assert settings.crawl.max_depth == 5


# -- crawls --------------------------------------------------------------------------------

SITE = {
    "/": Resource(
        b"<a href='/docs/a'>a</a><a href='/docs/old/b'>b</a><a href='/docs/c.pdf'>c</a>"
        b"<a href='/blog/'>blog</a><a href='/docs/go'>go</a><a href='/docs/go-out'>out</a>"
    ),
    "/docs/a": Resource(b"<a href='/docs/a/deeper'>d</a>"),
    "/docs/a/deeper": Resource(b"<p>d</p>"),
    "/docs/old/b": Resource(b"<p>old</p>"),
    "/docs/c.pdf": Resource(b"%PDF", headers=(("Content-Type", "application/pdf"),)),
    "/blog/": Resource(b"<p>blog</p>"),
    "/docs/go": redirect("/docs/old/moved"),
    "/docs/go-out": redirect("/blog/moved"),
}


def test_each_scope_rule_lands_in_skipped_csv_with_its_reason(serve, crawler):
    server = serve({"a.test": SITE})
    result = crawler.run(["a.test"], server.resolve, crawl={
        "exclude": ["/old/"],
        "exclude_regex": [r"\.pdf$"],
        "include_regex": r"^http://a\.test/(docs/|$)",
        "headers": {"X-Crawl-Team": "web archive", "Accept-Language": "fr"},
    })  # fmt: skip
    assert result.finished
    graph = result.graph("a.test")
    assert graph.urls == {"http://a.test/", "http://a.test/docs/a", "http://a.test/docs/a/deeper"}
    reasons = {row["url"]: row["reason"] for row in graph.skipped}
    assert reasons["http://a.test/docs/old/b"] == "exclude"
    assert reasons["http://a.test/docs/c.pdf"] == "exclude"
    assert reasons["http://a.test/blog/"] == "include"
    # Redirect targets follow the same rules: the page ends skipped with the reason.
    assert reasons["http://a.test/docs/go"] == "exclude"
    assert reasons["http://a.test/docs/go-out"] == "include"
    paths = server.paths_for("a.test")
    for never in ("/docs/old/b", "/docs/c.pdf", "/blog/", "/docs/old/moved", "/blog/moved"):
        assert never not in paths
    # Extra headers go with every request, robots.txt included; ours are not replaced.
    for hit in server.hits_for("a.test"):
        assert hit.headers["x-crawl-team"] == "web archive"
        assert hit.headers["accept-language"] == "fr"
        assert hit.headers["user-agent"].startswith("rccrawler/")


def test_per_site_overrides_take_effect(serve, crawler):
    server = serve({"a.test": SITE, "c.test": SITE})
    result = crawler.run(
        ["a.test", {"url": "c.test", "crawl": {
            "max_depth": 1, "exclude": ["/blog/"], "headers": {"X-Site": "c"},
            "max_downloads_at_time": 1}}],
        server.resolve,
        crawl={"max_depth": 5},
    )  # fmt: skip
    assert result.finished
    a, c = result.graph("a.test"), result.graph("c.test")
    assert "http://a.test/docs/a/deeper" in a.urls and "http://a.test/blog/" in a.urls
    assert "http://c.test/docs/a/deeper" not in c.urls
    assert c.skip_reason("http://c.test/docs/a/deeper") == "depth"
    assert c.skip_reason("http://c.test/blog/") == "exclude"
    assert all(h.headers.get("x-site") == "c" for h in server.hits_for("c.test"))
    assert not any("x-site" in h.headers for h in server.hits_for("a.test"))
    assert server.peak_in_flight["c.test"] == 1
