"""The inverted index of the search task, in the crawl's own storage (SPEC §7).

``search_postings`` maps a keyword to the pages it occurs in with a weight (and
its positions, for phrases); its ``page_id`` index maps a page to its keywords.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from plugins.search.content import Content
from rccrawler.data.tables import TaskTable
from rccrawler.records import PageId

if TYPE_CHECKING:
    from collections.abc import Iterable

    from plugins.search.processing import TextProcessor
    from rccrawler.data.base import DataManager, TaskRows

logger = logging.getLogger(__name__)

TITLE_WEIGHT = 10.0
KEYWORDS_WEIGHT = 5.0
HEADINGS_WEIGHT = 3.0
SUMMARY_WEIGHT = 1.5
BODY_WEIGHT = 1.0
"""Location weights: title > meta keywords > headings > body (SPEC §7)."""

FAIR_KEYWORDS = 12
"""Meta keywords beyond this many are stuffing: the field's weight shrinks in proportion."""

FIELD_GAP = 100
"""Positions skipped between two fields, so a phrase never spans a field boundary."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

DOCS = TaskTable("search_docs", (("url", "text"), ("title", "text"), ("summary", "text")))
"""URL → its title and summary."""
POSTINGS = TaskTable(
    "search_postings",
    (("term", "text"), ("weight", "float"), ("positions", "text")),
    key=("term", "page_id"),
    partition_by="term",
)
"""keyword → pages with weights and positions; hash-partitioned by keyword on PostgreSQL."""
WORDS = TaskTable("search_words", (("word", "text"),), key=("word", "page_id"))
"""Indexed words as written, for wildcards and ``rccrawler words``."""
TABLES = (DOCS, POSTINGS, WORDS)
"""The search task's tables, kept by the DataManager in the crawl's own storage."""


@dataclass(frozen=True, slots=True)
class Posting:
    """One keyword in one document."""

    weight: float
    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexedDocument:
    """A document ready for the index: computed outside the DataManager's lock."""

    url: str
    title: str
    summary: str
    postings: dict[str, Posting] = field(default_factory=dict)
    words: frozenset[str] = frozenset()
    """Indexed words as written (lowercase), for wildcards and ``rccrawler words``."""


def keyword_factor(keywords: list[str]) -> float:
    """How much meta keywords count: 1 for an honest list, less for a stuffed one
    (too many entries, or the same ones repeated)."""
    if not keywords:
        return 1.0
    factor = min(1.0, FAIR_KEYWORDS / len(keywords))
    return factor * len(set(keywords)) / len(keywords)


def build_document(content: Content, processor: TextProcessor) -> IndexedDocument:
    """Weigh a document's terms by frequency and location.

    Each field adds ``location weight × (1 + ln(count in field))`` to a term, so a
    repeated word counts, but less and less.
    """
    keyword_terms = processor.terms(content.keywords)
    fields = (
        (content.title, TITLE_WEIGHT),
        (content.keywords, KEYWORDS_WEIGHT * keyword_factor(keyword_terms)),
        (" ".join(content.headings), HEADINGS_WEIGHT),
        (content.summary if content.summary not in content.text else "", SUMMARY_WEIGHT),
        (content.text, BODY_WEIGHT),
    )
    weights: dict[str, float] = defaultdict(float)
    positions: dict[str, list[int]] = defaultdict(list)
    written: set[str] = set()
    start = 0
    for text, location_weight in fields:
        terms = processor.terms(text)
        counts: dict[str, int] = defaultdict(int)
        for offset, term in enumerate(terms):
            counts[term] += 1
            positions[term].append(start + offset)
        for term, count in counts.items():
            weights[term] += location_weight * (1.0 + math.log(count))
        written.update(processor.indexed_words(text))
        start += len(terms) + FIELD_GAP
    return IndexedDocument(
        url=content.url,
        title=content.title,
        summary=content.summary,
        postings={t: Posting(w, tuple(positions[t])) for t, w in weights.items()},
        words=frozenset(written),
    )


def document_rows(document: IndexedDocument) -> TaskRows:
    """The task-table rows of one document (stored with its page, atomically)."""
    return {
        DOCS.name: [(document.url, document.title, document.summary)],
        POSTINGS.name: [
            (term, p.weight, " ".join(map(str, p.positions)))
            for term, p in document.postings.items()
        ],
        WORDS.name: [(word,) for word in sorted(document.words)],
    }


class SearchIndex:
    """The index, read through the DataManager's task tables (any storage backend).

    Args:
        data: an open DataManager of a crawl made by the search task.
    """

    def __init__(self, data: DataManager) -> None:
        self.data = data

    def document_count(self) -> int:
        return self.data.task_row_total(DOCS.name)

    def all_documents(self) -> set[PageId]:
        return {PageId(int(row[0])) for row in self.data.task_rows(DOCS.name, columns=("page_id",))}

    def postings(self, term: str) -> dict[PageId, Posting]:
        """keyword → pages with weights."""
        rows = self.data.task_rows(
            POSTINGS.name, columns=("page_id", "weight", "positions"), equals={"term": term}
        )
        return {
            PageId(int(page)): Posting(float(weight), _positions(positions))
            for page, weight, positions in rows
        }

    def page_terms(self, page_id: PageId) -> dict[str, float]:
        """URL → keywords with weights."""
        rows = self.data.task_rows(
            POSTINGS.name, columns=("term", "weight"), equals={"page_id": page_id}
        )
        return {term: float(weight) for term, weight in rows}

    def pages_with_word_prefix(self, prefix: str) -> dict[str, set[PageId]]:
        """Indexed words starting with ``prefix`` → pages holding them."""
        rows = self.data.task_rows(WORDS.name, columns=("word", "page_id"), prefix=("word", prefix))
        found: dict[str, set[PageId]] = defaultdict(set)
        for word, page in rows:
            found[word].add(PageId(int(page)))
        return dict(found)

    def word_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words (starting with ``prefix``) and how many documents hold each."""
        return [
            (str(word), count)
            for word, count in self.data.task_row_counts(WORDS.name, "word", prefix=prefix)
        ]

    def documents(self, page_ids: Iterable[PageId]) -> dict[PageId, tuple[str, str, str]]:
        """page id → (url, title, summary)."""
        rows = self.data.task_rows(
            DOCS.name, columns=("page_id", "url", "title", "summary"),
            any_of=("page_id", list(page_ids)),
        )  # fmt: skip
        return {PageId(int(page)): (url, title, summary) for page, url, title, summary in rows}


def _positions(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split())
