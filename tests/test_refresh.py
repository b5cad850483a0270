"""Refreshing a finished crawl (SPEC §10): conditional requests, what changed, and a run
that stops and resumes like any other. The loopback server's log says what was asked
and what was sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crawling import CrawlResult
from support.loopback import NOT_FOUND, Resource, redirect

pytestmark = pytest.mark.both_backends

HOST = "a.test"
PAGES = 12


def page(number: int, text: str = "", links: tuple[str, ...] = ()) -> Resource:
    """Page ``number`` of the test site: it links the home page and the next page."""
    nav = ['<a href="/">home</a>']
    if number < PAGES:
        nav.append(f'<a href="/p{number + 1}.html">next</a>')
    nav += [f'<a href="{link}">more</a>' for link in links]
    body = f"<html><title>Page {number}</title><p>{text or f'page {number}'}</p>{''.join(nav)}"
    return Resource(body.encode(), validators=True)


def home() -> Resource:
    links = "".join(f'<a href="/p{n}.html">{n}</a>' for n in range(1, PAGES + 1))
    return Resource(f"<html><title>Home</title>{links}".encode(), validators=True)


def first_site() -> dict[str, Resource]:
    return {"/": home(), **{f"/p{n}.html": page(n) for n in range(1, PAGES + 1)}}


def url(path: str) -> str:
    return f"http://{HOST}{path}"


def edit_site(site: dict[str, Resource]) -> None:
    """Between the runs: 3 pages edited (one of them now links a new page), 1 removed
    (404, still linked), 1 redirecting to a page of the site."""
    site["/p2.html"] = page(2, "page two, edited")
    site["/p5.html"] = page(5, "page five, edited", links=("/new.html",))
    site["/p7.html"] = page(7, "page seven, edited")
    site["/new.html"] = Resource(b"<html><title>New</title><a href='/'>home</a>", validators=True)
    site["/p9.html"] = NOT_FOUND
    site["/p11.html"] = redirect("/p12.html")


EXPECTED = {
    url("/p2.html"): "changed",
    url("/p5.html"): "changed",
    url("/p7.html"): "changed",
    url("/new.html"): "added",
    url("/p9.html"): "removed",
    url("/p11.html"): "redirected",
}
UNCHANGED = {url(p) for p in ("/", "/p1.html", "/p3.html", "/p4.html", "/p6.html", "/p8.html",
                              "/p10.html", "/p12.html")}  # fmt: skip


def refresh_twice(serve, crawler) -> tuple[CrawlResult, CrawlResult, object, int]:
    site = first_site()
    server = serve({HOST: site})
    first = crawler.run([HOST], server.resolve)
    assert first.finished and len(first.graph(HOST).urls) == PAGES + 1
    assert not (first.output_dir / f"{HOST}.changes.csv").exists()  # a first run: all new
    edit_site(site)
    requests_before = len(server.answers_for(HOST))
    second = crawler.run([HOST], server.resolve, refresh=True)
    assert second.finished
    return first, second, server, requests_before


def test_a_refresh_lists_exactly_what_changed_and_asks_unchanged_pages_conditionally(
    serve, crawler
):
    first, second, server, before = refresh_twice(serve, crawler)
    changes = second.changes_by_url(HOST)
    assert {u: c for u, c in changes.items() if c != "unchanged"} == EXPECTED
    assert {u for u, c in changes.items() if c == "unchanged"} == UNCHANGED

    # Every unchanged page was asked with its validators, and answered 304 without a body.
    answers = {a.path: a for a in server.answers_for(HOST)[before:] if a.path != "/robots.txt"}
    for unchanged in UNCHANGED:
        path = unchanged.removeprefix(f"http://{HOST}")
        answer = answers[path]
        assert answer.headers.get("if-none-match"), path
        assert answer.headers.get("if-modified-since"), path
        assert (answer.status, answer.body_bytes) == (304, 0), path
    # An edited page was asked conditionally too, and came back whole.
    assert answers["/p2.html"].headers.get("if-none-match")
    assert answers["/p2.html"].status == 200 and answers["/p2.html"].body_bytes > 0
    assert "if-none-match" not in answers["/new.html"].headers  # new: nothing to compare

    rows = {row["url"]: row for row in second.changes(HOST)}
    edited = rows[url("/p2.html")]
    assert edited["old_status"] == edited["new_status"] == "200"
    assert edited["old_hash"] != edited["new_hash"] and edited["old_hash"]
    assert (edited["old_run"], edited["new_run"]) == ("1", "2")
    gone = rows[url("/p9.html")]
    assert (gone["old_status"], gone["new_status"], gone["new_hash"]) == ("200", "404", "")
    moved = rows[url("/p11.html")]
    assert (moved["new_status"], moved["redirect_to"]) == ("redirect", url("/p12.html"))
    same = rows[url("/p3.html")]
    assert same["old_hash"] == same["new_hash"] and same["old_hash"]
    added = rows[url("/new.html")]
    assert (added["old_status"], added["new_status"], added["old_run"]) == ("", "200", "")

    # The graph files describe the new state.
    graph = second.graph(HOST)
    assert graph.urls == (UNCHANGED | set(EXPECTED)) - {url("/p9.html"), url("/p11.html")}
    assert graph.skip_reason(url("/p9.html")) == "error"


def test_the_arcs_that_changed_are_listed_and_the_report_counts_them(serve, crawler):
    first, second, _server, _before = refresh_twice(serve, crawler)
    arcs = second.arc_changes(HOST)
    added = {(f, t) for f, t, change in arcs if change == "added"}
    removed = {(f, t) for f, t, change in arcs if change == "removed"}
    p = url
    assert added == {(p("/p5.html"), p("/new.html")), (p("/new.html"), p("/")),
                     (p("/p10.html"), p("/p12.html"))}  # fmt: skip
    assert removed == {
        (p("/"), p("/p9.html")), (p("/p8.html"), p("/p9.html")), (p("/p9.html"), p("/")),
        (p("/p9.html"), p("/p10.html")), (p("/"), p("/p11.html")), (p("/p10.html"), p("/p11.html")),
        (p("/p11.html"), p("/")), (p("/p11.html"), p("/p12.html")),
    }  # fmt: skip

    report = second.report
    assert (report["run"], report["run_kind"]) == (2, "refresh")
    counts = report["sites"][HOST]["changes"]
    assert counts == {"run": 2, "since_run": 1, "added": 1, "removed": 1, "changed": 3,
                      "unchanged": 8, "redirected": 1, "arcs_added": 3, "arcs_removed": 8}  # fmt: skip
    assert report["sites"][HOST]["changes_by_run"] == [counts]
    assert "changes" not in first.report["sites"][HOST]


def test_a_page_no_link_reaches_any_more_is_removed(serve, crawler):
    site = first_site()
    site["/p4.html"] = page(4, links=("/orphan.html",))
    site["/orphan.html"] = Resource(b"<html><title>Orphan</title>", validators=True)
    server = serve({HOST: site})
    assert crawler.run([HOST], server.resolve).finished
    site["/p4.html"] = page(4, "no more orphan")
    second = crawler.run([HOST], server.resolve, refresh=True)
    rows = {row["url"]: row for row in second.changes(HOST)}
    orphan = rows[url("/orphan.html")]
    assert (orphan["change"], orphan["new_status"], orphan["new_run"]) == ("removed", "", "")
    assert rows[url("/p4.html")]["change"] == "changed"
    # Never asked for again, and out of the graph.
    assert [a.path for a in server.answers_for(HOST)].count("/orphan.html") == 1
    assert url("/orphan.html") not in second.graph(HOST).urls


def test_a_second_refresh_compares_with_the_first_and_keeps_the_history(serve, crawler):
    site = first_site()
    server = serve({HOST: site})
    crawler.run([HOST], server.resolve)
    site["/p3.html"] = page(3, "three, once more")
    crawler.run([HOST], server.resolve, refresh=True)
    third = crawler.run([HOST], server.resolve, refresh=True)
    changes = third.changes_by_url(HOST)
    assert set(changes.values()) == {"unchanged"} and len(changes) == PAGES + 1
    history = third.report["sites"][HOST]["changes_by_run"]
    assert [(h["run"], h["changed"], h["unchanged"]) for h in history] == [
        (2, 1, PAGES), (3, 0, PAGES + 1)
    ]  # fmt: skip


def test_without_validators_an_unchanged_body_is_not_parsed_again(serve, crawler):
    plain = {path: Resource(res.body) for path, res in first_site().items()}
    server = serve({HOST: plain})
    crawler.run([HOST], server.resolve)
    plain["/p6.html"] = Resource(b"<html><title>Six</title><a href='/'>home</a>")
    second = crawler.run([HOST], server.resolve, refresh=True)
    changes = second.changes_by_url(HOST)
    assert changes.pop(url("/p6.html")) == "changed"
    assert set(changes.values()) == {"unchanged"}
    # p7 was linked only from the home page and p6: still reached (from the home page).
    assert url("/p7.html") in second.graph(HOST).urls


def test_a_refresh_of_a_crawl_not_over_resumes_it(serve, crawler, tmp_path):
    server = serve({HOST: first_site()})
    result = crawler.run([HOST], server.resolve, refresh=True)  # no state yet: a first crawl
    assert result.finished and result.report["run"] == 1
    assert not (result.output_dir / f"{HOST}.changes.csv").exists()
    report: dict[str, object] = json.loads((Path(result.output_dir) / "report.json").read_text())
    assert report["run_kind"] == "crawl"
