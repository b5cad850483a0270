"""The search web page (``rccrawler serve``): a query box, ranked hits, paging and
"search within these results" (SPEC §7), on the standard library's http.server."""

from __future__ import annotations

import contextlib
import logging
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode, urlsplit

from plugins.search.query import QueryEvaluator
from rccrawler.exceptions import RCCrawlerError
from rccrawler.loopback import serving

if TYPE_CHECKING:
    from collections.abc import Iterator

    from plugins.search.index import SearchIndex
    from plugins.search.processing import TextProcessor
    from plugins.search.query import Hit

logger = logging.getLogger(__name__)

PAGE_SIZE = 10
MAX_HITS = 1000
"""Hits ranked for one query at most (the pages of a result list are cut from them)."""

_STYLE = """
body { font-family: sans-serif; max-width: 50em; margin: 2em auto; padding: 0 1em; }
input[name=q] { width: 70%; font-size: 1.1em; }
.hit { margin: 1em 0; } .hit .url { color: #060; font-size: .9em; }
.hit .summary { margin: .2em 0; } .error { color: #a00; } nav a { margin-right: 1em; }
"""


def effective_query(query: str, within: str) -> str:
    """The query to run: the new one, or both when searching within the last results."""
    query, within = query.strip(), within.strip()
    if within and query:
        return f"({within}) AND ({query})"
    return query or within


class SearchHTTPServer(ThreadingHTTPServer):
    """Answers ``GET /?q=…&page=…&within=…`` from one open index.

    Args:
        address: (host, port) to listen on; port 0 picks a free one.
        data: the index, opened read-only (its lock makes it safe across requests).
        processor: the content processor the index was built with.
        page_size: hits per page.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        data: SearchIndex,
        processor: TextProcessor,
        page_size: int = PAGE_SIZE,
    ) -> None:
        super().__init__(address, _Handler)
        self.data = data
        self.processor = processor
        self.page_size = page_size

    def render(self, params: dict[str, list[str]]) -> str:
        query = params.get("q", [""])[0]
        within = params.get("within", [""])[0] if params.get("cascade") else ""
        try:
            page = max(1, int(params.get("page", ["1"])[0]))
        except ValueError:
            page = 1
        full = effective_query(query, within)
        hits: list[Hit] = []
        error = ""
        if full:
            try:
                hits = QueryEvaluator(self.data, self.processor).search(full, MAX_HITS)
            except RCCrawlerError as exc:
                error = str(exc)
        return _page(full, hits, page, self.page_size, error, shown=query if not within else "")


def _page(full: str, hits: list[Hit], page: int, size: int, error: str, *, shown: str) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>",
        escape(f"{full} – rccrawler search" if full else "rccrawler search"),
        f"</title><style>{_STYLE}</style></head><body><h1>Search</h1>",
        "<form method='get' action='/' id='search'>",
        f"<input name='q' value='{escape(shown)}' autofocus aria-label='query'> ",
        "<button type='submit'>Search</button>",
    ]
    if full and hits:
        parts += [
            f"<input type='hidden' name='within' value='{escape(full)}'>",
            "<label><input type='checkbox' name='cascade' value='1' id='cascade'> "
            "search within these results</label>",
        ]
    parts.append("</form>")
    if error:
        parts.append(f"<p class='error'>{escape(error)}</p>")
    elif full:
        pages = max(1, -(-len(hits) // size))
        page = min(page, pages)
        chosen = hits[(page - 1) * size : page * size]
        first = (page - 1) * size + 1
        if hits:
            parts.append(
                f"<p id='count'>Results {first}–{first + len(chosen) - 1} of {len(hits)} "
                f"for <b>{escape(full)}</b></p>"
            )
        else:
            parts.append(f"<p id='count'>No results for <b>{escape(full)}</b></p>")
        parts.append(f"<ol class='hits' start='{first}'>")
        for hit in chosen:
            parts.append(
                f"<li class='hit'><a class='title' href='{escape(hit.url)}'>"
                f"{escape(hit.title or hit.url)}</a><div class='url'>{escape(hit.url)}</div>"
                f"<p class='summary'>{escape(hit.summary)}</p></li>"
            )
        parts.append("</ol><nav>")
        for label, number in (("Previous", page - 1), ("Next", page + 1)):
            if 1 <= number <= pages:
                link = "/?" + urlencode({"q": full, "page": number})
                parts.append(f"<a rel='{label[:4].lower()}' href='{escape(link)}'>{label}</a>")
        parts.append(f"<span>page {page} of {pages}</span></nav>")
    parts.append("</body></html>")
    return "".join(parts)


class _Handler(BaseHTTPRequestHandler):
    server: SearchHTTPServer

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path != "/":
            self.send_error(404)
            return
        body = self.server.render(parse_qs(split.query)).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.info("%s " + format, self.address_string(), *args)


@contextlib.contextmanager
def running_server(server: SearchHTTPServer) -> Iterator[SearchHTTPServer]:
    """Serve in a background thread until the block ends (tests, embedding)."""
    with serving(server, "search-page") as running:
        yield running
