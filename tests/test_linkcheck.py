"""plugins.linkcheck: every broken internal link with every page linking to it, and nothing else."""

from __future__ import annotations

import csv

from auditsite import AUDIT, BROKEN, audit_sites

from rccrawler.unloaders import host_file_stem


def read_broken(result, host):
    path = result.output_dir / f"{host_file_stem(host)}.broken.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["url", "status", "found_on"]
    assert len(rows[1:]) == len(set(map(tuple, rows[1:])))
    return {tuple(row) for row in rows[1:]}


def test_linkcheck_finds_every_broken_link_and_its_pages(serve, crawler):
    server = serve(audit_sites())
    result = crawler.run(["a.test", "dead.test"], server.resolve, **AUDIT,
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    expected = {(url, status, page) for url, (status, pages) in BROKEN.items() for page in pages}
    assert read_broken(result, "a.test") == expected
    # A start page that fails has no page linking to it.
    assert read_broken(result, "dead.test") == {("http://dead.test/", "503", "")}
    # The same list in report.json, one entry per URL.
    reported = result.report["sites"]["a.test"]["broken_links"]
    assert [entry["url"] for entry in reported] == sorted(BROKEN)
    for entry in reported:
        status, pages = BROKEN[entry["url"]]
        assert (entry["status"], entry["found_on"]) == (status, sorted(pages))
    # The redirect loop is an error of the crawl, listed as skipped, not as broken.
    assert result.graph("a.test").skip_reason("http://a.test/loop") == "redirect_loop"
    # The web graph is written as usual.
    assert "http://a.test/c" in result.graph("a.test").urls


def test_a_site_without_broken_links_gets_a_header_only(serve, crawler):
    server = serve({"ok.test": {"/": audit_sites()["sub.a.test"]["/"]}})
    result = crawler.run(["ok.test"], server.resolve,
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert read_broken(result, "ok.test") == set()
    assert result.report["sites"]["ok.test"]["broken_links"] == []
