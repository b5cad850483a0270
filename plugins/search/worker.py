"""The search task's index workers: worker processes (:mod:`rccrawler.workers`) that
parse and index pages beside the crawl's threads.

Indexing a page (the parse of its text, the weighing of its terms) costs more than its
download and links. Each parsing thread of the search task hands its pages to a worker
of its own, which parses the page (the links the crawl needs, and the text) and builds
its index row; when the crawl is over, the workers derive the posting lists and the
vocabulary, in parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from plugins.search.index import page_rows
from plugins.search.settings import index_caps, text_processor
from rccrawler.web.html import parse_html
from rccrawler.workers import Worker, WorkerPool

if TYPE_CHECKING:
    from plugins.search.processing import TextProcessor
    from rccrawler.config import Settings
    from rccrawler.data.base import TaskRows
    from rccrawler.web.html import ParsedPage

IndexRequest = tuple[str, str, bytes, str | None, dict[str, Any]]
"""(URL fetched, normalized URL, body, Content-Type, ``parse_html`` options)."""


class _Indexer:
    """What an index worker's process keeps: the content processor of the crawl's
    settings."""

    processor: TextProcessor
    caps: dict[str, int]


def prepare_indexer(settings: Settings | None) -> None:
    """In a worker, before its first page: the text processor of the ``search:`` section."""
    assert settings is not None
    _Indexer.processor = text_processor(settings)
    _Indexer.caps = index_caps(settings)


def index_page(request: IndexRequest) -> tuple[ParsedPage, TaskRows]:
    """In a worker: parse one HTML page and build its index rows, as the parsing
    thread would (which leaves a ``noindex`` page out)."""
    url, normalized_url, body, content_type, options = request
    parsed = parse_html(body, url, content_type, **options)
    return parsed, page_rows(normalized_url, parsed, _Indexer.processor, _Indexer.caps)


class IndexWorker(Worker):
    """An index worker: its process holds the crawl's text processor."""

    setup = prepare_indexer
    label = "index worker"
    idle_imports: ClassVar[tuple[str, ...]] = ("numpy",)
    """So that neither its first page (a page's positions are sorted in numpy) nor the
    posting lists at the crawl's end wait for the import (a forked worker has it
    already: the crawl imports it once, before its first fork)."""


class IndexWorkerPool(WorkerPool):
    """The crawl's index workers: one for each parsing thread, then the derivation of
    the posting lists in parts (:meth:`map_calls`), once the crawl is over."""

    worker_class = IndexWorker
