"""The search web application (``rccrawler serve``): a Flask WSGI app run by waitress.

Pages: ``/`` (query box, ranked hits with highlighted snippets, paging, "search
within these results" with a breadcrumb) and ``GET /api/search?q=…&page=…&within=…``
(the same as JSON). The app is a plain WSGI callable, so gunicorn or any WSGI server
can mount it too (see :func:`create_app` and docs/search.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, jsonify, render_template, request
from markupsafe import Markup

from plugins.search.query import QueryError, QueryEvaluator
from rccrawler.exceptions import RCCrawlerError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from flask.typing import ResponseReturnValue
    from werkzeug.wrappers import Response

    from plugins.search.index import SearchIndex
    from plugins.search.processing import TextProcessor
    from plugins.search.query import Hit

logger = logging.getLogger(__name__)

PAGE_SIZE = 10
MAX_WITHIN = 8
"""Searches within searches, at most this many levels deep."""
MAX_PAGE = 10**6
"""Past this page number only the hits are counted: no result list is that long."""
MAX_CONCURRENT = 8
"""Queries evaluated at once; more wait up to QUEUE_WAIT_S, then get a 503."""
QUEUE_WAIT_S = 10.0
SERVER_THREADS = 16

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Host names a loopback-bound server answers to: anything else may be DNS rebinding."""

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class BadRequest(Exception):
    """A parameter the page or the API cannot use: a 400 with this message."""


class Busy(Exception):
    """Every query slot stayed taken for QUEUE_WAIT_S."""

    message = "the server is answering too many queries at once: try again shortly"


@dataclass(frozen=True, slots=True)
class Answer:
    """One page of results for a query, within a chain of earlier queries."""

    query: str
    within: list[str]
    page: int
    page_size: int
    total: int = 0
    hits: list[Hit] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))

    @property
    def first(self) -> int:
        return (self.page - 1) * self.page_size + 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "within": self.within,
            "page": self.page,
            "page_size": self.page_size,
            "pages": self.pages,
            "total": self.total,
            "took_ms": round(self.seconds * 1000, 2),
            "hits": [
                {"rank": self.first + i, **hit.as_dict(), "snippet_html": hit.snippet.html()}
                for i, hit in enumerate(self.hits)
            ],
        }


def effective_query(query: str, within: list[str]) -> str:
    """The query to run: the new one within each earlier one ("search within")."""
    parts = [q.strip() for q in [*within, query] if q.strip()]
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({part})" for part in parts)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(
    data: SearchIndex,
    processor: TextProcessor,
    *,
    page_size: int = PAGE_SIZE,
    max_concurrent: int = MAX_CONCURRENT,
    allowed_hosts: frozenset[str] | None = None,
) -> Flask:
    """The search application over one open index.

    Args:
        data: the index, opened read-only (its lock makes it safe across threads).
        processor: the content processor the index was built with.
        page_size: hits per page.
        max_concurrent: queries evaluated at once (the rest wait, then get a 503).
        allowed_hosts: host names (no port) accepted in the ``Host`` header; None
            accepts any (a proxy in front checks it).
    """
    app = Flask(__name__)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    slots = threading.BoundedSemaphore(max_concurrent)

    def answer(args: Any) -> Answer:
        query = args.get("q", "")
        within = args.getlist("w") if args.get("cascade") else args.getlist("within")
        within = [w for w in within if w.strip()]
        if len(within) > MAX_WITHIN:
            raise BadRequest(f"searches within searches go {MAX_WITHIN} levels deep at most")
        try:
            page = int(args.get("page", "1"))
        except ValueError:
            raise BadRequest("page must be a whole number") from None
        if page < 1:
            raise BadRequest("page must be 1 or more")
        full = effective_query(query, within)
        if not full:
            raise BadRequest("a query is required (parameter q)")
        # Past MAX_PAGE only the count is computed (the page is empty anyway).
        limit, offset = (0, 0) if page > MAX_PAGE else (page_size, (page - 1) * page_size)
        if not slots.acquire(timeout=QUEUE_WAIT_S):
            raise Busy
        started = time.perf_counter()
        try:
            found = QueryEvaluator(data, processor).results(full, limit, offset)
        except QueryError as exc:
            raise BadRequest(str(exc)) from exc
        finally:
            slots.release()
        seconds = time.perf_counter() - started
        return Answer(query.strip(), within, page, page_size, found.total, found.hits, seconds)

    @app.before_request
    def check_host() -> ResponseReturnValue | None:
        if allowed_hosts is None:
            return None
        host = request.host.lower()
        name = host[1 : host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name not in allowed_hosts:
            return _plain(f"this server does not answer to Host {name!r}", 400)
        return None

    @app.after_request
    def secure(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.get("/")
    def page() -> ResponseReturnValue:
        result: Answer | None = None
        error = ""
        if request.args.get("q", "").strip():
            try:
                result = answer(request.args)
            except BadRequest as exc:
                error = str(exc)
            except Busy:
                error = Busy.message
        status = 503 if error == Busy.message else 200
        return render_template(
            "search.html",
            query=request.args.get("q", ""),
            result=result,
            error=error,
            breadcrumb=_breadcrumb(result),
            snippet=lambda hit: Markup(hit.snippet.html()),
        ), status

    @app.get("/api/search")
    def api() -> ResponseReturnValue:
        try:
            return jsonify(answer(request.args).as_dict())
        except BadRequest as exc:
            return jsonify({"error": str(exc)}), 400
        except Busy:
            return jsonify({"error": Busy.message}), 503

    @app.errorhandler(RCCrawlerError)
    def failed(exc: RCCrawlerError) -> ResponseReturnValue:
        logger.error("search failed: %s", exc)
        return _plain(f"the index cannot be read: {exc}", 503)

    return app


def _plain(text: str, status: int) -> ResponseReturnValue:
    return text + "\n", status, {"Content-Type": "text/plain; charset=utf-8"}


def _breadcrumb(result: Answer | None) -> list[tuple[str, dict[str, Any]]]:
    """(label, link parameters) for each query of the chain; the last is the current."""
    if result is None or not result.within:
        return []
    chain = [*result.within, result.query]
    return [(q, {"q": q, "within": chain[:i]}) for i, q in enumerate(chain)]


def app_for(config: str | Path, *, allowed_hosts: Iterable[str] | None = None) -> Flask:
    """The search app over the saved index of the crawl that ``config`` describes, for
    another WSGI server (``gunicorn 'plugins.search.web:app_for("search.yaml")'``).

    The index stays open, read-only, for the life of the process.
    """
    from plugins.search.manager import SearchManager
    from plugins.search.settings import text_processor
    from rccrawler.manager import load_settings

    _cls, settings = load_settings(config)
    data = SearchManager.load_index(settings)
    hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
    return create_app(data, text_processor(settings), allowed_hosts=hosts)


def make_server(
    app: Flask, host: str, port: int, threads: int = SERVER_THREADS, socket_map: Any = None
) -> Any:
    """A waitress server for ``app`` (no ``Server`` banner); port 0 picks a free one.
    Its sockets go in ``socket_map``, so its owner can run and close them."""
    from waitress import create_server

    return create_server(app, map=socket_map, host=host, port=port, threads=threads, ident="")


def shut(server: Any, socket_map: dict[Any, Any]) -> None:
    """Stop a waitress server whose loop no longer runs: its worker threads, then every
    socket (listening, trigger, connections)."""
    from waitress import wasyncore

    server.task_dispatcher.shutdown()
    wasyncore.close_all(socket_map)


def serve(data: SearchIndex, processor: TextProcessor, host: str, port: int) -> None:
    """Run the search page with waitress until Ctrl-C.

    Bound to a loopback address, it answers only to loopback Host names, which a
    DNS-rebinding page cannot send.
    """
    allowed = LOOPBACK_NAMES if is_loopback(host) else None
    # Requests queued behind busy threads are expected under load (the query slots are
    # the limit): waitress would log a warning for each.
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    socket_map: dict[Any, Any] = {}
    app = create_app(data, processor, allowed_hosts=allowed)
    server = make_server(app, host, port, socket_map=socket_map)
    shown = f"[{host}]" if ":" in host else host
    print(f"search page on http://{shown}:{server.effective_port}/ (Ctrl-C ends it)", flush=True)
    try:
        server.run()
    finally:
        shut(server, socket_map)


@contextlib.contextmanager
def running(app: Flask, host: str = "127.0.0.1") -> Iterator[Any]:
    """Serve ``app`` with waitress in a background thread until the block ends."""
    from waitress import wasyncore

    socket_map: dict[Any, Any] = {}
    server = make_server(app, host, 0, socket_map=socket_map)
    stop = threading.Event()

    def loop() -> None:
        # Short polls, so the loop sees ``stop`` and nothing closes a socket under it.
        while not stop.is_set():
            wasyncore.loop(timeout=0.05, map=socket_map, count=1)

    thread = threading.Thread(target=loop, name="search-page", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(5)
        shut(server, socket_map)
