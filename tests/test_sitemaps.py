"""Sitemaps: the parser on its own, then crawls that find pages only a sitemap lists."""

from __future__ import annotations

import gzip
import itertools

import pytest
from crawling import CLOCK_SLACK
from support.loopback import TEXT, Resource, redirect

from rccrawler.data.storage import open_storage
from rccrawler.manager import load_settings
from rccrawler.web.sitemaps import parse_sitemap, sitemap_seeds

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
LIMITS = {"max_urls": 1000, "max_bytes": 1 << 20}


def urlset(*locs: str) -> bytes:
    entries = "".join(f"<url><loc>{loc}</loc><lastmod>2024-01-01</lastmod></url>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{entries}</urlset>'.encode()


def index(*locs: str) -> bytes:
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f"<sitemapindex {NS}>{entries}</sitemapindex>".encode()


# -- the parser ----------------------------------------------------------------------------


def test_a_url_set_lists_its_locs_in_order():
    content = parse_sitemap(urlset("http://a.test/x", " http://a.test/y \n"), **LIMITS)
    assert (content.kind, content.urls, content.sitemaps) == (
        "urlset", ["http://a.test/x", "http://a.test/y"], [])  # fmt: skip


def test_an_index_lists_sitemaps_not_pages():
    content = parse_sitemap(index("http://a.test/1.xml", "http://a.test/2.xml.gz"), **LIMITS)
    assert content.kind == "sitemapindex"
    assert content.sitemaps == ["http://a.test/1.xml", "http://a.test/2.xml.gz"]
    assert content.urls == []


def test_gzip_text_and_no_namespace_are_read():
    gz = parse_sitemap(gzip.compress(urlset("http://a.test/g")), **LIMITS)
    assert (gz.kind, gz.urls) == ("urlset", ["http://a.test/g"])
    text = parse_sitemap(b"\xef\xbb\xbfhttp://a.test/1\r\n\r\n# no\nhttps://a.test/2\n", **LIMITS)
    assert (text.kind, text.urls) == ("text", ["http://a.test/1", "https://a.test/2"])
    bare = parse_sitemap(b"<urlset><url><loc>http://a.test/b</loc></url></urlset>", **LIMITS)
    assert bare.urls == ["http://a.test/b"]


def test_bounds_cut_long_files_and_gzip_bombs():
    content = parse_sitemap(urlset(*(f"http://a.test/{i}" for i in range(50))),
                            max_urls=10, max_bytes=1 << 20)  # fmt: skip
    assert content.urls == [f"http://a.test/{i}" for i in range(10)]
    assert content.truncated
    bomb = gzip.compress(b"http://a.test/x\n" * 1_000_000)  # 16 MB unpacked
    cut = parse_sitemap(bomb, max_urls=10**7, max_bytes=64 * 1024)
    assert cut.truncated
    assert len(cut.urls) <= 64 * 1024 // 16 + 1


def test_hostile_xml_is_refused_not_expanded():
    lol = (b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
           b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><urlset><url><loc>&b;</loc></url>'
           b"</urlset>")  # fmt: skip
    content = parse_sitemap(lol, **LIMITS)
    assert content.urls == []
    assert content.error
    assert parse_sitemap(b"<html><body>hi</body></html>", **LIMITS).kind == "invalid"
    assert parse_sitemap(b"<urlset><url><loc>http://a.test/", **LIMITS).error
    assert parse_sitemap(b"\x1f\x8b\x08garbage", **LIMITS).kind == "invalid"


def test_seeds_are_robots_lines_then_sitemap_xml_once():
    assert sitemap_seeds(("http://a.test/s.xml",), "http", "a.test") == [
        "http://a.test/s.xml", "http://a.test/sitemap.xml"]  # fmt: skip
    assert sitemap_seeds(("http://a.test/sitemap.xml",), "http", "a.test") == [
        "http://a.test/sitemap.xml"]  # fmt: skip


# -- crawls --------------------------------------------------------------------------------

GZIP = (("Content-Type", "application/x-gzip"),)
XML = (("Content-Type", "application/xml"),)


def sitemap_site() -> dict[str, Resource]:
    return {
        "/robots.txt": Resource(
            b"User-agent: *\nDisallow: /private\nSitemap: http://a.test/maps/index.xml.gz\n"
            b"Sitemap: http://b.test/elsewhere.xml\n",
            headers=TEXT,
        ),
        "/": Resource(b"<p>no links here</p>"),
        # A gzipped index (served as a gzip file, not a Content-Encoding) of two sitemaps.
        "/maps/index.xml.gz": Resource(
            gzip.compress(index("http://a.test/maps/pages.xml", "http://a.test/maps/moved.txt")),
            headers=GZIP,
        ),
        "/maps/pages.xml": Resource(
            urlset(
                "http://a.test/deep/one",
                "http://a.test/private/secret",
                "http://b.test/outside",
                "http://sub.a.test/sub",
                "http://a.test/skipme",
                "http://a.test/",
            ),
            headers=XML,
        ),
        "/maps/moved.txt": redirect("/maps/list.txt"),
        "/maps/list.txt": Resource(b"http://a.test/from-text\n", headers=TEXT),
        "/sitemap.xml": Resource(
            gzip.compress(urlset("http://a.test/plain")), gzip=False, headers=XML
        ),
        "/deep/one": Resource(b"<a href='/deep/two'>two</a>"),
        "/deep/two": Resource(b"<p>two</p>"),
        "/from-text": Resource(b"<p>t</p>"),
        "/plain": Resource(b"<p>p</p>"),
        "/skipme": Resource(b"<p>s</p>"),
    }


@pytest.mark.both_backends
def test_sitemap_urls_are_crawled_at_level_one(serve, crawler):
    server = serve({"a.test": sitemap_site()})
    result = crawler.run(
        ["a.test"], server.resolve, crawl={"sitemaps": True, "exclude": ["skipme"]}
    )
    assert result.finished
    graph = result.graph("a.test")
    levels = {n["url"]: int(n["level"]) for n in graph.nodes}
    assert levels == {
        "http://a.test/": 0,
        "http://a.test/deep/one": 1,
        "http://a.test/deep/two": 2,
        "http://a.test/from-text": 1,
        "http://a.test/plain": 1,
    }
    assert graph.skip_reason("http://b.test/outside") == "sitemap_outside"
    assert graph.skip_reason("http://sub.a.test/sub") == "sitemap_outside"
    assert graph.skip_reason("http://a.test/private/secret") == "robots"
    assert graph.skip_reason("http://a.test/skipme") == "exclude"
    paths = server.paths_for("a.test")
    assert "/private/secret" not in paths and "/skipme" not in paths
    # Each sitemap file is read once, through the crawl's resolve; another host's never.
    for path in ("/maps/index.xml.gz", "/maps/pages.xml", "/maps/moved.txt",
                 "/maps/list.txt", "/sitemap.xml"):  # fmt: skip
        assert paths.count(path) == 1, path
    assert not server.paths_for("b.test")
    # Robots first, then the sitemaps, then pages: the sitemaps come before any page.
    assert paths[0] == "/robots.txt"
    assert set(paths[1:6]) == {"/maps/index.xml.gz", "/maps/pages.xml", "/maps/moved.txt",
                               "/maps/list.txt", "/sitemap.xml"}  # fmt: skip
    # Found in the sitemap: the page's referer is the sitemap file, no page links to it.
    with open_storage(load_settings(crawler.root / "settings1.yaml")[1]) as data:
        pages = {p.url: p for p in data.iter_pages("a.test")}
    assert pages["http://a.test/deep/one"].referer == "http://a.test/maps/pages.xml"
    assert pages["http://a.test/deep/one"].id_from is None
    assert pages["http://a.test/plain"].referer == "http://a.test/sitemap.xml"
    assert [h.headers.get("referer") for h in server.hits_for("a.test")
            if h.path == "/plain"] == ["http://a.test/sitemap.xml"]  # fmt: skip


def test_sitemaps_false_reads_none(serve, crawler):
    server = serve({"a.test": sitemap_site()})
    result = crawler.run(["a.test"], server.resolve, crawl={"sitemaps": False})
    assert result.graph("a.test").urls == {"http://a.test/"}
    assert server.paths_for("a.test") == ["/robots.txt", "/"]


def test_sitemap_bounds_and_per_site_switch(serve, crawler):
    server = serve({"a.test": sitemap_site(), "c.test": sitemap_site()})
    result = crawler.run(
        ["a.test", {"url": "c.test", "crawl": {"sitemaps": False}}], server.resolve,
        crawl={"sitemaps": True, "max_sitemap_files": 2},
    )  # fmt: skip
    # Two files, breadth first: robots.txt's index, then /sitemap.xml; the index's
    # own sitemaps are not read.
    assert [p for p in server.paths_for("a.test") if "map" in p] == [
        "/maps/index.xml.gz", "/sitemap.xml"]  # fmt: skip
    assert result.graph("a.test").urls == {"http://a.test/", "http://a.test/plain"}
    assert server.paths_for("c.test") == ["/robots.txt", "/"]


@pytest.mark.parametrize("value", [-1, True, "many"])
def test_bad_sitemap_bounds_name_the_key(crawler, value):
    from rccrawler.exceptions import ConfigError

    path = crawler.settings_file(["a.test"], {}, crawl={"max_sitemap_urls": value})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.key == "crawl.max_sitemap_urls"


def test_sitemap_requests_keep_the_crawl_delay(serve, crawler):
    server = serve({"a.test": sitemap_site()})
    result = crawler.run(
        ["a.test"], server.resolve,
        crawl={"sitemaps": True, "crawl_delay_ms": 150, "max_downloads_at_time": 3},
    )  # fmt: skip
    assert result.finished
    hits = server.hits_for("a.test")
    assert len(hits) == 12  # robots, 5 sitemap files, 6 pages
    # One thread reads robots.txt and then each sitemap file after the answer to the one
    # before and the delay; the server stamps a request before it answers it, so each
    # stamp is at least the delay after the one before, however loaded the machine.
    # (The pages' spacing is the DataManager's, asserted on a clock in test_politeness.)
    read = ("/robots.txt", "/sitemap.xml", "/maps/")
    files = [hit.at for hit in hits if hit.path.startswith(read)]
    assert len(files) == 6
    gaps = [later - earlier for earlier, later in itertools.pairwise(files)]
    assert min(gaps) >= 0.150 - CLOCK_SLACK, gaps


def test_a_huge_index_is_cut_too():
    content = parse_sitemap(index(*(f"http://a.test/{i}.xml" for i in range(100))),
                            max_urls=5, max_bytes=1 << 20)  # fmt: skip
    assert content.sitemaps == [f"http://a.test/{i}.xml" for i in range(5)]
    assert content.truncated
