"""The inverted index of the search task, in the crawl's own SQLite database (SPEC §7).

``search_postings`` maps a keyword to the pages it occurs in with a weight (and
its positions, for phrases and snippets), and by its key a page to its keywords.
``search_docs`` keeps what a hit shows: URL, title, description, and the body text,
from which a query-biased snippet is cut.

Storage: task tables (``rccrawler.data.tables``), so the index lives in the crawl's
own storage on every backend and each page's rows are stored with its parse:

* ``search_docs(page_id, url, title, summary, body_start, length, text, truncated)``:
  ``body_start`` is the position of the body's first word, ``length`` the body's word
  count, ``text`` the body text (cut at the word cap; a snippet finds word n of the
  body as the n-th letter run of this text), ``truncated`` what a cap cut.
* ``search_postings(page_id, term, weight, positions)``, keyed by (page_id, term) and
  hash-partitioned by term on PostgreSQL: ``positions`` is a BLOB of varint-encoded
  deltas (:func:`encode_positions`).
* ``search_words(page_id, word, term)``: each indexed word of a page as written, with
  its term, for wildcards and ``rccrawler words``.

Both are keyed by page first, so a crawl writes them as appends (page ids grow); their
indexes by term and by word are built once the crawl is over (``defer_indexes``: kept
up to date row by row, they made indexing 5× slower than crawling). A search beside a
running crawl, or of a stopped one, scans instead: slower, same hits.
"""

from __future__ import annotations

import logging
import math
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import TYPE_CHECKING, NamedTuple

from plugins.search.content import Content
from plugins.search.processing import WORD
from rccrawler.data.tables import TaskTable
from rccrawler.records import PageId

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

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

MAX_WORDS = 200_000
"""Default cap on the words of one document that are indexed (``search.max_words``)."""

MAX_POSITIONS = 1_000
"""Default cap on the positions kept per term and document (``search.max_positions``):
phrases and snippets look only at a term's first occurrences; its weight counts all."""

DOCS = TaskTable(
    "search_docs",
    (("url", "text"), ("title", "text"), ("summary", "text"), ("body_start", "int"),
     ("length", "int"), ("text", "text"), ("truncated", "text")),
)  # fmt: skip
"""URL → what a hit shows and what its snippet is cut from."""
POSTINGS = TaskTable(
    "search_postings",
    (("term", "text"), ("weight", "float"), ("positions", "bytes")),
    key=("page_id", "term"),
    indexes=(("term",),),
    partition_by="term",
    defer_indexes=True,
)
"""keyword → pages with weights and positions; hash-partitioned by keyword on PostgreSQL."""
WORDS = TaskTable(
    "search_words",
    (("word", "text"), ("term", "text")),
    key=("page_id", "word"),
    indexes=(("word",),),
    defer_indexes=True,
)
"""Indexed words as written, with their terms, for wildcards and ``rccrawler words``."""
TABLES = (DOCS, POSTINGS, WORDS)
"""The search task's tables, kept by the DataManager in the crawl's own storage."""
MAX_EXPANSION = 500
"""Words a wildcard expands to at most."""


def encode_positions(positions: Sequence[int]) -> bytes:
    """Ascending positions as LEB128 varints of their deltas (most fit one byte)."""
    if not positions:
        return b""
    first = positions[0]
    head = bytearray()
    while first >= 0x80:
        head.append((first & 0x7F) | 0x80)
        first >>= 7
    head.append(first)
    try:
        # The usual case: every delta after the first position fits a byte (in C).
        rest = bytes(map(operator.sub, islice(positions, 1, None), positions))
    except ValueError:  # a delta of 256 or more
        rest = b"\x80"
    if not rest or max(rest) < 0x80:
        return bytes(head) + rest
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


class Posting(NamedTuple):
    """One keyword in one document; positions stay encoded until a phrase asks.

    A named tuple: an index makes one for every term of every page, and a tuple is
    made several times faster than a frozen dataclass."""

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


def document_rows(document: IndexedDocument) -> TaskRows:
    """The task-table rows of one document (stored with its page, atomically)."""
    return {
        DOCS.name: [(document.url, document.title, document.summary, document.body_start,
                     document.length, document.text, document.truncated)],
        POSTINGS.name: [(term, *posting) for term, posting in document.postings.items()],
        WORDS.name: sorted(document.words.items()),
    }  # fmt: skip


class SearchIndex:
    """The index, read through the DataManager's task tables (any storage backend).

    Args:
        data: an open DataManager of a crawl made by the search task.
    """

    def __init__(self, data: DataManager) -> None:
        self.data = data
        self._average_length: float | None = None

    def average_length(self) -> float:
        """Words in a document's body on average (read once: it changes slowly)."""
        if self._average_length is None:
            lengths = [int(n) for (n,) in self.data.task_rows(DOCS.name, columns=("length",))]
            self._average_length = max(1.0, sum(lengths) / max(1, len(lengths)))
        return self._average_length

    def lengths(self, page_ids: Iterable[PageId]) -> dict[PageId, int]:
        """page id → words in its body."""
        return {PageId(int(page)): int(n) for page, n in self._by_ids(("length",), page_ids)}  # type: ignore[call-overload]

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
            PageId(int(page)): Posting(float(weight), bytes(positions))
            for page, weight, positions in rows
        }

    def page_terms(self, page_id: PageId) -> dict[str, float]:
        """URL → keywords with weights."""
        rows = self.data.task_rows(
            POSTINGS.name, columns=("term", "weight"), equals={"page_id": page_id}
        )
        return {term: float(weight) for term, weight in rows}

    def pages_with_word_prefix(self, prefix: str) -> dict[str, set[PageId]]:
        """Indexed words starting with ``prefix`` → pages holding them (or another
        word of the same term: a wildcard finds every form of the words it matches)."""
        term_of: dict[str, str] = {}
        for word, term in self.data.task_rows(
            WORDS.name, columns=("word", "term"), prefix=("word", prefix)
        ):
            term_of.setdefault(word, term)
            if len(term_of) >= MAX_EXPANSION:
                break
        pages: dict[str, set[PageId]] = defaultdict(set)
        for term, page in self.data.task_rows(
            POSTINGS.name,
            columns=("term", "page_id"),
            any_of=("term", sorted(set(term_of.values()))),
        ):
            pages[term].add(PageId(int(page)))
        return {word: set(pages.get(term, ())) for word, term in term_of.items()}

    def word_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words (starting with ``prefix``) and how many documents hold each."""
        return [
            (str(word), count)
            for word, count in self.data.task_row_counts(WORDS.name, "word", prefix=prefix)
        ]

    def _by_ids(
        self, columns: Sequence[str], page_ids: Iterable[PageId]
    ) -> list[tuple[object, ...]]:
        return self.data.task_rows(
            DOCS.name, columns=("page_id", *columns), any_of=("page_id", list(page_ids))
        )

    def documents(self, page_ids: Iterable[PageId]) -> dict[PageId, tuple[str, str, str]]:
        """page id → (url, title, summary)."""
        rows = self._by_ids(("url", "title", "summary"), page_ids)
        return {
            PageId(int(page)): (str(url), str(title), str(summary))  # type: ignore[call-overload]
            for page, url, title, summary in rows
        }

    def stored_texts(self, page_ids: Iterable[PageId]) -> dict[PageId, StoredText]:
        """page id → what its snippet is cut from (read for the hits shown only)."""
        rows = self._by_ids(("summary", "text", "body_start"), page_ids)
        return {
            PageId(int(page)): StoredText(  # type: ignore[call-overload]
                summary=str(summary),
                text=str(text),
                body_start=int(body_start),  # type: ignore[call-overload]
            )
            for page, summary, text, body_start in rows
        }
