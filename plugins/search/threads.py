"""The search task's threads: they index pages through the DataManager's task tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.search.content import extract_content, html_content
from plugins.search.index import build_document, document_rows
from plugins.search.settings import index_caps, text_processor
from rccrawler.policy import is_html
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.data.base import TaskRows
    from rccrawler.records import DownloadResult, PageData
    from rccrawler.web.html import ParsedPage


class IndexingParsingThread(ParsingThread):
    """Adds the page's weighted terms to the index; the links go on as usual."""

    full_parse = True

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
        self.processor = text_processor(self.settings)
        self.caps = index_caps(self.settings)

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        if "noindex" in parsed.meta_robots:
            return None
        # The weighing is the slow part: it runs here, outside the DataManager's lock.
        content = html_content(page.normalized_url, parsed)
        return document_rows(build_document(content, self.processor, **self.caps))


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
        content = extract_content(page.normalized_url, result.body, result.content_type)
        return document_rows(build_document(content, self.processor, **self.caps))
