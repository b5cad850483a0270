"""build_document (packed, in C) gives what the plain per-word loop it replaced gave,
on real pages: the Python docs (Debian's python3.11-doc)."""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from plugins.search import index, processing
from plugins.search.content import Content, extract_content
from plugins.search.index import (
    _U32,
    FIELD_GAP,
    _segments,
    _unpack,
    build_document,
    decode_positions,
    document_fields,
    document_rows,
    field_words,
    indexed_text,
    list_part,
)
from plugins.search.index import DOCS as DOCS_TABLE
from plugins.search.processing import TextProcessor

DOCS = Path("/usr/share/doc/python3.11/html")


def reference_document(
    content: Content, processor: TextProcessor, max_words: int, max_positions: int
) -> dict[str, Any]:
    """The former build_document, a Python loop over every word (the same fields):
    terms → (weight, positions), the words, and the text fields."""
    lookup = processor.lookup
    fields = document_fields(content, processor)
    weights: dict[str, float] = defaultdict(float)
    positions: dict[str, list[int]] = defaultdict(list)
    distinct: set[str] = set()
    tokenized, total_words = field_words(fields, max_words)
    start = 0
    found: list[str] = []
    for found, location_weight in tokenized:
        distinct.update(found)
        counts: dict[str, int] = defaultdict(int)
        for offset, key in enumerate(map(lookup, found), start):
            if key:
                counts[key] += 1
                positions[key].append(offset)
        for key, count in counts.items():
            weights[key] += location_weight * (1.0 + math.log(count))
        start += len(found) + FIELD_GAP
    text = content.text
    cut = []
    if total_words > max_words:
        cut.append(f"words {total_words}>{max_words}")
        text = indexed_text(text, len(found))
    crowded = [t for t, p in positions.items() if len(p) > max_positions]
    if crowded:
        cut.append(f"positions of {len(crowded)} terms>{max_positions}")
    return {
        "postings": {t: (w, positions[t][:max_positions]) for t, w in weights.items()},
        "words": {word: key for word in distinct if (key := lookup(word))},
        "text": text,
        "body_start": start - len(found) - FIELD_GAP,
        "length": len(found),
        "truncated": "; ".join(cut),
    }


def _pages() -> list[Path]:
    pages = sorted(DOCS.rglob("*.html"))
    # Every 7th page, and the biggest (genindex-all: over 65,536 positions, most crowded).
    return [*pages[::7], DOCS / "genindex-all.html"]


@pytest.mark.skipif(not DOCS.is_dir(), reason="python3.11-doc is not installed")
@pytest.mark.parametrize(("max_words", "max_positions"), [(200_000, 1_000), (700, 3)])
def test_build_document_matches_the_per_word_loop_on_the_python_docs(max_words, max_positions):
    processor = TextProcessor.default()
    compared = 0
    for path in _pages():
        url = f"http://docs.test/{path.relative_to(DOCS)}"
        content = extract_content(url, path.read_bytes(), "text/html")
        expected = reference_document(content, processor, max_words, max_positions)
        document = build_document(
            content, processor, max_words=max_words, max_positions=max_positions
        )
        assert_matches_reference(document, expected, url)
        compared += 1
    assert compared > 60


def assert_matches_reference(document: Any, expected: dict[str, Any], url: str) -> None:
    postings = document.postings
    assert postings.keys() == expected["postings"].keys(), url
    for term, (weight, positions) in expected["postings"].items():
        assert postings[term].weight == pytest.approx(weight, rel=1e-9, abs=1e-9), url
        assert postings[term].positions == positions, (url, term)
    assert document.words == expected["words"], url
    for name in ("text", "body_start", "length", "truncated"):
        assert getattr(document, name) == expected[name], (url, name)


CARS = Content(
    url="http://docs.test/a", title="Cars and automobiles", headings=("Driving cars",),
    text="a car drives; the cars drive " * 40 + "zebra quagga okapi",
)  # fmt: skip
"""A page whose words share terms (plurals, synonyms of the default processor)."""


def test_a_document_is_the_same_whether_its_term_numbers_are_counted_or_sorted():
    """A document's term numbers are counted into a table while they are few beside its
    positions, and sorted once the processor's table has numbered many other words
    first: the same document either way."""
    fresh = TextProcessor.default()
    expected = build_document(CARS, fresh)
    worn = TextProcessor.default()
    numbers = worn.numbering()
    for n in range(100_000):
        numbers[f"filler{n}"]
    positions = sum(len(found) + FIELD_GAP for found, _ in field_words(
        document_fields(CARS, worn), 200_000)[0])  # fmt: skip
    assert max(fresh.numbering().values()) < index.DENSE_NUMBERS * positions  # counted
    document = build_document(CARS, worn)
    # Every indexed word of the page was numbered after the fillers: its keys are sorted.
    assert min(numbers[word] for word in expected.words) >= index.DENSE_NUMBERS * positions
    assert document == expected


def test_a_page_of_more_distinct_terms_than_16_bits_hold_is_ordered_right():
    """A page's positions are put in term order by a 16-bit sort when its terms fit 16
    bits, as on nearly every page; past 65,536 terms they take the wide sort."""
    letters = "bcdfghjklmnpqrstvwxz"
    words = [f"q{letters[n % 20]}{letters[n // 20 % 20]}{letters[n // 400 % 20]}"
             f"{letters[n // 8000 % 20]}" for n in range(70_000)]  # fmt: skip
    content = Content(url="http://docs.test/big", title="Big", text=" ".join(words * 2))
    processor = TextProcessor.default()
    document = build_document(content, processor)
    assert len(document.terms) > 1 << 16
    expected = reference_document(content, processor, 200_000, 1_000)
    assert_matches_reference(document, expected, content.url)


def _posting_lists(rows: list[tuple[Any, ...]]) -> dict[str, dict[int, tuple[float, list[int]]]]:
    """term → page → (weight, positions), decoded from posting-list rows."""
    lists: dict[str, dict[int, tuple[float, list[int]]]] = defaultdict(dict)
    for term, _batch, pages, weights, counts, positions in rows:
        segments = _segments(positions, _unpack(_U32, counts))
        for page, weight, segment in zip(
            _unpack("q", pages), _unpack("d", weights), segments, strict=True
        ):
            lists[term][page] = (weight, decode_positions(segment))
    return lists


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_posting_lists_hold_each_pages_own_postings_whatever_their_widths(parts):
    """A page of over 65,536 positions packs them 4 bytes wide, the others 2: a list
    of the batch holds every page's positions at the batch's width, each page's in its
    place, with its weight, in page order; its parts split the terms, not a posting."""
    processor = TextProcessor(language="english")
    letters = "bcdfghjklmnpqrstvwxz"
    filler = " ".join("q" + letters[n % 20] + letters[n // 20 % 20] for n in range(70_000))
    contents = {
        5: Content(url="http://h/5", title="Alpha beta", text="gamma alpha delta " * 40),
        2: Content(url="http://h/2", title="Big", text=f"alpha {filler} gamma beta"),
        9: Content(url="http://h/9", title="Gamma", headings=("beta",), text="alpha zeta"),
    }
    documents = {page: build_document(c, processor) for page, c in contents.items()}
    assert max(decode_positions(documents[2].positions)) >= 0x10000  # the wide page
    rows = sorted(
        (page, *document_rows(d)[DOCS_TABLE.name][0][7:11]) for page, d in documents.items()
    )
    derived: list[tuple[Any, ...]] = []
    for part in range(parts):
        derived += list_part(0, rows, part, parts)
    assert [row[0] for row in derived] == sorted({t for d in documents.values() for t in d.terms})
    lists = _posting_lists(derived)
    expected: dict[str, dict[int, tuple[float, list[int]]]] = defaultdict(dict)
    for page, document in sorted(documents.items()):
        for term, posting in document.postings.items():
            expected[term][page] = (posting.weight, posting.positions)
    assert lists == expected
    assert all(list(pages) == sorted(pages) for pages in lists.values())


def test_term_numbers_give_each_term_one_number_when_threads_number_at_once():
    processor = TextProcessor(frozenset({"the"}), {"automobile": "car", "auto": "car"})
    numbers = processor.numbering()
    words = [f"word{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(2_000)]
    words += ["car", "cars", "automobile", "auto", "the"]
    barrier = threading.Barrier(4)

    def number_all(order: list[str]) -> list[int]:
        barrier.wait(timeout=10)
        return [numbers[word] for word in order]

    orders = [words, words[::-1], words[::2] + words[1::2], words[1::2] + words[::2]]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(number_all, orders))
    for order, found in zip(orders, results, strict=True):
        for word, number in zip(order, found, strict=True):
            assert numbers.names[number] == processor.lookup(word), word
            assert number == numbers[word]
    # One number per term: synonyms and plurals share theirs, a stopword gets 0.
    assert len(set(numbers.names)) == len(numbers.names)
    assert numbers["automobile"] == numbers["auto"] == numbers["car"] == numbers["cars"]
    assert numbers["the"] == 0


def test_a_full_numbering_table_is_replaced_and_documents_come_out_the_same(monkeypatch):
    content = CARS
    processor = TextProcessor.default()
    expected = build_document(content, processor)
    monkeypatch.setattr(processing, "TERM_CACHE_SIZE", 5)
    first = processor.numbering()
    assert build_document(content, processor) == expected  # numbered on the full table
    second = processor.numbering()
    assert second is not first and len(second) == 0
    assert build_document(content, processor) == expected
    # The old table still names its numbers (a document being built holds it).
    assert first.names[first["zebra"]] == processor.lookup("zebra")
