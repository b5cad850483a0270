"""The search task's threads: they index pages through the DataManager's task tables."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from plugins.search.content import extract_content
from plugins.search.index import content_rows, page_rows
from plugins.search.settings import index_caps, text_processor
from plugins.search.worker import IndexWorkerPool, index_page
from rccrawler.context import CrawlContext
from rccrawler.policy import is_html
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.parsing import ParsingThread
from rccrawler.web.robots import robots_tag_directives
from rccrawler.workers import WorkerError

if TYPE_CHECKING:
    from rccrawler.data.base import TaskRows
    from rccrawler.records import DownloadResult, PageData, PageId
    from rccrawler.web.html import ParsedPage

logger = logging.getLogger(__name__)


@dataclass(eq=False, kw_only=True)
class SearchContext(CrawlContext):
    """The search task's crawl context: its parsing threads also reach the index
    workers (``search.workers``)."""

    workers: IndexWorkerPool


class IndexingParsingThread(ParsingThread):
    """Adds the page's weighted terms to the index; the links go on as usual.

    With ``search.workers`` (the default) the page is parsed and weighed in a worker
    process of this thread's own (:mod:`plugins.search.worker`), so indexing runs on
    another core beside the crawl; the thread stores what it answers, as it stores
    what it computes itself when the worker is not up (same rows either way).

    The worker is kept busy: while it works on one page, the next waits in its pipe,
    so it goes on at once while this thread stores the page before (the thread needs
    the GIL and the DataManager's lock for that, which the crawl's other threads hold
    often). A page at the worker is leased for parsing like any other: a stop waits
    for it, and a kill loses it unstored, to be fetched again.
    """

    full_parse = True
    pages_at_worker = 2
    """Pages sent to the worker ahead of their answers (1: one at a time)."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        self.processor = text_processor(self.settings)
        self.caps = index_caps(self.settings)
        workers = context.workers if isinstance(context, SearchContext) else None
        self.worker = workers.take() if workers is not None else None
        self._sent: deque[tuple[PageData, bytes]] = deque()
        """Pages sent to the worker, oldest first: its answers come in that order."""
        self._indexed: tuple[PageId, TaskRows | None] | None = None
        """The rows the worker built with the page it parsed last."""

    def step(self) -> bool:
        worker = self.worker
        if worker is None or not (worker.ready() or self._sent):
            return super().step()  # this thread parses and weighs (same rows)
        while len(self._sent) < self.pages_at_worker and worker.ready():
            item = self.data.take_for_parsing()
            if item is None:
                break
            page, body = item
            try:
                request = (page.url, page.normalized_url, body, page.content_type)
                worker.submit(index_page, (*request, self.parse_options()))
            except WorkerError:  # gone meanwhile: this page is done here
                self.finish_page(page, body, self.parse_page(page, body))
                return True
            self._sent.append(item)
        if not self._sent:
            return False
        page, body = self._sent.popleft()
        try:
            parsed, rows = worker.result()
        except WorkerError as exc:  # failed there, or gone: this thread does it
            logger.debug("%s: indexed in the thread (%s)", page.url, exc)
            parsed = self.parse_page(page, body)
        else:
            self._indexed = (page.id, rows)
        self.finish_page(page, body, parsed)
        return True

    def close(self) -> None:
        # Pages still at the worker (a stop that could not wait for them) stay unstored,
        # to be fetched again; their answers are read and dropped, so that the worker's
        # next answer is to what is sent next (the parts of the posting lists).
        worker = self.worker
        while self._sent and worker is not None:
            self._sent.popleft()
            with contextlib.suppress(WorkerError):  # failed there, or gone: let go
                worker.result()
        super().close()

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        indexed, self._indexed = self._indexed, None
        if "noindex" in self.robots_directives(page, parsed):
            return None  # its links are still followed (unless it says nofollow too)
        if indexed is not None and indexed[0] == page.id:
            return indexed[1]
        # The weighing is the slow part: it runs here, outside the DataManager's lock.
        return page_rows(page.normalized_url, parsed, self.processor, self.caps)


class IndexingDownloadingThread(DownloadingThread):
    """Indexes answers the crawl does not parse (SPEC §5.4): a text/plain body by its
    text, any other type by the file name in its URL."""

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        self.processor = text_processor(self.settings)
        self.caps = index_caps(self.settings)

    def process_download(self, page: PageData, result: DownloadResult) -> TaskRows | None:
        if result.error or result.status != 200 or is_html(result.content_type):
            return None
        if "noindex" in robots_tag_directives(result.robots_tags, self.robots_token):
            return None  # only a header can say so: such a body has no <meta>
        content = extract_content(page.normalized_url, result.body, result.content_type)
        return content_rows(content, self.processor, self.caps)
