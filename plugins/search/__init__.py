"""The search crawl task: a field-weighted inverted index and Boolean queries (SPEC §7)."""

from __future__ import annotations

from plugins.search.content import Content, extract_content
from plugins.search.index import IndexedDocument, SearchIndex, build_document
from plugins.search.manager import SearchManager
from plugins.search.processing import TextProcessor
from plugins.search.query import Hit, QueryError, QueryEvaluator
from plugins.search.threads import IndexingDownloadingThread, IndexingParsingThread

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
