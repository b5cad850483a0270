"""The inverted index of the search task, in the crawl's own SQLite database (SPEC §7).

``search_postings`` maps a keyword to the pages it occurs in with a weight (and
its positions, for phrases and snippets); its ``page_id`` index maps a page to its
keywords. ``search_docs`` keeps what a hit shows: URL, title, description, and the
body text, from which a query-biased snippet is cut.

Storage, per table (what another backend has to keep):

* ``search_docs(page_id, url, title, summary, body_start, length, text, truncated,
  terms)``: ``body_start`` is the position of the body's first word, ``length`` the
  body's word count, ``text`` the body text (cut at the word cap; a snippet finds
  word n of the body as the n-th letter run of this text), ``truncated`` says what a
  cap cut ("" when nothing), and ``terms`` lists
  the page's terms, one to a line: URL → keywords, without a second index on the
  postings (which would double the cost of writing them).
* ``search_postings(term, page_id, weight, positions)``, keyed by (term, page_id):
  ``positions`` is a BLOB of varint-encoded deltas (:func:`encode_positions`).
* ``search_words(word, term)``: the vocabulary, each indexed word as written with its
  term, for wildcards (a word's pages are its term's) and ``rccrawler words``.
* ``search_pending(page_id, …)``: a stored document's postings and words, packed in
  one row (:func:`pack_postings`) in the same transaction as its ``search_docs`` row.
  Every ``MERGE_EVERY`` documents (and at open and close) the pending rows are merged
  into ``search_postings`` and ``search_words`` in one transaction, sorted by term: a
  batch touches each B-tree page once instead of once per document. Until then those
  documents are counted but not found.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import accumulate, islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from plugins.search.content import Content, extract_content, media_type
from plugins.search.processing import WORD
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.exceptions import StateError
from rccrawler.records import PageId

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

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

MAX_WORDS = 200_000
"""Default cap on the words of one document that are indexed (``search.max_words``)."""

MAX_POSITIONS = 1_000
"""Default cap on the positions kept per term and document (``search.max_positions``):
phrases and snippets look only at a term's first occurrences; its weight counts all."""

MERGE_EVERY = 64
"""Documents whose postings wait in ``search_pending`` before a batch merge."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS search_docs (
    page_id INTEGER PRIMARY KEY, url TEXT NOT NULL, title TEXT NOT NULL, summary TEXT NOT NULL,
    body_start INTEGER NOT NULL, length INTEGER NOT NULL, text TEXT NOT NULL,
    truncated TEXT NOT NULL, terms TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS search_pending (
    page_id INTEGER PRIMARY KEY, terms TEXT NOT NULL, weights BLOB NOT NULL,
    sizes BLOB NOT NULL, positions BLOB NOT NULL, words TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS search_postings (
    term TEXT NOT NULL, page_id INTEGER NOT NULL, weight REAL NOT NULL, positions BLOB NOT NULL,
    PRIMARY KEY (term, page_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_words (
    word TEXT PRIMARY KEY, term TEXT NOT NULL
) WITHOUT ROWID;
"""


def encode_positions(positions: Sequence[int]) -> bytes:
    """Ascending positions as LEB128 varints of their deltas (most fit one byte)."""
    deltas = [b - a for a, b in zip((0, *positions), positions, strict=False)]
    if len(deltas) < 2 or max(deltas[1:]) < 0x80:
        # The usual case: every delta after the first (an absolute position) fits a byte.
        out = bytearray()
        first = deltas[0] if deltas else 0
        while deltas and first >= 0x80:
            out.append((first & 0x7F) | 0x80)
            first >>= 7
        if deltas:
            out.append(first)
        return bytes(out) + bytes(deltas[1:])
    out = bytearray()
    last = 0
    for position in positions:
        delta = position - last
        last = position
        while delta >= 0x80:
            out.append((delta & 0x7F) | 0x80)
            delta >>= 7
        out.append(delta)
    return bytes(out)


def decode_positions(data: bytes, limit: int | None = None) -> list[int]:
    """The inverse of :func:`encode_positions` (the first ``limit`` positions only, when
    given)."""
    # The usual shapes decode in C: every delta one byte, or all but the first (the
    # first "delta" is the absolute position of the first occurrence).
    head = 0
    while head < len(data) and data[head] & 0x80:
        head += 1
    rest = data[head + 1 :]
    if not rest or max(rest) < 0x80:
        first = 0
        for shift, byte in enumerate(data[: head + 1]):
            first |= (byte & 0x7F) << (7 * shift)
        values = [first, *(rest if limit is None else rest[: max(0, limit - 1)])] if data else []
        return list(accumulate(values))[:limit]
    positions: list[int] = []
    value = shift = last = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            continue
        last += value
        positions.append(last)
        if len(positions) == limit:
            break
        value = shift = 0
    return positions


@dataclass(frozen=True, slots=True)
class Posting:
    """One keyword in one document; positions stay encoded until a phrase asks."""

    weight: float
    encoded: bytes = b""

    @property
    def positions(self) -> list[int]:
        return decode_positions(self.encoded)

    def first_positions(self, limit: int) -> list[int]:
        """The first ``limit`` positions (snippets and proximity look no further)."""
        return decode_positions(self.encoded, limit)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredText:
    """What a snippet is cut from: the body text and where its words are."""

    summary: str
    """Meta description (or the text's opening): the snippet when nothing matched."""
    text: str
    body_start: int


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexedDocument:
    """A document ready for the index: computed outside the DataManager's lock."""

    url: str
    title: str
    summary: str
    postings: dict[str, Posting] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)
    """Indexed words as written (lowercase) → their terms, for wildcards and
    ``rccrawler words``."""
    text: str = ""
    """Body text, cut at the word cap, for snippets."""
    body_start: int = 0
    """Position of the first body word."""
    length: int = 0
    """Words in the body (stopwords included): field-length normalization."""
    truncated: str = ""
    """What a cap cut, e.g. "words 250000>200000" ("" when nothing)."""


def keyword_factor(keywords: list[str]) -> float:
    """How much meta keywords count: 1 for an honest list, less for a stuffed one
    (too many entries, or the same ones repeated)."""
    if not keywords:
        return 1.0
    factor = min(1.0, FAIR_KEYWORDS / len(keywords))
    return factor * len(set(keywords)) / len(keywords)


def _words(text: str) -> list[str]:
    """The lowercase letter runs of ``text``, as many as the text has: a position is the
    number of the letter run in the text as stored, which snippets count again."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return WORD.findall(lowered)
    # "İ" lowercases to "i" plus a combining dot, which would split the word in two.
    return [word.lower() for word in WORD.findall(text)]


def build_document(
    content: Content,
    processor: TextProcessor,
    *,
    max_words: int = MAX_WORDS,
    max_positions: int = MAX_POSITIONS,
) -> IndexedDocument:
    """Weigh a document's terms by frequency and location.

    Each field adds ``location weight × (1 + ln(count in field))`` to a term, so a
    repeated word counts, but less and less. Each field is tokenized once; a position
    counts every word (stopwords too), so a phrase matches words as they stand.

    Args:
        max_words: words indexed at most, over all fields (the rest is cut).
        max_positions: positions kept per term.
    """
    keyword_list = [t for t in map(processor.lookup, WORD.findall(content.keywords.lower())) if t]
    fields = (
        (content.title, TITLE_WEIGHT),
        (content.keywords, KEYWORDS_WEIGHT * keyword_factor(keyword_list)),
        (" ".join(content.headings), HEADINGS_WEIGHT),
        # A meta description is a field of its own; a summary cut from the text is not.
        (
            content.summary if content.summary.rstrip("…") not in content.text else "",
            SUMMARY_WEIGHT,
        ),
        (content.text, BODY_WEIGHT),
    )
    weights: dict[str, float] = defaultdict(float)
    positions: dict[str, list[int]] = defaultdict(list)
    distinct: set[str] = set()
    lookup = processor.lookup
    budget = max_words
    total_words = 0
    start = 0
    found: list[str] = []
    for text, location_weight in fields:
        found = _words(text)
        total_words += len(found)
        if len(found) > budget:
            found = found[:budget]
        budget -= len(found)
        distinct.update(found)
        counts: dict[str, int] = defaultdict(int)
        for offset, key in enumerate(map(lookup, found), start):
            if key:
                counts[key] += 1
                positions[key].append(offset)
        for key, count in counts.items():
            weights[key] += location_weight * (1.0 + math.log(count))
        start += len(found) + FIELD_GAP
    body_start = start - len(found) - FIELD_GAP
    text = content.text
    cut = []
    if total_words > max_words:
        cut.append(f"words {total_words}>{max_words}")
        # The body is the last field: keep its text up to its last indexed word.
        last = next(islice(WORD.finditer(text), len(found) - 1, None), None) if found else None
        text = text[: last.end()] if last is not None else ""
    crowded = [t for t, p in positions.items() if len(p) > max_positions]
    if crowded:
        cut.append(f"positions of {len(crowded)} terms>{max_positions}")
    return IndexedDocument(
        url=content.url,
        title=content.title,
        summary=content.summary,
        postings={
            t: Posting(w, encode_positions(positions[t][:max_positions]))
            for t, w in weights.items()
        },
        words={word: key for word in distinct if (key := lookup(word))},
        text=text,
        body_start=body_start,
        length=len(found),
        truncated="; ".join(cut),
    )


PackedPostings = tuple[str, bytes, bytes, bytes, str]
"""(terms, weights, sizes, positions, words): one document's postings in one row."""


def pack_postings(document: IndexedDocument) -> PackedPostings:
    """A document's postings and words as five flat columns (terms and words are
    letter runs, so a newline or a tab never occurs in them)."""
    terms = list(document.postings)
    postings = list(document.postings.values())
    return (
        "\n".join(terms),
        array("d", (p.weight for p in postings)).tobytes(),
        array("I", (len(p.encoded) for p in postings)).tobytes(),
        b"".join(p.encoded for p in postings),
        "\n".join(f"{word}\t{term}" for word, term in document.words.items()),
    )


def unpack_postings(
    page_id: int, packed: PackedPostings
) -> tuple[list[tuple[str, int, float, bytes]], list[tuple[str, str]]]:
    """(postings rows, vocabulary rows) of one packed document."""
    terms, weights, sizes, blob, words = packed
    rows = []
    if terms:
        at = 0
        for term, weight, size in zip(terms.split("\n"), array("d", weights),
                                      array("I", sizes), strict=True):  # fmt: skip
            rows.append((term, page_id, weight, blob[at : at + size]))
            at += size
    vocabulary = [(w, t) for w, _tab, t in (line.partition("\t") for line in words.split("\n"))]
    return rows, vocabulary if words else []


class SearchDataManager(SQLiteDataManager):
    """The SQLite DataManager plus the inverted index tables, in the same database.

    Non-HTML answers are not parsed by the crawl (SPEC §5.4), so this class indexes
    them as they are stored: a text/plain body by its text, any other type by the
    file name in its URL (see ``store_download``).
    """

    processor: TextProcessor | None = None
    """Set by the SearchManager; without it non-HTML answers are not indexed."""

    caps: dict[str, int] = {}
    """``max_words``/``max_positions`` for build_document, set by the SearchManager."""

    _pending = 0

    def open(self) -> None:
        super().open()
        if not self.read_only:
            with self._lock:
                self.db.executescript(_SCHEMA)
            with self._atomic() as db:
                self._merge(db)  # what a killed crawl left pending

    def close(self) -> None:
        if not self.read_only and self._db is not None:
            with self._atomic() as db:
                self._merge(db)
        super().close()

    # -- writing -----------------------------------------------------------
    def store_document(self, page_id: PageId, document: IndexedDocument) -> None:
        """Put one document in the index, replacing what a former parse stored.

        Its postings wait in ``search_pending`` (one row, same transaction) and are
        merged into ``search_postings`` with the next batch.
        """
        packed = pack_postings(document)  # before the lock: it is CPU work
        with self._atomic() as db:
            self._delete_document(db, page_id)
            db.execute(
                "INSERT INTO search_docs (page_id, url, title, summary, body_start, length, "
                "text, truncated, terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (page_id, document.url, document.title, document.summary, document.body_start,
                 document.length, document.text, document.truncated, packed[0]),
            )  # fmt: skip
            db.execute(
                "INSERT INTO search_pending (page_id, terms, weights, sizes, positions, words) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (page_id, *packed),
            )
            self._pending += 1
            if self._pending >= MERGE_EVERY:
                self._merge(db)

    def _merge(self, db: sqlite3.Connection) -> None:
        """Move every pending document's postings and words into the index, sorted by
        term, in the caller's transaction."""
        rows = db.execute(
            "SELECT page_id, terms, weights, sizes, positions, words FROM search_pending"
        ).fetchall()
        postings: list[tuple[str, int, float, bytes]] = []
        vocabulary: set[tuple[str, str]] = set()
        for page_id, *packed in rows:
            found, words = unpack_postings(page_id, tuple(packed))
            postings += found
            vocabulary.update(words)
        postings.sort(key=itemgetter(0))  # by term; a page's terms are distinct
        db.executemany(
            "INSERT INTO search_postings (term, page_id, weight, positions) VALUES (?, ?, ?, ?)",
            postings,
        )
        db.executemany(
            "INSERT OR IGNORE INTO search_words (word, term) VALUES (?, ?)", sorted(vocabulary)
        )
        db.execute("DELETE FROM search_pending")
        self._pending = 0

    @staticmethod
    def _delete_document(db: sqlite3.Connection, page_id: PageId) -> None:
        row = db.execute("SELECT terms FROM search_docs WHERE page_id = ?", (page_id,)).fetchone()
        if row is None:
            return
        db.executemany(
            "DELETE FROM search_postings WHERE term = ? AND page_id = ?",
            [(term, page_id) for term in row[0].split("\n") if term],
        )
        for table in ("search_docs", "search_pending"):
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
        self.store_document(page_id, build_document(content, self.processor, **self.caps))

    # -- reading -----------------------------------------------------------
    def _read(self, sql: str, args: Iterable[object] = ()) -> list[Any]:
        with self._lock:
            try:
                return self.db.execute(sql, tuple(args)).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    raise StateError(f"{self.path} holds no search index") from exc
                if "no such column" in str(exc):
                    raise StateError(
                        f"{self.path} holds a search index of an older format: "
                        "crawl again with --fresh"
                    ) from exc
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
            PageId(int(page)): Posting(float(weight), bytes(positions))
            for page, weight, positions in rows
        }

    def page_terms(self, page_id: PageId) -> dict[str, float]:
        """URL → keywords with weights."""
        rows = self._read("SELECT terms FROM search_docs WHERE page_id = ?", (page_id,))
        found: dict[str, float] = {}
        for term in rows[0][0].split("\n") if rows else ():
            weight = self._read(
                "SELECT weight FROM search_postings WHERE term = ? AND page_id = ?",
                (term, page_id),
            )
            if weight:
                found[term] = float(weight[0][0])
        return found

    def pages_with_word_prefix(self, prefix: str) -> dict[str, set[PageId]]:
        """Indexed words starting with ``prefix`` → pages holding them (or another
        word of the same term: a wildcard finds every form of the words it matches)."""
        rows = self._read(
            "SELECT w.word, p.page_id FROM search_words w JOIN search_postings p "
            "ON p.term = w.term WHERE w.word >= ? AND w.word < ?",
            (prefix, prefix + "\U0010ffff"),
        )
        found: dict[str, set[PageId]] = defaultdict(set)
        for word, page in rows:
            found[word].add(PageId(int(page)))
        return dict(found)

    def word_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words (starting with ``prefix``) and how many documents hold each."""
        rows = self._read(
            "SELECT w.word, COUNT(*) FROM search_words w JOIN search_postings p "
            "ON p.term = w.term WHERE w.word >= ? AND w.word < ? GROUP BY w.word ORDER BY w.word",
            (prefix, prefix + "\U0010ffff"),
        )
        return [(word, int(count)) for word, count in rows]

    def _by_ids(self, columns: str, page_ids: Iterable[PageId]) -> list[Any]:
        ids = list(page_ids)
        rows: list[Any] = []
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows += self._read(
                f"SELECT page_id, {columns} FROM search_docs WHERE page_id IN ({marks})", chunk
            )
        return rows

    def documents(self, page_ids: Iterable[PageId]) -> dict[PageId, tuple[str, str, str]]:
        """page id → (url, title, summary)."""
        rows = self._by_ids("url, title, summary", page_ids)
        return {PageId(int(page)): (url, title, summary) for page, url, title, summary in rows}

    def stored_texts(self, page_ids: Iterable[PageId]) -> dict[PageId, StoredText]:
        """page id → what its snippet is cut from (read for the hits shown only)."""
        rows = self._by_ids("summary, text, body_start", page_ids)
        return {
            PageId(int(page)): StoredText(summary=summary, text=text, body_start=int(body_start))
            for page, summary, text, body_start in rows
        }
