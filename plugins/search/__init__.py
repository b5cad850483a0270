"""The search crawl task: a field-weighted inverted index and Boolean queries (SPEC §7)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
"""Where each public name lives: it is imported on first use (:func:`__getattr__`)."""

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


def __getattr__(name: str) -> Any:
    """A public name, imported on first use: an index worker imports what it uses
    (the content processor, the parser), not the search task's manager and commands."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
