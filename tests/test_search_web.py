"""The search web application (SPEC §7): JSON API, security headers, Host check, and the
page itself in Debian's chromium through Playwright (with and without JavaScript)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from crawling import CrawlRunner
from test_search import CORPUS, HOST, MANAGER, page
from webserver import Resource, serve_sites

from plugins.search import SearchManager, TextProcessor, web
from plugins.search.web import LOOPBACK_NAMES, create_app, running

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "search-page.png"

EVIL_TITLE = "<script>document.title='pwned'</script>Evil apple"
SITE = {
    **CORPUS,
    "/evil.html": page(EVIL_TITLE, "An apple a day keeps the doctor away."),
    "/esc.html": page("Esc \x1b[2J\x1b]0;owned\x07 title", "A kiwi, then an escape."),
    **{
        f"/more{i}.html": page(f"Pear note {i}", f"A pear, number {i}, and a plum.")
        for i in range(7)
    },
}
INDEX = Resource(
    ("<html><head><title>Welcome</title></head><body>"
     + "".join(f'<a href="{path}">more</a>' for path in SITE)
     + "</body></html>").encode()
)  # fmt: skip


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One crawl of the site for every test of this module."""
    with serve_sites({HOST: {"/": INDEX, **SITE}}) as server:
        result = CrawlRunner(tmp_path_factory.mktemp("web")).run(
            [HOST], server.resolve, manager=MANAGER
        )
    assert result.finished
    return result.manager.settings


@pytest.fixture(scope="module")
def base(settings: Any) -> Iterator[str]:
    """The app on waitress, two hits to a page, answering loopback Host names only."""
    with SearchManager.open_index(settings) as data:
        app = create_app(data, TextProcessor.default(), page_size=2, allowed_hosts=LOOPBACK_NAMES)
        with running(app) as server:
            yield f"http://127.0.0.1:{server.effective_port}"


def get(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def api(base: str, **params: Any) -> tuple[int, dict[str, Any]]:
    status, headers, body = get(base, "/api/search?" + urlencode(params, doseq=True))
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


# -- the JSON API ----------------------------------------------------------------


def test_api_answers_hits_with_snippets_and_paging(base):
    status, answer = api(base, q="apple OR pie")
    assert status == 200
    assert set(answer) == {"query", "within", "page", "page_size", "pages", "total", "took_ms",
                           "hits"}  # fmt: skip
    assert (answer["query"], answer["page"], answer["page_size"]) == ("apple OR pie", 1, 2)
    assert answer["total"] == 5 and answer["pages"] == 3 and answer["took_ms"] >= 0
    first = answer["hits"][0]
    assert set(first) == {"rank", "url", "title", "summary", "score", "snippet", "marks",
                          "snippet_html"}  # fmt: skip
    assert (first["rank"], first["title"]) == (1, "Apple pie recipe")
    marked = [first["snippet"][s:e].lower() for s, e in first["marks"]]
    assert marked and set(marked) <= {"apple", "pie"}
    assert "<mark>apple</mark>" in first["snippet_html"].lower()
    scores = [hit["score"] for hit in answer["hits"]]
    assert scores == sorted(scores, reverse=True)
    _status, second = api(base, q="apple OR pie", page=2)
    assert [h["rank"] for h in second["hits"]] == [3, 4]
    seen = {h["url"] for h in answer["hits"] + second["hits"]}
    assert len(seen) == 4


def test_api_searches_within(base):
    _status, answer = api(base, q="cinnamon", within=["apple OR pie"])
    assert answer["within"] == ["apple OR pie"] and answer["total"] == 2
    _status, deeper = api(base, q="banana", within=["apple OR pie", "cinnamon"])
    assert [h["title"] for h in deeper["hits"]] == ["Banana bread"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "query is required"),
        ({"q": "   "}, "query is required"),
        ({"q": "(apple"}, "'(' is not closed"),
        ({"q": '"apple pie'}, "is not closed"),
        ({"q": "NOT apple"}, "only words to leave out"),
        ({"q": "(" * 250 + "apple"}, "nests deeper"),
        ({"q": "x" * 10_000}, "longer than"),
        ({"q": " ".join(["apple"] * 200)}, "more than 64 words"),
        ({"q": "apple", "page": "0"}, "page must be 1 or more"),
        ({"q": "apple", "page": "two"}, "whole number"),
        ({"q": "apple", "within": ["pie"] * 9}, "levels deep"),
    ],
)
def test_api_refuses_bad_queries_with_400(base, params, message):
    status, answer = api(base, **params)
    assert status == 400 and message in answer["error"]


def test_api_huge_page_number_gives_an_empty_page(base):
    status, answer = api(base, q="apple", page=10**12)
    assert status == 200 and answer["hits"] == [] and answer["total"] == 4


def test_security_headers_no_banner_and_host_check(base):
    status, headers, _body = get(base, "/?q=apple")
    assert status == 200
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp and "script-src" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Server"] is None
    port = base.rsplit(":", 1)[1]
    for name in ("localhost", "[::1]", "127.0.0.1"):
        assert get(base, "/", {"Host": f"{name}:{port}"})[0] == 200
    status, _headers, body = get(base, "/", {"Host": f"rebound.example:{port}"})
    assert status == 400 and b"does not answer to Host" in body


def test_malformed_query_is_a_message_in_the_page(base):
    status, _headers, body = get(base, "/?" + urlencode({"q": "apple AND"}))
    assert status == 200 and b'class="error"' in body and b"needs a word" not in body[:0]


def test_app_for_a_settings_file_serves_under_any_wsgi_server(settings):
    app = web.app_for(settings.source, allowed_hosts=["Search.Example.org"])
    with running(app) as server:
        base = f"http://127.0.0.1:{server.effective_port}"
        status, _headers, body = get(base, "/api/search?q=orchard", {"Host": "search.example.org"})
        assert status == 200 and json.loads(body)["hits"][0]["title"] == "Cherry tart"
        assert get(base, "/api/search?q=orchard")[0] == 400  # Host 127.0.0.1 is not named


def test_concurrent_query_limit_answers_503(settings, monkeypatch):
    monkeypatch.setattr(web, "QUEUE_WAIT_S", 0.0)
    with SearchManager.open_index(settings) as data:
        app = create_app(data, TextProcessor.default(), max_concurrent=0)
        with running(app) as server:
            status, answer = api(f"http://127.0.0.1:{server.effective_port}", q="apple")
    assert status == 503 and "too many queries" in answer["error"]


def test_cli_marks_query_words_and_escapes_control_characters(settings):
    proc = subprocess.run(
        [sys.executable, "-m", "rccrawler", "search", "--config", str(settings.source), "kiwi"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert "Esc \\x1b[2J\\x1b]0;owned\\x07 title" in proc.stdout
    assert "A [kiwi], then an escape." in proc.stdout


# -- the page in a browser ---------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # CI installs both (.ci/run): there a missing browser is a failure, not a skip.
    if os.environ.get("CI"):
        import playwright.sync_api as sync_api

        assert Path(CHROMIUM).exists(), "CI must install Debian's chromium"
    else:
        sync_api = pytest.importorskip("playwright.sync_api")
        if not Path(CHROMIUM).exists():
            pytest.skip("needs Debian's chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def new_page(browser: Any, *, javascript: bool = True) -> Iterator[Any]:
    context = browser.new_context(
        java_script_enabled=javascript, viewport={"width": 900, "height": 700}
    )
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
def test_browser_query_paging_and_search_within(browser, base, javascript):
    with new_page(browser, javascript=javascript) as tab:
        tab.goto(base + "/")
        tab.fill("input[name=q]", "apple OR pie")
        tab.click("button[type=submit]")
        # apple: p1 p2 p6 evil; pie: p1 p4 p6 → five hits, two to a page, best first.
        assert tab.inner_text("#count").startswith("Results 1–2 of 5")
        assert tab.locator(".hit .title").first.inner_text() == "Apple pie recipe"
        assert tab.locator(".hit .snippet").first.locator("mark").count() >= 1
        marks = {m.lower() for m in tab.locator(".hit .snippet mark").all_inner_texts()}
        assert marks <= {"apple", "pie"}
        if javascript and os.environ.get("UPDATE_SCREENSHOT"):
            SCREENSHOT.parent.mkdir(exist_ok=True)
            tab.screenshot(path=str(SCREENSHOT), full_page=True)
        tab.click("a[rel=next]")
        assert tab.inner_text("#count").startswith("Results 3–4 of 5")
        tab.click("a[rel=next]")
        assert tab.inner_text("#count").startswith("Results 5–5 of 5")
        assert tab.locator("a[rel=next]").count() == 0
        # Search within these results: (apple OR pie) AND cinnamon, then step back.
        tab.fill("input[name=q]", "cinnamon")
        tab.check("#cascade")
        tab.click("button[type=submit]")
        assert tab.inner_text("#count").startswith("Results 1–2 of 2")
        assert tab.locator(".breadcrumb").inner_text().split("›")[1].strip() == "apple OR pie"
        assert "cinnamon" in tab.locator(".breadcrumb [aria-current=page]").inner_text()
        tab.click("#back")
        assert tab.inner_text("#count").startswith("Results 1–2 of 5")
        assert tab.input_value("input[name=q]") == "apple OR pie"
        # A malformed query is a message in the page.
        tab.fill("input[name=q]", '"apple')
        tab.click("button[type=submit]")
        assert "is not closed" in tab.inner_text(".error")


def test_browser_shows_a_crawled_script_title_as_text(browser, base):
    with new_page(browser) as tab:
        dialogs: list[str] = []
        tab.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        tab.goto(base + "/?" + urlencode({"q": "evil"}))
        assert tab.locator(".hit .title").first.inner_text() == EVIL_TITLE
        assert tab.title().startswith("evil") and "pwned" not in tab.title()
        assert tab.locator("main script").count() == 0 and not dialogs
