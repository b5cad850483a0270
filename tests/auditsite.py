"""A small site with everything a site audit looks for: broken links, redirects, a duplicate,
a dangling page, mailto:/tel:/ftp: links and outbound links (the task plugins' tests)."""

from __future__ import annotations

from support.loopback import Sites
from webserver import TEXT, Resource, redirect

HOSTILE_TYPE = "text/x-<b>bold</b>&'\""
"""A content type a report must show as text, not as markup."""


def page(*hrefs: str, text: str = "") -> Resource:
    links = "".join(f'<a href="{h}">link</a> ' for h in hrefs)
    return Resource(f"<html><body><p>{text}</p>{links}</body></html>".encode())


def audit_sites() -> Sites:
    """``a.test``: what each path answers is in its name; ``sub.a.test`` is another site."""
    return {
        "a.test": {
            "/": page(
                "/a",
                "/b",
                "/c",
                "/missing",
                "/doc.pdf",
                "http://other.test/x",
                "mailto:info@a.test",
                "tel:+1-555-0100",
                "/a#top",
                "ftp://files.a.test/f.zip",
                "/contact",
                text="home <b>&amp;</b>",
            ),
            "/a": page(
                "/",
                "/b",
                "/gone",
                "/err",
                "/garbled",
                "/old2",
                "mailto:Sales@A.test?subject=hi",
                "https://Example.COM/page",
                "http://sub.a.test/",
                "http://other.test/y",
            ),
            "/b": page("/a", "/c", "/c-copy", "/missing", "/old", "/b", "/loop"),
            "/c": page("mailto:info@a.test", "/weird", "/q?a=1&b='x'", text="a dead end"),
            "/c-copy": page("mailto:info@a.test", "/weird", "/q?a=1&b='x'", text="a dead end"),
            "/contact": page("mailto:info@a.test?cc=Desk%40A.TEST", "/"),
            "/weird": Resource(b"?", 200, (("Content-Type", HOSTILE_TYPE),)),
            "/q?a=1&b='x'": page(text="a query"),
            "/doc.pdf": Resource(b"%PDF-1.4", 200, (("Content-Type", "application/pdf"),)),
            "/gone": Resource(b"gone", 410, TEXT),
            "/err": Resource(b"oops", 500, TEXT),
            "/garbled": Resource(b"<html>never readable</html>", broken_gzip=True),
            "/old": redirect("/moved"),
            "/old2": redirect("/missing"),  # an alias of a known page
            "/loop": redirect("/loop"),  # an error of the crawl's rules, not a broken link
            # /missing and /moved are not there: the server answers 404.
        },
        "sub.a.test": {"/": page()},
        "dead.test": {"/": Resource(b"down for maintenance", 503, TEXT)},
    }


BROKEN = {
    # url: (status, pages linking to it)
    "http://a.test/missing": ("404", {"http://a.test/", "http://a.test/b"}),
    "http://a.test/gone": ("410", {"http://a.test/a"}),
    "http://a.test/err": ("500", {"http://a.test/a"}),
    "http://a.test/garbled": ("decode", {"http://a.test/a"}),
    "http://a.test/old": ("404", {"http://a.test/b"}),  # redirected to /moved, a 404
    "http://a.test/old2": ("404", {"http://a.test/a"}),  # redirected to /missing
}
"""The broken internal links of ``a.test``, as a link checker must report them."""

AUDIT = {"crawl": {"max_download_attempts": 1}, "threads": {"downloading": 1, "parsing": 2}}
"""Settings for crawling the audit site: a 500 is final at once (no back-off waits), and
one downloader fetches in queue order, so /c (level 1) is always the page that /c-copy
(level 2) duplicates, never the other way round."""
