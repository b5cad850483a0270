"""report.html: self-contained, one inline SVG per chart, crawled text escaped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import html5lib
import pytest
from auditsite import AUDIT, BROKEN, HOSTILE_TYPE, audit_sites

HTML_NS = "{http://www.w3.org/1999/xhtml}"
SVG_NS = "{http://www.w3.org/2000/svg}"
CHARTS = [
    "Pages per level",
    "Status codes and error kinds",
    "Page sizes",
    "Bytes per content type",
    "The 20 pages of highest PageRank",
    "Why URLs were not crawled",
]
LOADERS = {"script", "link", "img", "iframe", "object", "embed", "audio", "video", "source",
           "track", "picture", "image", "use", "feimage", "base", "frame"}  # fmt: skip


def text_of(element) -> str:
    return "".join(element.itertext())


def charts_of(section) -> dict[str, list[tuple[str, str]]]:
    """Each chart's (label, value) rows, read back from its SVG."""
    charts = {}
    for svg in section.iter(f"{SVG_NS}svg"):
        title = svg.find(f"{SVG_NS}title")
        labels = [t for t in svg.iter(f"{SVG_NS}text") if t.get("class") == "label"]
        values = [t for t in svg.iter(f"{SVG_NS}text") if t.get("class") == "value"]
        rows = [(label.find(f"{SVG_NS}title").text, value.text)
                for label, value in zip(labels, values, strict=False)]  # fmt: skip
        charts[title.text] = rows
    return charts


@pytest.fixture
def report(serve, crawler):
    server = serve(audit_sites())
    result = crawler.run(["a.test", "dead.test"], server.resolve, **AUDIT,
                         manager="plugins.linkcheck.LinkCheckManager")  # fmt: skip
    assert result.finished
    raw = (result.output_dir / "report.html").read_text(encoding="utf-8")
    parser = html5lib.HTMLParser(strict=True)  # any parse error raises
    return result, raw, parser.parse(raw)


def test_report_html_is_valid_and_has_one_svg_per_chart(report):
    result, _raw, root = report
    sections = [s for s in root.iter(f"{HTML_NS}section") if s.get("class") == "site"]
    assert [text_of(s.find(f"{HTML_NS}h2")) for s in sections] == ["a.test", "dead.test"]
    for section in sections:
        titles = [text_of(f.find(f"{HTML_NS}figcaption")) for f in section.iter(f"{HTML_NS}figure")]
        assert titles == CHARTS
        assert len(list(section.iter(f"{SVG_NS}svg"))) == len(CHARTS)
    charts = charts_of(sections[0])
    # Pages per level agrees with H.nodes.csv.
    graph = result.graph("a.test")
    levels = Counter(int(n["level"]) for n in graph.nodes)
    assert charts["Pages per level"] == [(f"level {k}", str(v)) for k, v in sorted(levels.items())]
    statuses = dict(charts["Status codes and error kinds"])
    assert statuses["404"] == "2"  # /missing, and /old redirected to /moved
    assert {"410", "500", "decode", "redirect", "redirect_loop", "200"} <= set(statuses)
    assert statuses["redirect"] == "1"  # /old2, an alias of /missing
    # The most linked page first, as in H.nodes.csv.
    best = max(graph.nodes, key=lambda n: float(n["pagerank"] or 0))
    assert charts["The 20 pages of highest PageRank"][0][0] == best["url"]
    skipped = Counter(s["reason"] for s in graph.skipped)
    assert dict(charts["Why URLs were not crawled"]) == {k: str(v) for k, v in skipped.items()}
    # The broken links of the link checker, in their own table.
    broken = next(t for t in sections[0].iter(f"{HTML_NS}table") if t.get("class") == "broken")
    cells = [text_of(row[0]) for row in broken.iter(f"{HTML_NS}tr")][1:]
    assert cells == sorted(BROKEN)


def test_report_html_needs_no_network(report):
    _result, raw, root = report
    for element in root.iter():
        name = element.tag.rpartition("}")[2].lower() if isinstance(element.tag, str) else ""
        assert name not in LOADERS, f"<{name}> loads something"
        assert not {a for a in element.attrib if a.rpartition("}")[2] in ("src", "srcset")}
        if "href" in element.attrib:
            assert element.tag == f"{HTML_NS}a", f"href on {element.tag}"
            assert element.get("href").startswith("http://a.test/")
        assert not any(a.endswith("}href") for a in element.attrib)  # xlink:href
    styles = " ".join(text_of(s) for s in root.iter(f"{HTML_NS}style"))
    assert "url(" not in styles and "@import" not in styles
    assert not re.search(r"<(script|link|img)\b", raw, re.IGNORECASE)


def test_crawled_text_is_escaped(report):
    _result, raw, root = report
    assert HOSTILE_TYPE not in raw  # it is there escaped, never as markup
    assert not list(root.iter(f"{HTML_NS}b")) and not list(root.iter(f"{SVG_NS}b"))
    labels = [text_of(t) for t in root.iter(f"{SVG_NS}title")]
    assert HOSTILE_TYPE in labels
    urls = [text_of(a) for a in root.iter(f"{HTML_NS}a")]
    assert "http://a.test/q?a=1&b='x'" in urls


def test_rccrawler_serve_shows_the_report_of_a_crawl_without_search(report):
    result, raw, _root = report
    config = result.manager.settings.source
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    with subprocess.Popen(
        [sys.executable, "-m", "rccrawler", "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[2]
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.headers["Content-Type"] == "text/html; charset=utf-8"
                assert response.read().decode("utf-8") == raw
            with pytest.raises(urllib.error.HTTPError) as missing:
                urllib.request.urlopen(url + "elsewhere", timeout=10)
            assert missing.value.code == 404
            missing.value.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
