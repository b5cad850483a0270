"""build_document (packed, in C) gives what the plain per-word loop it replaced gave,
on real pages: the Python docs (Debian's python3.11-doc)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from plugins.search.content import Content, extract_content
from plugins.search.index import (
    FIELD_GAP,
    build_document,
    document_fields,
    field_words,
    indexed_text,
)
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
        postings = document.postings
        assert postings.keys() == expected["postings"].keys(), url
        for term, (weight, positions) in expected["postings"].items():
            assert postings[term].weight == pytest.approx(weight, rel=1e-9, abs=1e-9), url
            assert postings[term].positions == positions, (url, term)
        assert document.words == expected["words"], url
        for name in ("text", "body_start", "length", "truncated"):
            assert getattr(document, name) == expected[name], (url, name)
        compared += 1
    assert compared > 60
