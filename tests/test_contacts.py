"""The seed spider's link hooks (found_internal/external/other_link) and the contacts task."""

from __future__ import annotations

import csv
from collections import Counter

from auditsite import AUDIT, audit_sites, page
from crawling import CrawlResult, CrawlRunner
from taskplugins import LinkHookRecorder
from test_resume import kill9, run, spawn, wait_for_hits
from webserver import Resource

from plugins.contacts.links import emails_of_mailto
from rccrawler.unloaders import host_file_stem

ROOT = "http://a.test/"


def test_each_link_reaches_one_hook_once_on_a_parsing_thread(serve, crawler):
    LinkHookRecorder.calls.clear()
    server = serve(audit_sites())
    result = crawler.run(["a.test"], server.resolve, **AUDIT,
                         parsing_thread="taskplugins.LinkHookRecorder")  # fmt: skip
    assert result.finished
    calls = LinkHookRecorder.calls
    assert {name for *_, name in calls} <= {"LinkHookRecorder-0", "LinkHookRecorder-1"}
    on_root = Counter((kind, url) for kind, page, url, _ in calls if page == ROOT)
    assert on_root == Counter({
        ("internal", "http://a.test/a"): 1,  # "/a" and "/a#top" are one link
        ("internal", "http://a.test/b"): 1,
        ("internal", "http://a.test/c"): 1,
        ("internal", "http://a.test/missing"): 1,
        ("internal", "http://a.test/doc.pdf"): 1,
        ("internal", "http://a.test/contact"): 1,
        ("external", "http://other.test/x"): 1,
        ("other", "mailto:info@a.test"): 1,
        ("other", "tel:+1-555-0100"): 1,
        ("other", "ftp://files.a.test/f.zip"): 1,
    })  # fmt: skip
    on_a = {(kind, url) for kind, page, url, _ in calls if page == "http://a.test/a"}
    assert {u for k, u in on_a if k == "external"} == {
        "https://Example.COM/page", "http://sub.a.test/", "http://other.test/y",
    }  # fmt: skip
    # Only parsed pages call hooks: nodes, not errors, PDFs or duplicates.
    assert {page for _, page, _, _ in calls} == {
        f"http://a.test{p}" for p in ("/", "/a", "/b", "/c", "/contact")
    }
    assert len(calls) == len(set(calls))


def read_contacts(result, host="a.test"):
    path = result.output_dir / f"{host_file_stem(host)}.contacts.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["kind", "value", "found_on"]
    return {tuple(row) for row in rows[1:]}


EXPECTED = {
    ("email", "info@a.test", "http://a.test/"),
    ("email", "info@a.test", "http://a.test/c"),
    ("email", "info@a.test", "http://a.test/contact"),
    ("email", "Desk@a.test", "http://a.test/contact"),
    ("email", "Sales@a.test", "http://a.test/a"),
    ("phone", "+1-555-0100", "http://a.test/"),
    ("domain", "other.test", "http://a.test/"),
    ("domain", "other.test", "http://a.test/a"),
    ("domain", "example.com", "http://a.test/a"),
    ("domain", "sub.a.test", "http://a.test/a"),
    ("contact_page", "http://a.test/contact", "http://a.test/"),
}


def test_contacts_task_collects_mailto_addresses_and_domains_exactly(serve, crawler):
    server = serve(audit_sites())
    result = crawler.run(["a.test"], server.resolve, **AUDIT,
                         manager="plugins.contacts.ContactsManager")  # fmt: skip
    assert result.finished
    assert read_contacts(result) == EXPECTED
    # The web graph is still written beside it.
    assert "http://a.test/contact" in result.graph("a.test").urls


def test_mailto_addresses():
    assert emails_of_mailto("mailto:a@X.org,b%40y.ORG?cc=c@z.org&subject=hi&body=d@w.org") == [
        "a@x.org", "b@y.org", "c@z.org",
    ]  # fmt: skip
    assert emails_of_mailto("mailto:?to=Joe@Ex.com") == ["Joe@ex.com"]
    assert emails_of_mailto("mailto:not an address") == []
    assert emails_of_mailto("mailto:") == []


def contacts_site(pages: int) -> dict[str, Resource]:
    """Page i links to pages 3i+1..3i+3, writes to u{i}@a.test and links out to x{i % 7}.test."""
    site = {}
    for i in range(pages):
        children = [f"/p{c}" for c in range(3 * i + 1, min(pages, 3 * i + 4))]
        site["/" if i == 0 else f"/p{i}"] = page(
            *children, f"mailto:u{i}@a.test", f"http://x{i % 7}.test/{i}"
        )
    return site


def test_a_killed_crawl_resumes_with_exactly_the_contacts_of_an_uninterrupted_one(serve, tmp_path):
    site = contacts_site(600)
    options = {"manager": "plugins.contacts.ContactsManager"}
    reference_server = serve({"a.test": site})
    reference = CrawlRunner(tmp_path / "reference").run(
        ["a.test"], reference_server.resolve, **options
    )
    expected = read_contacts(reference)
    assert len({v for k, v, _ in expected if k == "email"}) == 600

    server = serve({"a.test": site})
    runner = CrawlRunner(tmp_path / "killed")
    config = runner.settings_file(["a.test"], server.resolve, **options)
    for threshold in (60, 250, 450):
        proc = spawn(config)
        wait_for_hits(server, threshold, proc)
        kill9(proc)
    final = run(config)
    assert final.returncode == 0, final.stderr
    killed = CrawlResult(True, tmp_path / "killed" / "output", {}, None)  # type: ignore[arg-type]
    assert read_contacts(killed) == expected
