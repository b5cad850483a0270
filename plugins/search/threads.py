"""IndexingParsingThread: parses a page fully and puts it in the search index."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.search.content import html_content
from plugins.search.index import SearchDataManager, build_document
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from plugins.search.processing import TextProcessor
    from rccrawler.html import ParsedPage
    from rccrawler.manager import ApplicationManager
    from rccrawler.records import PageData


class IndexingParsingThread(ParsingThread):
    """Adds the page's weighted terms to the index; the links go on as usual."""

    full_parse = True

    def __init__(self, manager: ApplicationManager, index: int) -> None:
        super().__init__(manager, index)
        processor: TextProcessor | None = getattr(self.data, "processor", None)
        self.processor = processor

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> None:
        if self.processor is None or not isinstance(self.data, SearchDataManager):
            return  # another storage backend: nothing to index into
        if "noindex" in parsed.meta_robots:
            return
        # The weighing is the slow part: it runs here, outside the DataManager's lock.
        document = build_document(
            html_content(page.normalized_url, parsed), self.processor, **self.data.caps
        )
        self.data.store_document(page.id, document)
