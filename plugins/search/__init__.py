"""The search crawl task: a field-weighted inverted index and Boolean queries (SPEC §7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rccrawler.loading import lazy_names

if TYPE_CHECKING:
    from plugins.search.content import Content, extract_content
    from plugins.search.index import IndexedDocument, SearchIndex, build_document
    from plugins.search.manager import SearchManager
    from plugins.search.processing import TextProcessor
    from plugins.search.query import Hit, QueryError, QueryEvaluator
    from plugins.search.threads import IndexingDownloadingThread, IndexingParsingThread

_HOMES = {
    "Content": "plugins.search.content",
    "extract_content": "plugins.search.content",
    "IndexedDocument": "plugins.search.index",
    "SearchIndex": "plugins.search.index",
    "build_document": "plugins.search.index",
    "SearchManager": "plugins.search.manager",
    "TextProcessor": "plugins.search.processing",
    "Hit": "plugins.search.query",
    "QueryError": "plugins.search.query",
    "QueryEvaluator": "plugins.search.query",
    "IndexingDownloadingThread": "plugins.search.threads",
    "IndexingParsingThread": "plugins.search.threads",
}
"""Where each public name lives: it is imported on first use (``lazy_names``)."""

__all__ = [
    "Content",
    "Hit",
    "IndexedDocument",
    "IndexingDownloadingThread",
    "IndexingParsingThread",
    "QueryError",
    "QueryEvaluator",
    "SearchIndex",
    "SearchManager",
    "TextProcessor",
    "build_document",
    "extract_content",
]

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
