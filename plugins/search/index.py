"""The inverted index of the search task, in the crawl's own SQLite database (SPEC §7).

``search_postings`` maps a keyword to the pages it occurs in with a weight (and
its positions, for phrases); its ``page_id`` index maps a page to its keywords.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from plugins.search.content import Content, extract_content, media_type
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.exceptions import StateError
from rccrawler.records import PageId

if TYPE_CHECKING:
    from collections.abc import Iterable

    from plugins.search.processing import TextProcessor
    from rccrawler.records import DownloadResult

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

_SCHEMA = """
CREATE TABLE IF NOT EXISTS search_docs (
    page_id INTEGER PRIMARY KEY, url TEXT NOT NULL, title TEXT NOT NULL, summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS search_postings (
    term TEXT NOT NULL, page_id INTEGER NOT NULL, weight REAL NOT NULL, positions TEXT NOT NULL,
    PRIMARY KEY (term, page_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS search_postings_page ON search_postings (page_id);
CREATE TABLE IF NOT EXISTS search_words (
    word TEXT NOT NULL, page_id INTEGER NOT NULL, PRIMARY KEY (word, page_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS search_words_page ON search_words (page_id);
"""


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


class SearchDataManager(SQLiteDataManager):
    """The SQLite DataManager plus the inverted index tables, in the same database.

    Non-HTML answers are not parsed by the crawl (SPEC §5.4), so this class indexes
    them as they are stored: a text/plain body by its text, any other type by the
    file name in its URL (see ``store_download``).
    """

    processor: TextProcessor | None = None
    """Set by the SearchManager; without it non-HTML answers are not indexed."""

    def open(self) -> None:
        super().open()
        if not self.read_only:
            with self._lock:
                self.db.executescript(_SCHEMA)

    # -- writing -----------------------------------------------------------
    def store_document(self, page_id: PageId, document: IndexedDocument) -> None:
        """Put one document in the index, replacing what a former parse stored."""
        with self._atomic() as db:
            self._delete_document(db, page_id)
            db.execute(
                "INSERT INTO search_docs (page_id, url, title, summary) VALUES (?, ?, ?, ?)",
                (page_id, document.url, document.title, document.summary),
            )
            db.executemany(
                "INSERT INTO search_postings (term, page_id, weight, positions) "
                "VALUES (?, ?, ?, ?)",
                [
                    (term, page_id, p.weight, " ".join(map(str, p.positions)))
                    for term, p in document.postings.items()
                ],
            )
            db.executemany(
                "INSERT INTO search_words (word, page_id) VALUES (?, ?)",
                [(word, page_id) for word in sorted(document.words)],
            )

    @staticmethod
    def _delete_document(db: sqlite3.Connection, page_id: PageId) -> None:
        for table in ("search_docs", "search_postings", "search_words"):
            db.execute(f"DELETE FROM {table} WHERE page_id = ?", (page_id,))

    def store_download(self, page_id: PageId, result: DownloadResult, content_hash: str) -> None:
        super().store_download(page_id, result, content_hash)
        kind = media_type(result.content_type)
        if self.processor is None or result.error or result.status != 200 or kind in HTML_TYPES:
            return
        with self._lock:
            url = self._load_page(page_id).normalized_url
        # The filter and the weighing run outside the lock, like a parser's.
        content = extract_content(url, result.body, result.content_type)
        self.store_document(page_id, build_document(content, self.processor))

    # -- reading -----------------------------------------------------------
    def _read(self, sql: str, args: Iterable[object] = ()) -> list[Any]:
        with self._lock:
            try:
                return self.db.execute(sql, tuple(args)).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    raise StateError(f"{self.path} holds no search index") from exc
                raise

    def document_count(self) -> int:
        return int(self._read("SELECT COUNT(*) FROM search_docs")[0][0])

    def all_documents(self) -> set[PageId]:
        return {PageId(int(r[0])) for r in self._read("SELECT page_id FROM search_docs")}

    def postings(self, term: str) -> dict[PageId, Posting]:
        """keyword → pages with weights."""
        rows = self._read(
            "SELECT page_id, weight, positions FROM search_postings WHERE term = ?", (term,)
        )
        return {
            PageId(int(page)): Posting(float(weight), _positions(positions))
            for page, weight, positions in rows
        }

    def page_terms(self, page_id: PageId) -> dict[str, float]:
        """URL → keywords with weights."""
        rows = self._read("SELECT term, weight FROM search_postings WHERE page_id = ?", (page_id,))
        return {term: float(weight) for term, weight in rows}

    def pages_with_word_prefix(self, prefix: str) -> dict[str, set[PageId]]:
        """Indexed words starting with ``prefix`` → pages holding them."""
        rows = self._read(
            "SELECT word, page_id FROM search_words WHERE word >= ? AND word < ?",
            (prefix, prefix + "\U0010ffff"),
        )
        found: dict[str, set[PageId]] = defaultdict(set)
        for word, page in rows:
            found[word].add(PageId(int(page)))
        return dict(found)

    def word_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words (starting with ``prefix``) and how many documents hold each."""
        rows = self._read(
            "SELECT word, COUNT(*) FROM search_words WHERE word >= ? AND word < ? "
            "GROUP BY word ORDER BY word",
            (prefix, prefix + "\U0010ffff"),
        )
        return [(word, int(count)) for word, count in rows]

    def documents(self, page_ids: Iterable[PageId]) -> dict[PageId, tuple[str, str, str]]:
        """page id → (url, title, summary)."""
        ids = list(page_ids)
        found: dict[PageId, tuple[str, str, str]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT page_id, url, title, summary FROM search_docs WHERE page_id IN ({marks})",
                chunk,
            )
            for page, url, title, summary in rows:
                found[PageId(int(page))] = (url, title, summary)
        return found


def _positions(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split())
