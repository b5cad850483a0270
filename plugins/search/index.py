"""The inverted index of the search task, in the crawl's own storage (SPEC §7).

A crawl writes one row per page; when it is over the task derives the term-keyed
posting lists from them. Both live in task tables (``rccrawler.data.tables``), so the
index works on every storage backend:

* ``search_docs``, one row per page, stored with its parse: what a hit shows (``url``,
  ``title``, ``summary``), what its snippet is cut from (``text``, the body cut at the
  word cap: word n of the body is the n-th letter run of this text, ``body_start`` the
  position of its first word), ``length`` (body words, for length normalization) and
  ``truncated`` (what a cap cut); then the page's terms, packed: ``terms`` (sorted,
  one a line), ``weights`` (doubles), ``counts`` (positions kept per term) and
  ``positions`` (every term's positions in turn, :func:`encode_positions` of the whole
  page), ``words`` (its indexed words as written, sorted, one a line) and
  ``word_terms`` (the term of each). Built and packed in C (no loop per word), one row
  instead of a row per term and per word: that made indexing four times slower than
  crawling.
* ``search_lists(term, batch, pages, weights, counts, positions)``, written by
  :func:`build_lists` when the crawl ends: for each term and batch of
  :data:`BATCH` pages, their ids, weights and positions packed, keyed by term and
  hash-partitioned by term on PostgreSQL (``search.partitions``): a one-term query
  reads one partition.
* ``search_vocabulary(word, term, documents)``: each indexed word as written, its term
  and how many documents hold it, for wildcards and ``rccrawler words``.
* ``search_built(documents)``: how many documents the lists cover. A search beside a
  running crawl, or of a stopped one, finds a count that is not the documents' and
  scans the per-page rows instead: slower, same hits.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from array import array
from bisect import bisect_left
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from plugins.search.content import Content, html_content
from plugins.search.processing import WORD
from rccrawler.data.tables import TaskTable
from rccrawler.records import PageId

if TYPE_CHECKING:
    from plugins.search.processing import TextProcessor
    from rccrawler.data.base import DataManager, TaskRows
    from rccrawler.web.html import ParsedPage

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
     ("length", "int"), ("text", "text"), ("truncated", "text"), ("terms", "text"),
     ("weights", "bytes"), ("counts", "bytes"), ("positions", "bytes"), ("words", "text"),
     ("word_terms", "text")),
    large_rows=True,
)  # fmt: skip
"""Page → what a hit shows, what its snippet is cut from, and its terms packed."""
LISTS = TaskTable(
    "search_lists",
    (("term", "text"), ("batch", "int"), ("pages", "bytes"), ("weights", "bytes"),
     ("counts", "bytes"), ("positions", "bytes")),
    key=("term", "batch"),
    partition_by="term",
    per_page=False,
    large_rows=True,
)  # fmt: skip
"""keyword → pages with weights and positions, a row per batch of pages; derived when
the crawl ends, hash-partitioned by keyword on PostgreSQL."""
VOCABULARY = TaskTable(
    "search_vocabulary",
    (("word", "text"), ("term", "text"), ("documents", "int")),
    key=("word",),
    per_page=False,
)
"""Indexed words as written, their terms and document counts (wildcards, ``words``)."""
BUILT = TaskTable("search_built", (("documents", "int"),), key=("documents",), per_page=False)
"""The number of documents the lists were derived from (no row: not derived yet)."""
TABLES = (DOCS, LISTS, VOCABULARY, BUILT)
"""The search task's tables, kept by the DataManager in the crawl's own storage."""
MAX_EXPANSION = 500
"""Words a wildcard expands to at most."""
BATCH = 1_024
"""Pages per row of a posting list (and per read of the pages when deriving them)."""
CACHE_POSTINGS = 300_000
"""Postings a :class:`SearchIndex` keeps decoded at most (about 50 MB)."""
AGE_EVERY = 10_000
"""Asks after which the posting cache halves how often each term was asked for."""


_U32 = next(code for code in "IL" if array(code).itemsize == 4)
_CODES = {2: "H", 4: _U32}
_BIG_ENDIAN = sys.byteorder == "big"


def _pack(code: str, values: Iterable[float] | Iterable[int]) -> bytes:
    """Numbers as a little-endian array (built in C)."""
    packed = array(code, values)
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _unpack(code: str, data: bytes) -> array[Any]:
    """The inverse of :func:`_pack`."""
    values = array(code)
    values.frombytes(data)
    if _BIG_ENDIAN:
        values.byteswap()
    return values


def encode_positions(positions: Sequence[int], largest: int | None = None) -> bytes:
    """Positions as a byte for their width (2, or 4 from 65,536 on) and then each as an
    unsigned integer of that width: packed and unpacked in C, without a loop per
    position (varint deltas took a Python loop per term of every page).

    Args:
        largest: the largest position (default: the last, for ascending positions).
    """
    if not positions:
        return b""
    top = positions[-1] if largest is None else largest
    width = 2 if top < 0x10000 else 4
    return bytes((width,)) + _pack(_CODES[width], positions)


def decode_positions(data: bytes, limit: int | None = None) -> list[int]:
    """The inverse of :func:`encode_positions` (the first ``limit`` positions only, when
    given)."""
    if not data:
        return []
    width = data[0]
    end = len(data) if limit is None else 1 + width * limit
    return _unpack(_CODES[width], data[1:end]).tolist()


def _segments(blob: bytes, counts: Sequence[int]) -> Iterator[bytes]:
    """Each term's positions, encoded, from a page's :func:`encode_positions` of every
    term's positions in turn (``counts`` of each), cut in C."""
    if not counts:
        return iter(())
    width, head = blob[0], blob[:1]
    ends = list(map((1).__add__, map(width.__mul__, accumulate(counts))))
    return map(head.__add__, map(blob.__getitem__, map(slice, [1, *ends[:-1]], ends)))


class Posting(NamedTuple):
    """One keyword in one document; positions stay encoded until a phrase asks.

    A named tuple: a query makes one for every page of each of its terms, and a tuple
    is made several times faster than a frozen dataclass."""

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
    terms: tuple[str, ...] = ()
    """The document's terms, sorted."""
    weights: tuple[float, ...] = ()
    """The weight of each term."""
    counts: tuple[int, ...] = ()
    """How many positions of each term are kept (the cap cuts)."""
    positions: bytes = b""
    """Each term's kept positions in turn, ascending, as one :func:`encode_positions`."""
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

    @property
    def postings(self) -> dict[str, Posting]:
        """term → its weight and positions (unpacked: for tests and tools)."""
        segments = _segments(self.positions, self.counts)
        return dict(zip(self.terms, map(Posting, self.weights, segments), strict=True))


def keyword_factor(keywords: list[str]) -> float:
    """How much meta keywords count: 1 for an honest list, less for a stuffed one
    (too many entries, or the same ones repeated)."""
    if not keywords:
        return 1.0
    factor = min(1.0, FAIR_KEYWORDS / len(keywords))
    return factor * len(set(keywords)) / len(keywords)


_LETTERS = bytes(byte if 97 <= byte <= 122 or byte >= 128 else 32 for byte in range(256))
"""bytes.translate table of lowercase UTF-8: ASCII letters and the bytes of other
characters stay, every other ASCII byte (digits, "_", punctuation, space) is a space."""
_ASCII_LETTERS = bytes(byte if 97 <= byte <= 122 else 32 for byte in range(256))
"""The same for a text whose only non-ASCII characters are not letters: they go too."""
_ASCII = bytes(range(128))
_WORD_CHARS: dict[str, bool] = {}
"""Non-ASCII character → whether it belongs to a word (as :data:`WORD` says)."""


def _is_word_char(char: str) -> bool:
    found = _WORD_CHARS.get(char)
    if found is None:
        if len(_WORD_CHARS) > 100_000:  # a page of every script keeps no more
            _WORD_CHARS.clear()
        found = _WORD_CHARS[char] = WORD.fullmatch(char) is not None
    return found


def _words(text: str) -> list[str]:
    """The lowercase letter runs of ``text``, as many as the text has: a position is the
    number of the letter run in the text as stored, which snippets count again.

    The same words as ``WORD.findall(text.lower())``, found by C passes over the bytes
    (the regex engine took a third of a page's indexing): every byte that is not part
    of a letter becomes a space and the text splits at spaces. Non-ASCII characters
    that are not letters ("’", "¶") all go in one pass when the text has no non-ASCII
    letter, else each of them is replaced in turn.
    """
    lowered = text.lower()
    if len(lowered) != len(text):
        # "İ" lowercases to "i" plus a combining dot, which would split the word in two.
        return [word.lower() for word in WORD.findall(text)]
    data = lowered.encode("utf-8", "surrogatepass")
    if lowered.isascii():
        return data.translate(_ASCII_LETTERS).decode().split()
    others = set(data.translate(None, _ASCII).decode("utf-8", "surrogatepass"))
    if not any(map(_is_word_char, others)):  # punctuation only, as "’" or "¶"
        return data.translate(_ASCII_LETTERS).decode().split()
    for char in others:
        if not _is_word_char(char):
            data = data.replace(char.encode("utf-8", "surrogatepass"), b" ")
    return data.translate(_LETTERS).decode().split()


def document_fields(content: Content, processor: TextProcessor) -> tuple[tuple[str, float], ...]:
    """(text, location weight) of each field of a document, the body last."""
    keywords = [t for t in map(processor.lookup, WORD.findall(content.keywords.lower())) if t]
    return (
        (content.title, TITLE_WEIGHT),
        (content.keywords, KEYWORDS_WEIGHT * keyword_factor(keywords)),
        (" ".join(content.headings), HEADINGS_WEIGHT),
        # A meta description is a field of its own; a summary cut from the text is not.
        (
            content.summary if content.summary.rstrip("…") not in content.text else "",
            SUMMARY_WEIGHT,
        ),
        (content.text, BODY_WEIGHT),
    )


def field_words(
    fields: Iterable[tuple[str, float]], max_words: int
) -> tuple[list[tuple[list[str], float]], int]:
    """Each field's words (tokenized once) with its weight, cut where ``max_words`` in
    all are reached; and how many words the fields held before the cut."""
    budget = max_words
    total = 0
    tokenized = []
    for text, location_weight in fields:
        found = _words(text)
        total += len(found)
        if len(found) > budget:
            found = found[:budget]
        budget -= len(found)
        tokenized.append((found, location_weight))
    return tokenized, total


def indexed_text(text: str, words: int) -> str:
    """The body text up to its last indexed word (the body is the last field: a cap
    cuts its end)."""
    last = next(islice(WORD.finditer(text), words - 1, None), None) if words else None
    return text[: last.end()] if last is not None else ""


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

    Nothing loops over the words in Python (a page has thousands): each word's term
    number is looked up by ``map``, and the numbers are counted, weighed and put in
    term order (a stable sort of the positions) in numpy. Looking up each word's term
    and hashing the strings again to count them, to number them and to sort the
    positions took a fifth more instructions (callgrind, 14.4 against 12.1 million a
    page of the Python docs).

    Args:
        max_words: words indexed at most, over all fields (the rest is cut).
        max_positions: positions kept per term.
    """
    import numpy as np  # here: a query never needs it (see _list_rows)

    numbers = processor.numbering()
    number_of = numbers.__getitem__
    tokenized, total_words = field_words(document_fields(content, processor), max_words)
    gap = np.zeros(FIELD_GAP, np.int64)
    pieces: list[Any] = []
    distinct: set[str] = set()
    found: list[str] = []
    for found, _weight in tokenized:
        distinct.update(found)
        pieces += (np.fromiter(map(number_of, found), np.int64, len(found)), gap)
    keys = np.concatenate(pieces)
    """The term number at each position: 0 for a stopword, and in the gaps after fields."""
    present, slots = _term_slots(keys)  # present[0] is 0: the gaps
    names = list(map(numbers.names.__getitem__, present[1:].tolist()))
    by_name = np.array(sorted(range(len(names)), key=names.__getitem__), np.int64)
    rank = np.empty(len(present), np.int64)
    rank[0] = -1
    rank[1 + by_name] = np.arange(len(by_name))
    weights = np.zeros(len(present))
    everywhere = np.zeros(len(present), np.int64)
    start = 0
    for field_found, location_weight in tokenized:
        counts = np.bincount(slots[start : start + len(field_found)], minlength=len(present))
        counts[0] = 0
        # Adding 0.0 where a field lacks a term: the same sums, field by field, as a dict.
        weights += location_weight * _one_plus_log(counts)
        everywhere += counts
        start += len(field_found) + FIELD_GAP
    body_start = len(keys) - len(found) - FIELD_GAP
    cut = [f"words {total_words}>{max_words}"] if total_words > max_words else []
    text = indexed_text(content.text, len(found)) if cut else content.text
    indexed = np.flatnonzero(keys)
    ranks = rank[slots[indexed]]
    if len(by_name) <= 1 << 16:  # nearly every page: numpy sorts 16-bit keys by radix
        ranks = ranks.astype(np.uint16)
    order: list[int] = indexed[np.argsort(ranks, kind="stable")].tolist()
    counts_kept: list[int] = everywhere[1 + by_name].tolist()
    if max(counts_kept, default=0) > max_positions:
        crowded = sum(count > max_positions for count in counts_kept)
        cut.append(f"positions of {crowded} terms>{max_positions}")
        ends = list(accumulate(counts_kept))
        starts = [end - count for end, count in zip(ends, counts_kept, strict=True)]
        order = [position for start, count in zip(starts, counts_kept, strict=True)
                 for position in order[start : start + min(count, max_positions)]]  # fmt: skip
        counts_kept = [min(count, max_positions) for count in counts_kept]
    lookup = processor.lookup
    return IndexedDocument(
        url=content.url,
        title=content.title,
        summary=content.summary,
        terms=tuple(map(names.__getitem__, by_name.tolist())),
        weights=tuple(weights[1 + by_name].tolist()),
        counts=tuple(counts_kept),
        positions=encode_positions(order, len(keys)),
        words=dict(filter(itemgetter(1), zip(distinct, map(lookup, distinct), strict=True))),
        text=text,
        body_start=body_start,
        length=len(found),
        truncated="; ".join(cut),
    )


DENSE_NUMBERS = 4
"""A document's term numbers are counted into a table (as long as the highest number)
while that number is below this many times its positions; else they are sorted. On the
Python docs the table took 66 µs a page where the sort took 178; at a hundred thousand
numbers a page of 10,000 positions sorts faster."""


def _term_slots(keys: Any) -> tuple[Any, Any]:
    """The distinct numbers of ``keys``, ascending, and the index of each key's among
    them: what ``np.unique(keys, return_inverse=True)`` gives."""
    import numpy as np

    top = int(keys.max())
    if top >= DENSE_NUMBERS * len(keys):
        present, slots = np.unique(keys, return_inverse=True)
        return present, slots.reshape(-1)
    present = np.flatnonzero(np.bincount(keys))
    slot_of = np.empty(top + 1, np.int64)  # only the entries of present numbers are read
    slot_of[present] = np.arange(len(present))
    return present, slot_of[keys]


_LOGS: list[Any] = []
"""``1 + ln(n)`` for n from 0 (which gets 0.0: no occurrence, no weight) up, as far as
counts have gone, in numpy; each computed by ``math.log``, as the weights always were."""


def _one_plus_log(counts: Any) -> Any:
    """``1 + ln(count)`` of each count (0.0 for 0), looked up in :data:`_LOGS`."""
    import numpy as np

    top = int(counts.max()) if len(counts) else 0
    if not _LOGS or top >= len(_LOGS[0]):
        size = max(2 * top + 2, 1024)
        _LOGS[:] = [np.array([0.0, *((1.0).__add__(math.log(n)) for n in range(1, size))])]
    return _LOGS[0][counts]


def document_rows(document: IndexedDocument) -> TaskRows:
    """The task-table rows of one document: one row, stored with its page, atomically."""
    written = sorted(document.words)
    return {
        DOCS.name: [(document.url, document.title, document.summary, document.body_start,
                     document.length, document.text, document.truncated,
                     "\n".join(document.terms), _pack("d", document.weights),
                     _pack(_U32, document.counts), document.positions, "\n".join(written),
                     "\n".join(map(document.words.__getitem__, written)))],
    }  # fmt: skip


def content_rows(content: Content, processor: TextProcessor, caps: Mapping[str, int]) -> TaskRows:
    """The rows of a page's content, weighed (``caps``: see ``index_caps``): how every
    indexer of the task builds them, in a thread or in an index worker."""
    return document_rows(build_document(content, processor, **caps))


def page_rows(
    normalized_url: str, parsed: ParsedPage, processor: TextProcessor, caps: Mapping[str, int]
) -> TaskRows:
    """The rows of a parsed HTML page (a ``noindex`` page is left out by its
    ParsingThread, which knows its response's X-Robots-Tag too)."""
    return content_rows(html_content(normalized_url, parsed), processor, caps)


def _lines(text: str) -> list[str]:
    """The lines of a packed text column ("" holds none)."""
    return text.split("\n") if text else []


class _Entries(NamedTuple):
    """One page's postings of one part of the terms, as its row packs them."""

    page: int
    terms: list[str]
    weights: bytes
    counts: bytes
    width: int
    positions: bytes
    """Each term's positions in turn, ``width`` bytes each (no leading width byte)."""


def _list_rows(batch: int, pages: Sequence[_Entries], width: int) -> list[tuple[object, ...]]:
    """The posting-list rows of one batch of pages: a row per term, with its pages'
    ids, weights, position counts and positions packed, ``width`` bytes each, after a
    byte for their width.

    The entries (a page and one of its terms) are put in term order by one stable sort
    of their terms' numbers, and each term's row is cut from the reordered arrays, in
    numpy: a batch has hundreds of thousands of entries, and the same steps in Python's
    own arrays and maps took three times as long, the longest part of a crawl's end.
    """
    import numpy as np  # here: a query never needs it, and it takes 0.1 s to import

    terms: list[str] = []
    for entries in pages:
        terms += entries.terms
    names = sorted(set(terms))
    number = dict(zip(names, range(len(names)), strict=True))
    keys = np.fromiter(map(number.__getitem__, terms), dtype=np.int64, count=len(terms))
    order = np.argsort(keys, kind="stable")
    code = f"<u{width}"
    positions = np.frombuffer(b"".join(
        entries.positions if entries.width == width
        else np.frombuffer(entries.positions, f"<u{entries.width}").astype(code).tobytes()
        for entries in pages
    ), code)  # fmt: skip
    counts = np.frombuffer(b"".join(entries.counts for entries in pages), "<u4")
    pages_of = np.repeat(np.array([entries.page for entries in pages], "<i8"),
                         [len(entries.terms) for entries in pages])  # fmt: skip
    weights = np.frombuffer(b"".join(entries.weights for entries in pages), "<f8")
    # Each entry's positions, in the new order: a run of indexes per entry.
    ordered_counts = counts[order].astype(np.int64)
    ends = np.cumsum(ordered_counts)
    starts = np.cumsum(counts, dtype=np.int64) - counts
    runs = np.repeat(starts[order] - (ends - ordered_counts), ordered_counts)
    packed_positions = positions[runs + np.arange(len(runs))].tobytes()
    packed_pages = pages_of[order].tobytes()
    packed_weights = weights[order].tobytes()
    packed_counts = counts[order].tobytes()
    spots = [0, *(ends * width).tolist()]
    head = bytes((width,))
    out: list[tuple[object, ...]] = []
    entry = 0
    for term, end in zip(names, np.cumsum(np.bincount(keys)).tolist(), strict=True):
        out.append((term, batch, packed_pages[8 * entry : 8 * end],
                    packed_weights[8 * entry : 8 * end], packed_counts[4 * entry : 4 * end],
                    head + packed_positions[spots[entry] : spots[end]]))  # fmt: skip
        entry = end
    return out


SAMPLE_EVERY = 8
"""Every how many pages of a batch give the sample its parts are cut by."""


def _cuts(rows: Sequence[tuple[Any, ...]], column: int, parts: int) -> list[str | None]:
    """Where ``parts`` parts of the (sorted) lines of ``column`` begin and end, cut so
    that each holds about as many lines of the pages: None, cut points, None. The cut
    points come from a sample of the pages, the same in every process."""
    sample = sorted(chain.from_iterable(_lines(row[column]) for row in rows[::SAMPLE_EVERY]))
    inner = [sample[len(sample) * i // parts] for i in range(1, parts)] if sample else []
    return [None, *inner, *([None] * (parts - len(inner)))][: parts + 1]


def _part(lines: list[str], low: str | None, high: str | None) -> slice:
    """The sorted ``lines`` from ``low`` (included) to ``high`` (excluded); None: no end."""
    return slice(
        0 if low is None else bisect_left(lines, low),
        len(lines) if high is None else bisect_left(lines, high),
    )


LIST_COLUMNS = ("page_id", "terms", "weights", "counts", "positions")
"""The columns of the pages' rows that the posting lists are derived from."""
WORD_COLUMNS = ("words", "word_terms")
"""The columns that the vocabulary is derived from."""


def list_part(
    batch: int, rows: Sequence[tuple[Any, ...]], part: int = 0, parts: int = 1
) -> list[tuple[object, ...]]:
    """The posting-list rows of the ``part``-th of ``parts`` ranges of the terms of one
    batch of pages, their :data:`LIST_COLUMNS` in page order.

    The parts of a batch are disjoint and in order, so they can be derived at the
    same time (in worker processes) and joined.
    """
    cuts = _cuts(rows, 1, parts)
    low, high = cuts[part], cuts[part + 1]
    entries: list[_Entries] = []
    # The widest positions of the batch, for every part (a page with none counts 2).
    width = max((bytes(row[4])[:1] or b"\x02")[0] for row in rows)
    for page, terms, weights, counts, positions in rows:
        names = _lines(terms)
        kept = _part(names, low, high)
        first, last = kept.start, kept.stop
        if last > first:
            blob, packed_counts = bytes(positions), bytes(counts)
            own = blob[0]
            begin = 1 + own * sum(_unpack(_U32, packed_counts[: 4 * first]))
            within = packed_counts[4 * first : 4 * last]
            entries.append(_Entries(
                int(page), names[kept], bytes(weights)[8 * first : 8 * last], within, own,
                blob[begin : begin + own * sum(_unpack(_U32, within))],
            ))  # fmt: skip
    return _list_rows(batch, entries, width) if entries else []


def vocabulary_part(
    rows: Sequence[tuple[str, str]], part: int = 0, parts: int = 1
) -> list[tuple[str, str, int]]:
    """The vocabulary (word, term, documents) of the ``part``-th of ``parts`` ranges of
    the words of one batch of pages, their :data:`WORD_COLUMNS`, sorted by word.

    Apart from the lists: a worker derives it while the crawl stores the lists' parts
    it was sent before (one task deriving both left the crawl storing at the end,
    alone, for a quarter of the lists' time)."""
    cuts = _cuts(rows, 0, parts)
    low, high = cuts[part], cuts[part + 1]
    documents: Counter[str] = Counter()
    term_of: dict[str, str] = {}
    for words, word_terms in rows:
        written = _lines(words)
        inside = _part(written, low, high)
        if inside.stop > inside.start:
            kept = written[inside]
            documents.update(kept)
            # The terms up to the part's end only: a split stops there.
            term_of.update(zip(kept, word_terms.split("\n", inside.stop)[inside], strict=True))
    return [(word, term_of[word], n) for word, n in sorted(documents.items())]


Call = tuple[Callable[..., Any], tuple[Any, ...]]
"""A module-level function and its (picklable) arguments."""
CallMap = Callable[[Sequence[Call]], Iterable[Any]]
"""map_calls(calls) -> function(*arguments) of each call, in order, computed in any way
(in worker processes, at the same time)."""


def _in_turn(calls: Sequence[Call]) -> Iterator[Any]:
    return (function(*arguments) for function, arguments in calls)


def build_lists(
    data: DataManager, batch: int = BATCH, *, map_calls: CallMap | None = None, parts: int = 1
) -> int:
    """Derive the term-keyed posting lists and the vocabulary from the per-page rows
    (the crawl is over), replacing any derived before.

    Pages are read ``batch`` at a time, so memory holds one batch's postings. The
    count of documents covered is written last: until it is, searches scan.

    Args:
        map_calls: computes the parts of a batch (:func:`list_part`, then
            :func:`vocabulary_part`), in order; by default one after the other here.
            Each part's rows are stored as it comes, while the next ones are computed.
        parts: into how many ranges of terms, and of words, each batch is cut (the rows
            are the same whatever the number).

    Returns:
        How many documents the lists cover.
    """
    for table in (BUILT, LISTS, VOCABULARY):
        data.clear_task_table(table.name)
    pages = sorted(int(page) for (page,) in data.task_rows(DOCS.name, columns=("page_id",)))
    vocabulary: list[list[tuple[str, str, int]]] = []
    parts = max(1, parts)
    list_width = len(LIST_COLUMNS)
    for number, start in enumerate(range(0, len(pages), batch)):
        rows = data.task_rows(DOCS.name, columns=(*LIST_COLUMNS, *WORD_COLUMNS),
                              any_of=("page_id", pages[start : start + batch]))  # fmt: skip
        if not rows:
            continue
        rows.sort(key=itemgetter(0))
        list_rows = [row[:list_width] for row in rows]
        word_rows = [row[list_width:] for row in rows]
        del rows
        calls: list[Call] = [(list_part, (number, list_rows, part, parts)) for part in range(parts)]
        calls += [(vocabulary_part, (word_rows, part, parts)) for part in range(parts)]
        words: list[tuple[str, str, int]] = []
        for done, derived in enumerate((map_calls or _in_turn)(calls)):
            if done < parts:
                data.add_task_rows(LISTS.name, derived)
            else:
                words += derived
        vocabulary.append(words)
    data.add_task_rows(VOCABULARY.name, _merged(vocabulary))
    data.add_task_rows(BUILT.name, [(len(pages),)])
    return len(pages)


def _merged(batches: list[list[tuple[str, str, int]]]) -> list[tuple[str, str, int]]:
    """The vocabulary of every batch (each sorted by word): documents added up, the
    term of a word from the last batch that holds it."""
    if len(batches) == 1:
        return batches[0]
    documents: Counter[str] = Counter()
    term_of: dict[str, str] = {}
    for words in batches:
        documents.update({word: n for word, _term, n in words})
        term_of.update({word: term for word, term, _n in words})
    return [(word, term_of[word], n) for word, n in sorted(documents.items())]


def _prefix_range(items: Sequence[str], prefix: str) -> slice:
    """The sorted ``items`` that start with ``prefix``."""
    low = bisect_left(items, prefix)
    return slice(low, bisect_left(items, prefix + "\U0010ffff", low))


class PostingCache:
    """The decoded posting lists of the terms asked for most, ``budget`` postings in all
    at most (a list longer than that is not kept); safe across threads.

    A list comes in only if its term was asked for more often than each list it would
    push out, the least recently used first (TinyLFU's admission). So terms asked for
    once, as one-off queries or a round of queries larger than the cache, do not push
    out the lists asked for often: under plain LRU, a round of queries that needs
    more than the cache holds found none of its lists there. The counts halve every
    :data:`AGE_EVERY` asks, so that old popularity fades.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._lists: OrderedDict[str, dict[PageId, Posting]] = OrderedDict()
        self._size = 0
        self._asked: Counter[str] = Counter()
        self._asks = 0
        self._lock = threading.Lock()

    def get(self, term: str) -> dict[PageId, Posting] | None:
        with self._lock:
            self._asked[term] += 1
            self._asks += 1
            if self._asks >= AGE_EVERY:
                self._asked = Counter({t: n // 2 for t, n in self._asked.items() if n > 1})
                self._asks = 0
            found = self._lists.get(term)
            if found is not None:
                self._lists.move_to_end(term)
            return found

    def put(self, term: str, postings: dict[PageId, Posting]) -> None:
        if len(postings) > self.budget:
            return
        with self._lock:
            old = self._lists.pop(term, None)
            size = self._size - (len(old) if old is not None else 0)
            needed = size + len(postings) - self.budget
            victims = []
            for victim, held in self._lists.items():  # the least recently used first
                if needed <= 0:
                    break
                if old is None and self._asked[victim] >= self._asked[term]:
                    return  # not asked for more than what it would push out
                victims.append(victim)
                needed -= len(held)
            for victim in victims:
                size -= len(self._lists.pop(victim))
            self._lists[term] = postings
            self._size = size + len(postings)

    def clear(self) -> None:
        with self._lock:
            self._lists.clear()
            self._size = 0

    def __len__(self) -> int:
        """Postings kept."""
        return self._size


class SearchIndex:
    """The index, read through the DataManager's task tables (any storage backend).

    Reads go to the posting lists once the crawl has derived them for every document,
    else (a running or stopped crawl) they scan the per-page rows: slower, same hits.

    What does not change while no page is added is kept: the documents' lengths and
    the decoded posting lists of the terms asked for most recently (at most
    ``cache_postings`` postings in all). :meth:`document_count` (a query evaluator
    asks once per query) drops them when the count of documents or of those the lists
    cover has changed.

    Args:
        data: an open DataManager of a crawl made by the search task.
        cache_postings: postings kept decoded at most (0: none).
    """

    def __init__(self, data: DataManager, *, cache_postings: int = CACHE_POSTINGS) -> None:
        self.data = data
        self._average_length: float | None = None
        self._lengths: dict[PageId, int] | None = None
        self._lists: bool | None = None
        self._seen_state: tuple[int, bool] | None = None
        self._seen_version: object | None = None
        self.cache = PostingCache(cache_postings)
        """The decoded posting lists kept."""

    def average_length(self) -> float:
        """Words in a document's body on average (read once: it changes slowly)."""
        if self._average_length is None:
            self._read_lengths()
        assert self._average_length is not None
        return self._average_length

    def _read_lengths(self) -> dict[PageId, int]:
        """Every document's length, read in one scan, kept with their average: an int
        per document (as a search engine keeps its norms), where looking up the 200
        lengths a query re-ranks by one by one read their wide rows from disk (40 ms)."""
        rows = self.data.task_rows(DOCS.name, columns=("page_id", "length"))
        lengths = {PageId(int(page)): int(n) for page, n in rows}
        self._average_length = max(1.0, sum(lengths.values()) / max(1, len(lengths)))
        self._lengths = lengths
        return lengths

    def lengths(self, page_ids: Iterable[PageId]) -> dict[PageId, int]:
        """page id → words in its body (a page indexed after the first read is read
        from the table)."""
        known = self._lengths if self._lengths is not None else self._read_lengths()
        wanted = list(page_ids)
        found = {page: known[page] for page in wanted if page in known}
        missing = [page for page in wanted if page not in found]
        if missing:
            found.update(
                (PageId(int(page)), int(n))  # type: ignore[call-overload]
                for page, n in self._by_ids(("length",), missing)
            )
        return found

    def document_count(self) -> int:
        """Documents in the index; also looks again whether the posting lists cover them
        (a query evaluator asks once per query) when the storage may have changed."""
        version = self.data.stored_version()  # before the reads: a later change shows
        if version is not None and version == self._seen_version and self._seen_state is not None:
            return self._seen_state[0]
        total = self.data.task_row_total(DOCS.name)
        built = self.data.task_rows(BUILT.name)
        self._lists = bool(built) and int(built[0][0]) == total
        if (total, self._lists) != self._seen_state:
            # Pages were added or the lists derived: what was cached may be stale.
            self._seen_state = (total, self._lists)
            self.cache.clear()
            self._lengths = self._average_length = None
        self._seen_version = version  # last: a thread that sees it sees the state
        return total

    def lists_built(self) -> bool:
        """Whether the posting lists cover every document (else reads scan)."""
        if self._lists is None:
            self.document_count()
        return bool(self._lists)

    def all_documents(self) -> set[PageId]:
        return {PageId(int(row[0])) for row in self.data.task_rows(DOCS.name, columns=("page_id",))}

    def postings(self, term: str) -> dict[PageId, Posting]:
        """keyword → pages with weights and positions, by page id (the caller must not
        change it: it may be the cached one)."""
        if not self.lists_built():
            return self._scanned_postings(term)
        found = self.cache.get(term)
        if found is None:
            found = self._listed_postings(term)
            self.cache.put(term, found)
        return found

    def _scanned_postings(self, term: str) -> dict[PageId, Posting]:
        """The postings of ``term`` read from the per-page rows (lists not derived)."""
        found: dict[PageId, Posting] = {}
        columns = ("page_id", "terms", "weights", "counts", "positions")
        for page, terms, weights, counts, positions in sorted(
            self.data.task_rows(DOCS.name, columns=columns), key=itemgetter(0)
        ):
            names = _lines(terms)
            at = bisect_left(names, term)
            if at < len(names) and names[at] == term:
                kept = _unpack(_U32, bytes(counts))
                blob = bytes(positions)
                begin = 1 + blob[0] * sum(kept[:at])
                segment = blob[:1] + blob[begin : begin + blob[0] * kept[at]]
                found[PageId(int(page))] = Posting(_unpack("d", bytes(weights))[at], segment)
        return found

    def _listed_postings(self, term: str) -> dict[PageId, Posting]:
        """The postings of ``term`` read from its posting lists."""
        found: dict[PageId, Posting] = {}
        rows = self.data.task_rows(
            LISTS.name,
            columns=("batch", "pages", "weights", "counts", "positions"),
            equals={"term": term},
        )
        for _batch, pages, weights, counts, positions in sorted(rows, key=itemgetter(0)):
            segments = _segments(bytes(positions), _unpack(_U32, bytes(counts)))
            found.update(
                zip(
                    _unpack("q", bytes(pages)),
                    map(Posting, _unpack("d", bytes(weights)), segments),
                    strict=True,
                )
            )
        return found

    def pages_with_word_prefix(self, prefix: str) -> dict[str, set[PageId]]:
        """Indexed words starting with ``prefix`` (the first :data:`MAX_EXPANSION`) →
        pages holding them (or another word of the same term: a wildcard finds every
        form of the words it matches)."""
        pages: dict[str, set[PageId]] = defaultdict(set)
        if self.lists_built():
            rows = self.data.task_rows(
                VOCABULARY.name, columns=("word", "term"), prefix=("word", prefix)
            )
            term_of = dict(sorted(rows)[:MAX_EXPANSION])
            for term, found in self.data.task_rows(
                LISTS.name,
                columns=("term", "pages"),
                any_of=("term", sorted(set(term_of.values()))),
            ):
                pages[term].update(_unpack("q", bytes(found)))
        else:
            docs = self.data.task_rows(
                DOCS.name, columns=("page_id", "terms", "words", "word_terms")
            )
            term_of = {}
            for _page, _terms, words, word_terms in docs:
                written = _lines(words)
                inside = _prefix_range(written, prefix)
                term_of.update(zip(written[inside], _lines(word_terms)[inside], strict=True))
            term_of = dict(sorted(term_of.items())[:MAX_EXPANSION])
            wanted = set(term_of.values())
            for page, terms, _words, _word_terms in docs:
                for term in wanted.intersection(_lines(terms)):
                    pages[term].add(PageId(int(page)))
        return {word: set(pages.get(term, ())) for word, term in term_of.items()}

    def word_counts(self, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words (starting with ``prefix``) and how many documents hold each."""
        if self.lists_built():
            rows = self.data.task_rows(
                VOCABULARY.name, columns=("word", "documents"),
                prefix=("word", prefix) if prefix else None,
            )  # fmt: skip
            return sorted((str(word), int(count)) for word, count in rows)
        counts: Counter[str] = Counter()
        for (words,) in self.data.task_rows(DOCS.name, columns=("words",)):
            written = _lines(words)
            counts.update(written[_prefix_range(written, prefix)])
        return sorted(counts.items())

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
