"""The crawl rules of SPEC §5, shown by what the loopback server saw and by the output files."""

from __future__ import annotations

import csv
import itertools
import json
import re
from collections import Counter

import pytest
from support.sites import generated_site, page_path
from webserver import Resource

pytestmark = pytest.mark.both_backends
TEXT = (("Content-Type", "text/plain"),)


def html(*hrefs: str, text: str = "") -> Resource:
    links = "".join(f'<a href="{h}">{h}</a> ' for h in hrefs)
    return Resource(f"<html><body>{text} {links}</body></html>".encode())


def bfs_levels(site, max_level: int) -> dict[str, int]:
    """Levels of a site's pages by an independent breadth-first walk of its hrefs."""
    levels = {"/": 0}
    frontier = ["/"]
    while frontier:
        path = frontier.pop(0)
        if levels[path] == max_level:
            continue
        for href in re.findall(rb'href="(/[^"#]*)"', site[path].body):
            target = href.decode()
            if target in site and target not in levels:
                levels[target] = levels[path] + 1
                frontier.append(target)
    return levels


def server_arcs(host: str, site, graph) -> set[tuple[int, int]]:
    """The arcs a site's graph must have: every link of every page the server has, as
    node ids, each once, self-links left out."""
    by_url = {n["url"]: int(n["id"]) for n in graph.nodes}
    return {
        (by_url[f"http://{host}{path}"], by_url[f"http://{host}{href.decode()}"])
        for path in site
        for href in re.findall(rb'href="([^"#]*)"', site[path].body)
        if href.decode() != path
    }


def robots(text: str, status: int = 200) -> Resource:
    return Resource(text.encode(), status, TEXT)


@pytest.mark.parametrize("in_flight", [1, 6])
def test_breadth_first_order_by_level(serve, crawler, in_flight):
    server = serve({"a.test": generated_site("a.test", 300, fanout=4)})
    result = crawler.run(["a.test"], server.resolve, threads={"downloading": 6, "parsing": 2},
                         crawl={"max_downloads_at_time": in_flight})  # fmt: skip
    graph = result.graph("a.test")
    assert len(graph.urls) == 300
    level_of = {n["url"].removeprefix("http://a.test"): int(n["level"]) for n in graph.nodes}
    levels = [level_of[p] for p in server.paths_for("a.test") if p != "/robots.txt"]
    assert len(levels) == 300  # every page requested once
    assert max(levels) >= 3
    if in_flight == 1:
        assert levels == sorted(levels), "a deeper page was requested before a shallower one"
    else:
        # Requests leased together may reach the server in any order, but no page
        # is leased while a page two levels above it is still being worked on.
        later_min = list(itertools.accumulate(reversed(levels), min))[::-1]
        assert all(level <= later + 1 for level, later in zip(levels, later_min, strict=True))


def test_only_internal_http_links_are_followed(serve, crawler):
    server = serve({
        "a.test": {
            "/": html("/in", "http://sub.a.test/", "http://other.test/x", "mailto:me@a.test",
                      "javascript:alert(1)", "tel:+123", "ftp://a.test/f", "HTTP://A.TEST/in2"),
            "/in": html("/"),
            "/in2": html(),
        },
        "sub.a.test": {"/": html()},
        "other.test": {"/x": html()},
    })  # fmt: skip
    result = crawler.run(["http://a.test/"], server.resolve)
    assert server.hits_for("sub.a.test") == []
    assert server.hits_for("other.test") == []
    assert sorted(server.paths_for("a.test")) == ["/", "/in", "/in2", "/robots.txt"]
    graph = result.graph("a.test")
    assert graph.urls == {"http://a.test/", "http://a.test/in", "http://a.test/in2"}
    assert graph.skip_reason("http://sub.a.test/") == "subdomain"
    assert graph.skip_reason("http://other.test/x") == "external"
    for url in ("mailto:me@a.test", "javascript:alert(1)", "tel:+123", "ftp://a.test/f"):
        assert graph.skip_reason(url) == "scheme", url


def test_non_html_and_untyped_responses_are_not_nodes_nor_parsed(serve, crawler):
    server = serve({"a.test": {
        "/": html("/doc.pdf", "/untyped", "/plain.txt", "/xhtml"),
        "/doc.pdf": Resource(b'<a href="/from-pdf">x</a>',
                             headers=(("Content-Type", "application/pdf"),)),
        "/untyped": Resource(b'<html><a href="/from-untyped">x</a></html>', headers=()),
        "/plain.txt": Resource(b'<a href="/from-text">x</a>', headers=TEXT),
        "/xhtml": Resource(b'<html><a href="/from-xhtml">x</a></html>',
                           headers=(("Content-Type", "application/xhtml+xml"),)),
        "/from-xhtml": html(),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    paths = server.paths_for("a.test")
    assert "/from-pdf" not in paths and "/from-untyped" not in paths and "/from-text" not in paths
    assert "/from-xhtml" in paths
    graph = result.graph("a.test")
    assert graph.urls == {"http://a.test/", "http://a.test/xhtml", "http://a.test/from-xhtml"}
    for path in ("/doc.pdf", "/untyped", "/plain.txt"):
        assert graph.skip_reason(f"http://a.test{path}") == "not_html"


def test_redirects_replace_the_page_url(serve, crawler):
    site = {"/": html(*(f"/r{code}" for code in (301, 302, 303, 307, 308)), "/chain")}
    for code in (301, 302, 303, 307, 308):
        site[f"/r{code}"] = Resource(b"", code, (("Location", f"/final{code}"),))
        site[f"/final{code}"] = html(text=f"final {code}")
    site["/chain"] = Resource(b"", 301, (("Location", "/chain2"),))
    site["/chain2"] = Resource(b"", 302, (("Location", "http://a.test/final301"),))
    server = serve({"a.test": site})
    result = crawler.run(["a.test"], server.resolve)
    graph = result.graph("a.test")
    finals = {f"http://a.test/final{code}" for code in (301, 302, 303, 307, 308)}
    assert graph.urls == {"http://a.test/"} | finals
    assert not any("/r3" in url or "chain" in url for url in graph.urls)
    # The arcs of the index point at the final pages, once each.
    root = int(graph.node("http://a.test/")["id"])
    targets = {t for f, t in graph.arcs if f == root}
    assert targets == {int(graph.node(url)["id"]) for url in finals}
    assert Counter(server.paths_for("a.test"))["/final301"] == 1


def test_redirect_loops_and_long_chains_end_in_error(serve, crawler):
    site = {
        "/": html("/loop/a", "/long/0", "/self"),
        "/loop/a": Resource(b"", 302, (("Location", "/loop/b"),)),
        "/loop/b": Resource(b"", 302, (("Location", "/loop/a"),)),
        "/self": Resource(b"", 301, (("Location", "/self"),)),
    }
    for i in range(30):
        site[f"/long/{i}"] = Resource(b"", 301, (("Location", f"/long/{i + 1}"),))
    server = serve({"a.test": site})
    result = crawler.run(["a.test"], server.resolve)
    graph = result.graph("a.test")
    assert result.finished
    assert graph.urls == {"http://a.test/"}
    reasons = {s["reason"] for s in graph.skipped}
    assert reasons == {"redirect_loop"}
    assert len(graph.skipped) == 3
    assert Counter(server.paths_for("a.test"))["/loop/a"] == 1
    assert len([p for p in server.paths_for("a.test") if p.startswith("/long/")]) == 11
    assert result.report["sites"]["a.test"]["errors_by_kind"] == {"redirect_loop": 3}


def test_identical_pages_collapse_and_arcs_point_to_the_first(serve, crawler):
    same = b"<html><body>same body <a href='/leaf'>leaf</a></body></html>"
    server = serve({"a.test": {
        "/": html("/one", "/two", "/three"),
        "/one": Resource(same), "/two": Resource(same), "/three": html("/two"),
        "/leaf": html(),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, threads={"downloading": 1, "parsing": 1})
    graph = result.graph("a.test")
    one = graph.node("http://a.test/one")
    two = graph.node("http://a.test/two")
    assert two["duplicate_of"] == one["id"]
    assert one["duplicate_of"] == ""
    assert one["content_hash"] == two["content_hash"]
    ids = {int(n["id"]) for n in graph.nodes if not n["duplicate_of"]}
    assert all(f in ids and t in ids for f, t in graph.arcs)
    three = int(graph.node("http://a.test/three")["id"])
    assert (three, int(one["id"])) in graph.arcs  # the link to /two counts as a link to /one
    assert result.report["sites"]["a.test"]["duplicates"] == 1


def test_the_bytes_reported_are_those_of_the_bodies_fetched(serve, crawler):
    # PostgreSQL's counters once counted a parsed page's bytes twice (at its parse's
    # take and at its store): status and report.json said 2x.
    site = generated_site("a.test", 40, fanout=3)
    server = serve({"a.test": site})
    result = crawler.run(["a.test"], server.resolve)
    assert result.finished
    fetched = {hit.path for hit in server.hits_for("a.test")} - {"/robots.txt"}
    assert fetched == set(site)
    assert result.report["sites"]["a.test"]["bytes"] == sum(len(site[p].body) for p in site)


def test_every_spelling_of_a_url_is_fetched_once(serve, crawler):
    variants = [
        "/guide.html", "/./guide.html", "/x/../guide.html", "//guide.html", "/guide.html?",
        "/guide.html#top", "http://A.TEST/guide.html", "http://a.test:80/guide.html",
        "/%67uide.html", "/search?b=2&a=1", "/search?a=1&b=2", "/search?a=1&b=2&c=",
        "/search?c&a=1&b=2", "/search?a=1&b=2#frag",
    ]  # fmt: skip
    server = serve({"a.test": {
        "/": html(*variants, text="index"),
        "/guide.html": html(*variants, text="guide"),
        "/search?b=2&a=1": html(*variants, text="search"),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    paths = Counter(server.paths_for("a.test"))
    assert paths["/guide.html"] == 1
    # The request goes out as the link first said it (SPEC §6), and only once.
    assert paths["/search?b=2&a=1"] == 1
    assert sum(n for p, n in paths.items() if p.startswith("/search")) == 1
    assert result.graph("a.test").urls == {
        "http://a.test/", "http://a.test/guide.html", "http://a.test/search?a=1&b=2",
    }  # fmt: skip


def test_max_depth_holds(serve, crawler):
    server = serve({"a.test": generated_site("a.test", 200, fanout=3)})
    result = crawler.run(["a.test"], server.resolve, crawl={"max_depth": 2})
    graph = result.graph("a.test")
    expected = bfs_levels(server.sites["a.test"], max_level=2)
    assert {int(n["level"]) for n in graph.nodes} == {0, 1, 2}
    assert graph.urls == {f"http://a.test{path}" for path in expected}
    assert sorted(server.paths_for("a.test")) == sorted([*expected, "/robots.txt"])
    assert "depth" in {s["reason"] for s in graph.skipped}


def nofollow_page(content: str, *hrefs: str, name: str = "robots") -> Resource:
    links = "".join(f'<a href="{h}">{h}</a> ' for h in hrefs)
    head = f'<head><meta name="{name}" content="{content}"></head>'
    return Resource(f"<html>{head}<body>{links}</body></html>".encode())


NOFOLLOW_SITE = {
    "/": html("/a", "/nf", "/none", "/named"),
    "/a": html("/b"),
    "/b": html("/later"),
    "/later": html(text="later"),
    # Parsed at level 1, before /b (level 2) finds /later: held back, then an arc.
    "/nf": nofollow_page("NoIndex, NOFOLLOW", "/a", "/hidden", "/later", "/"),
    "/none": nofollow_page("none", "/hidden2"),
    "/named": nofollow_page("nofollow", "/hidden3", name="rccrawler"),  # the UA's token
    "/hidden": html(text="hidden"),
    "/hidden2": html(text="hidden2"),
    "/hidden3": html(text="hidden3"),
}


def test_a_nofollow_page_brings_no_new_page_but_keeps_its_arcs(serve, crawler):
    server = serve({"a.test": NOFOLLOW_SITE})
    result = crawler.run(["a.test"], server.resolve, threads={"downloading": 1, "parsing": 1})
    paths = server.paths_for("a.test")
    assert sorted(paths) == sorted(
        ["/robots.txt", "/", "/a", "/b", "/later", "/nf", "/none", "/named"]
    )
    graph = result.graph("a.test")
    for hidden in ("/hidden", "/hidden2", "/hidden3"):
        assert graph.skip_reason(f"http://a.test{hidden}") == "nofollow"
    assert graph.skip_reason("http://a.test/later") is None  # a page after all
    ids = {n["url"].removeprefix("http://a.test"): int(n["id"]) for n in graph.nodes}
    from_nf = {target for source, target in graph.arcs if source == ids["/nf"]}
    # Its links to pages found by other paths are arcs, whichever was found first.
    assert from_nf == {ids["/a"], ids["/later"], ids["/"]}
    assert int(graph.node("http://a.test/nf")["out_degree"]) == 3
    assert int(graph.node("http://a.test/later")["level"]) == 3


def test_without_obey_robots_a_nofollow_page_is_followed(serve, crawler):
    server = serve({"a.test": NOFOLLOW_SITE})
    result = crawler.run(["a.test"], server.resolve, crawl={"obey_robots": False})
    assert {"/hidden", "/hidden2", "/hidden3"} <= set(server.paths_for("a.test"))
    assert {"http://a.test/hidden", "http://a.test/hidden3"} <= result.graph("a.test").urls


def tagged(*values: str, hrefs: tuple[str, ...] = (), text: str = "") -> Resource:
    """A page whose response carries these X-Robots-Tag headers."""
    page = html(*hrefs, text=text)
    return Resource(page.body, headers=(*page.headers, *(("X-Robots-Tag", v) for v in values)))


def test_an_x_robots_tag_nofollow_for_us_holds_the_links_back(serve, crawler):
    server = serve({"a.test": {
        "/": html("/all", "/ours", "/theirs", "/indexing"),
        "/all": tagged("noindex, NOFOLLOW", hrefs=("/x1",), text="all"),
        "/ours": tagged("rccrawler: nofollow", hrefs=("/x2",), text="ours"),
        "/theirs": tagged("otherbot: nofollow", hrefs=("/x3",), text="theirs"),
        "/indexing": tagged("noindex", "max-snippet: 5", hrefs=("/x4",), text="indexing"),
        **{f"/x{n}": html(text=str(n)) for n in range(1, 5)},
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    paths = set(server.paths_for("a.test"))
    assert not {"/x1", "/x2"} & paths
    assert {"/x3", "/x4"} <= paths  # another crawler's nofollow; noindex alone
    graph = result.graph("a.test")
    assert graph.skip_reason("http://a.test/x1") == graph.skip_reason("http://a.test/x2")
    assert graph.skip_reason("http://a.test/x1") == "nofollow"


def test_max_pages_holds(serve, crawler):
    server = serve({"a.test": generated_site("a.test", 200, fanout=5)})
    result = crawler.run(["a.test"], server.resolve, crawl={"max_pages": 25})
    assert len([p for p in server.paths_for("a.test") if p != "/robots.txt"]) == 25
    assert len(result.graph("a.test").urls) == 25
    assert result.report["sites"]["a.test"]["stop_reason"] == "max_pages reached (25)"
    assert "budget" in {s["reason"] for s in result.graph("a.test").skipped}


def test_crawl_delay_between_requests_to_one_host(serve, crawler):
    # The spacing itself is asserted on an injected clock (test_politeness.py): the
    # server's arrival stamps drift with the machine's load. Here, end to end: every
    # page once, at the delay asked for, and the two sites crawled at once.
    server = serve({"a.test": generated_site("a.test", 12, fanout=3),
                    "b.test": generated_site("b.test", 12, fanout=3)})  # fmt: skip
    result = crawler.run(["a.test", "b.test"], server.resolve,
                         crawl={"crawl_delay_ms": 250, "max_downloads_at_time": 3})  # fmt: skip
    assert result.finished
    for host in ("a.test", "b.test"):
        paths = server.paths_for(host)
        assert len(paths) == len(set(paths)) == 13
        assert result.report["sites"][host]["crawl_delay_s"] == 0.25
    # The two sites were crawled at once, not one after the other: in the server's log
    # each site's first request comes before the other's last.
    order = [hit.host for hit in server.hits]
    for host, other in (("a.test", "b.test"), ("b.test", "a.test")):
        assert order.index(host) < len(order) - 1 - order[::-1].index(other)


def test_in_flight_requests_never_exceed_the_host_limit(serve, crawler):
    site = {path: Resource(res.body, delay=0.05) for path, res in
            generated_site("a.test", 40, fanout=8).items()}  # fmt: skip
    server = serve({"a.test": site})
    crawler.run(["a.test"], server.resolve, threads={"downloading": 8, "parsing": 2},
                crawl={"max_downloads_at_time": 2})  # fmt: skip
    assert len(server.paths_for("a.test")) == 41
    assert server.peak_in_flight["a.test"] == 2


def test_robots_disallowed_urls_are_never_requested(serve, crawler):
    server = serve({"a.test": {
        "/robots.txt": robots("User-agent: *\nDisallow: /private/\nAllow: /private/ok\n"
                              "\nUser-agent: rccrawler\nDisallow: /private/\nDisallow: /mine\n"
                              "Allow: /private/ok\n"),
        "/": html("/private/a", "/private/ok", "/mine", "/public", "/r"),
        "/private/a": html(), "/private/ok": html(), "/mine": html(), "/public": html(),
        "/r": Resource(b"", 301, (("Location", "/private/b"),)),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    paths = server.paths_for("a.test")
    assert paths[0] == "/robots.txt"
    assert "/private/a" not in paths and "/mine" not in paths and "/private/b" not in paths
    assert "/private/ok" in paths and "/public" in paths
    graph = result.graph("a.test")
    assert graph.skip_reason("http://a.test/private/a") == "robots"
    assert graph.skip_reason("http://a.test/mine") == "robots"
    assert graph.skip_reason("http://a.test/r") == "robots"


def test_robots_503_means_nothing_else_is_requested(serve, crawler):
    server = serve({"a.test": {"/robots.txt": robots("busy", 503), "/": html("/x")},
                    "b.test": {"/robots.txt": robots("gone", 404), "/": html("/y"),
                               "/y": html()}})  # fmt: skip
    result = crawler.run(["a.test", "b.test"], server.resolve)
    assert server.paths_for("a.test") == ["/robots.txt"]
    assert sorted(server.paths_for("b.test")) == ["/", "/robots.txt", "/y"]
    assert "robots.txt unavailable (HTTP 503)" in result.report["sites"]["a.test"]["stop_reason"]
    assert result.graph("a.test").skip_reason("http://a.test/") == "robots"


def test_robots_crawl_delay_wins_when_larger(serve, crawler):
    # The spacing it makes is asserted on an injected clock (test_politeness.py).
    server = serve({"a.test": {"/robots.txt": robots("User-agent: *\nCrawl-delay: 0.25\n"),
                               **generated_site("a.test", 5, fanout=4)}})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, crawl={"crawl_delay_ms": 10})
    assert len(server.paths_for("a.test")) == 6
    assert result.report["sites"]["a.test"]["crawl_delay_s"] == 0.25


def test_three_sites_at_once_each_get_their_own_graph(serve, crawler):
    hosts = ["a.test", "b.test", "c.test"]
    sites = {host: generated_site(host, 60 + 10 * i, fanout=4) for i, host in enumerate(hosts)}
    server = serve(sites)
    result = crawler.run(hosts, server.resolve)
    all_ids: set[int] = set()
    for i, host in enumerate(hosts):
        graph = result.graph(host)
        assert len(graph.urls) == 60 + 10 * i
        ids = {int(n["id"]) for n in graph.nodes}
        assert sorted(graph.arcs) == sorted(server_arcs(host, sites[host], graph))
        assert all(url.startswith(f"http://{host}/") for url in graph.urls)
        assert not ids & all_ids
        all_ids |= ids
        assert (result.output_dir / f"{host}.graphml").exists()


def test_graph_arcs_match_the_links_of_the_site(serve, crawler):
    site = generated_site("a.test", 50, fanout=3)
    server = serve({"a.test": site})
    result = crawler.run(["a.test"], server.resolve)
    graph = result.graph("a.test")
    by_url = {n["url"]: int(n["id"]) for n in graph.nodes}
    assert by_url["http://a.test/"] == 1
    assert len(by_url) == 50
    expected = server_arcs("a.test", site, graph)
    assert (1, by_url["http://a.test" + page_path(1)]) in expected
    assert len(graph.arcs) == len(set(graph.arcs))
    assert set(graph.arcs) == expected
    for node in graph.nodes:
        out = [t for f, t in graph.arcs if f == int(node["id"])]
        assert int(node["out_degree"]) == len(out)


def test_two_start_urls_on_one_host_are_two_roots_of_one_site(serve, crawler):
    server = serve({"a.test": {
        "/3/": html("/3/a", text="three"), "/3/a": html(text="3a"),
        "/2/": html("/2/a", text="two"), "/2/a": html(text="2a"),
    }})  # fmt: skip
    result = crawler.run(["http://a.test/3/", "http://a.test/2/"], server.resolve)
    graph = result.graph("a.test")
    assert graph.urls == {f"http://a.test{p}" for p in ("/3/", "/3/a", "/2/", "/2/a")}
    assert {n["url"]: n["level"] for n in graph.nodes}["http://a.test/2/"] == "0"


def test_a_start_page_redirecting_to_another_host_says_so(serve, crawler, caplog):
    server = serve({"a.test": {"/": Resource(b"", 301, (("Location", "http://www.a.test/"),))},
                    "www.a.test": {"/": html()}})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve)
    assert result.graph("a.test").skip_reason("http://a.test/") == "subdomain"
    assert server.hits_for("www.a.test") == []
    assert "list that URL in sites: to crawl it" in caplog.text


def test_include_filter_holds_for_links_and_redirects(serve, crawler):
    server = serve({"a.test": {
        "/": html("/docs/a", "/blog/b", "/docs/moved"),
        "/docs/a": html(text="a"), "/blog/b": html(text="b"),
        "/docs/moved": Resource(b"", 302, (("Location", "/blog/c"),)), "/blog/c": html(text="c"),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, crawl={"include": ["/docs/", "a.test/$"]})
    paths = server.paths_for("a.test")
    assert "/blog/b" not in paths and "/blog/c" not in paths
    graph = result.graph("a.test")
    assert graph.skip_reason("http://a.test/blog/b") == "include"
    assert graph.skip_reason("http://a.test/docs/moved") == "include"


def test_trailing_slash_option_is_one_identity_rule_for_the_whole_crawl(serve, crawler):
    server = serve({"a.test": {
        "/": html("/guide", "/guide/", "/moved"), "/guide": html("/guide/", text="guide"),
        "/moved": Resource(b"", 301, (("Location", "/guide"),)),
    }})  # fmt: skip
    result = crawler.run(["a.test"], server.resolve, threads={"downloading": 1, "parsing": 1},
                         crawl={"add_trailing_slash": True})  # fmt: skip
    graph = result.graph("a.test")
    assert graph.urls == {"http://a.test/", "http://a.test/guide/"}
    paths = server.paths_for("a.test")
    assert paths.count("/guide") + paths.count("/guide/") == 1  # one identity, one request


def test_the_files_are_the_same_whether_the_unloaders_share_their_reads_or_not(
    serve, crawler, monkeypatch
):
    """A small site is read once for all the unloaders, a large one by each in turn: both
    ways write the same bytes (and report.json the same figures)."""
    from rccrawler import unloaders
    from rccrawler.commands.export import export_command
    from rccrawler.manager import load_settings

    site = generated_site("a.test", 300, fanout=6)
    server = serve({"a.test": {**site, "/p/5": html("/p/5", "/p/6", "/elsewhere")}})
    result = crawler.run(["a.test"], server.resolve)
    config = crawler.settings_file(["a.test"], server.resolve)
    written = {}
    shared = unloaders.SHARED_SITE_PAGES
    for budget in (shared, 0):
        monkeypatch.setattr(unloaders, "SHARED_SITE_PAGES", budget)
        assert export_command(*load_settings(config)) == 0
        written[budget] = {
            path.name: path.read_bytes()
            for path in result.output_dir.iterdir()
            if path.name not in ("report.json", "report.html")  # they say when they were made
        }
        report = json.loads((result.output_dir / "report.json").read_text())
        written[budget]["counts"] = json.dumps(report["sites"]["a.test"]["skipped_by_reason"])
        written[budget]["arcs"] = json.dumps(
            [report["sites"]["a.test"][key] for key in ("arcs", "self_links", "truncated")]
        )
    assert written[0] == written[shared]  # compared with the budget read before it was changed
    assert {"a.test.nodes.csv", "a.test.arcs.csv", "a.test.graphml"} <= set(written[0])


def test_small_sites_are_read_together_and_written_as_each_read_alone_would_be(
    serve, crawler, monkeypatch
):
    """The unloaders read the small sites they share a hundred at a time, one query per
    kind (pages, arcs, skipped links) for all of them, and the small sites beyond their
    budget several at a time too, as many as the budget's pages: on PostgreSQL a read
    per site and kind had been most of the end of a crawl of 300 small sites, 1,800
    round trips. The files are the bytes each site read on its own gives: its
    self-links, a duplicate, a redirect alias and the links it skipped included."""
    from rccrawler import unloaders
    from rccrawler.commands.export import export_command
    from rccrawler.data.postgres import PostgresDataManager
    from rccrawler.data.sqlite import SQLiteDataManager
    from rccrawler.manager import load_settings

    hosts = [f"s{n}.test" for n in range(30)]

    def site(n: int) -> dict[str, Resource]:
        pages = {
            "/": html("/a", "/b", "/", "/moved", "http://elsewhere.test/", text=f"site {n}"),
            "/a": html("/", "/a#top", "/missing", text="same"),
            "/b": html("/", "/a#top", "/missing", text="same"),  # /a's duplicate
            "/moved": Resource(b"", 301, (("Location", "/a"),)),
        }
        return pages if n % 3 else {"/": html(text=f"site {n}, no links")}

    server = serve({host: site(n) for n, host in enumerate(hosts)})
    result = crawler.run(hosts, server.resolve)
    assert result.finished
    reads: list[str] = []
    for cls in (SQLiteDataManager, PostgresDataManager):
        monkeypatch.setattr(cls, "_read", lambda self, query, params, real=cls._read: (
            reads.append(query), real(self, query, params))[1])  # fmt: skip
    config = crawler.settings_file(hosts, server.resolve)
    written, counted = {}, {}
    shared = unloaders.SHARED_SITE_PAGES
    for budget in (shared, 20, 0):  # all shared; 4 or 5 sites, then windows of 20 pages
        monkeypatch.setattr(unloaders, "SHARED_SITE_PAGES", budget)
        reads.clear()
        assert export_command(*load_settings(config)) == 0
        counted[budget] = len(reads)
        written[budget] = {
            path.name: path.read_bytes()
            for path in result.output_dir.iterdir()
            if path.name not in ("report.json", "report.html")  # they say when they were made
        }
        report = json.loads((result.output_dir / "report.json").read_text())
        written[budget]["report"] = json.dumps(
            {host: [figures[key] for key in ("pages_done", "arcs", "self_links", "duplicates",
                                             "skipped_by_reason")]
             for host, figures in report["sites"].items()}, sort_keys=True)  # fmt: skip
    assert written[0] == written[shared] == written[20]
    skipped = written[0]["s1.test.skipped.csv"].decode()
    assert "http://elsewhere.test/" in skipped and "/missing" in skipped
    nodes = {row["url"]: row for row in csv.DictReader(
        written[0]["s1.test.nodes.csv"].decode().splitlines())}  # fmt: skip
    # /a and /b are one body: whichever was stored second is the other's duplicate.
    assert sorted(bool(nodes[f"http://s1.test/{p}"]["duplicate_of"]) for p in "ab") == [
        False, True]  # fmt: skip
    assert counted[shared] <= 6, counted  # one read per kind for all 30 sites
    assert counted[0] >= 3 * len(hosts), counted  # each site and kind on its own
    assert counted[20] <= counted[0] / 3, counted

    # An unloader going over the sites in another order reads each site once, alone,
    # not a window of the sites after it, which it passed already.
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.data.storage import open_storage

    asked: list[int] = []
    real_read = SQLDataManager.pages_of_sites

    def pages_of_sites(self: SQLDataManager, names: list[str]) -> dict[str, list[object]]:
        asked.append(len(names))
        return real_read(self, names)  # type: ignore[return-value]

    monkeypatch.setattr(SQLDataManager, "pages_of_sites", pages_of_sites)
    monkeypatch.setattr(unloaders, "SHARED_SITE_PAGES", 20)
    manager_cls, settings = load_settings(config)
    manager = manager_cls(settings)
    with open_storage(settings, task_tables=manager_cls.task_tables) as data:
        manager.data = data
        expected = {host: [page.id for page in data.iter_pages(host)] for host in hosts}
        backwards = {host: [page.id for page in unloaders.site_pages(manager.context, host)]
                     for host in reversed(hosts)}  # fmt: skip
        unloaders.release_shared(manager.context)
    assert backwards == expected
    assert sum(asked) == len(hosts), asked


def test_the_files_of_many_sites_are_written_from_one_statistics_snapshot(
    serve, crawler, monkeypatch
):
    """A snapshot costs O(sites), under the DataManager's lock: one per site made the
    end of a crawl of 2,000 sites quadratic (44% of its time)."""
    from rccrawler.commands.export import export_command
    from rccrawler.data.postgres import PostgresDataManager
    from rccrawler.data.sqlite import SQLiteDataManager
    from rccrawler.manager import load_settings

    hosts = [f"s{n}.test" for n in range(30)]
    server = serve({host: {"/": html(text=host)} for host in hosts})
    result = crawler.run(hosts, server.resolve)
    assert result.finished and len(result.report["sites"]) == 30
    snapshots = []
    for cls in (SQLiteDataManager, PostgresDataManager):
        monkeypatch.setattr(cls, "statistics", lambda self, real=cls.statistics: (
            snapshots.append(1), real(self))[1])  # fmt: skip
    assert export_command(*load_settings(crawler.settings_file(hosts, server.resolve))) == 0
    assert 1 <= len(snapshots) <= 4, len(snapshots)  # not one (or more) per site
    report = json.loads((result.output_dir / "report.json").read_text())
    assert sorted(report["sites"]) == sorted(hosts)


def test_the_stop_reasons_written_do_not_lengthen_the_finisher_s_tick(serve, crawler, monkeypatch):
    """The manager looks for ended sites every tick, ten times what its statistics
    snapshots took, so that a costly snapshot (O(sites), under the DataManager's lock)
    takes a tenth of the time. Counting the stop reasons it writes as well, 235 polite
    sites ending at once on PostgreSQL (1.2 s of writes) put the next look, and the
    crawl's end, 12 s off. Here every stop reason takes 0.3 s to write, on the
    manager's clock (injected: nothing sleeps)."""
    import dataclasses
    import time
    import types

    from rccrawler import manager as manager_module
    from rccrawler.manager import load_settings

    hosts = [f"s{n}.test" for n in range(4)]
    # Three sites end first; the last answers 1.5 s late, so the finisher waits a tick
    # after it wrote their stop reasons.
    late = dataclasses.replace(html(text="late"), delay=1.5)
    server = serve({host: {"/": late if host == hosts[-1] else html(text=host)}
                    for host in hosts})  # fmt: skip
    ticks: list[float] = []
    real_tick = manager_module.tick_after

    def recorded(snapshot_s: float) -> float:
        ticks.append(real_tick(snapshot_s))
        return ticks[-1]

    monkeypatch.setattr(manager_module, "tick_after", recorded)
    # The manager's clock: the real one, moved on by what the slow writes "take".
    written_s = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + written_s[0])
    monkeypatch.setattr(manager_module, "time", clock)
    manager_cls, settings = load_settings(crawler.settings_file(hosts, server.resolve))

    class SlowStopReasons(manager_cls):  # type: ignore[misc,valid-type]
        def create_data_manager(self):  # type: ignore[no-untyped-def]
            data = super().create_data_manager()
            real = data.set_stop_reasons

            def slow(reasons: dict[str, str]) -> None:
                # A slow storage: 0.3 s a site on the manager's clock.
                written_s[0] += 0.3 * len(reasons)
                real(reasons)

            data.set_stop_reasons = slow  # type: ignore[method-assign]
            return data

    assert SlowStopReasons(settings).run()
    assert ticks, "the finisher never waited a tick"
    # A snapshot of 4 sites takes milliseconds; the writes took 0.3 s a site.
    assert max(ticks) < 1.0, ticks


def test_the_pool_is_adjusted_while_the_finisher_waits_out_its_tick(crawler, serve, monkeypatch):
    """The finisher's tick is ten times what its statistics snapshot took: on
    PostgreSQL, 300 polite hosts made it 0.6 s. The pool was adjusted once a tick, so it
    doubled once a tick: it took 3 s to reach 256 threads, and the hosts' robots.txt
    and first pages came up to 2 s late. It is adjusted at its own pace now, all
    through the tick. The manager's clock is injected: 0.01 s a look."""
    import types

    from rccrawler import manager as manager_module
    from rccrawler.manager import load_settings

    server = serve({"a.test": {"/": html(text="a")}})
    manager_cls, settings = load_settings(crawler.settings_file(["a.test"], server.resolve))
    manager = manager_cls(settings)
    adjusted: list[int] = []
    monkeypatch.setattr(manager, "adjust_pool", lambda: adjusted.append(1))
    manager.open()
    try:
        steps = itertools.count()
        with monkeypatch.context() as clock:
            clock.setattr(manager_module, "time", types.SimpleNamespace(
                monotonic=lambda: 1000.0 + 0.01 * next(steps)))  # fmt: skip
            manager._wait_tick(0.1)  # ten looks on the injected clock
    finally:
        manager.close()
    assert len(adjusted) >= 5, adjusted
