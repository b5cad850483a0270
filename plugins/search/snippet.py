"""Query-biased snippets: the passage of a hit's text with the most query terms, marked.

A snippet is plain text plus the spans to mark; each view renders it with its own
escaping (``<mark>`` in HTML here, ANSI bold or ``[…]`` in ``rccrawler search``), so crawled text
never reaches a page or a terminal raw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from itertools import islice
from typing import TYPE_CHECKING

from plugins.search.processing import WORD

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Set

    from plugins.search.index import StoredText
    from plugins.search.processing import TextProcessor

WINDOW = 30
"""Words in a snippet."""

LEAD = 4
"""Words shown before the first match of the chosen passage."""


_SKIPS = tuple((size, re.compile(rf"(?:[\W\d_]*+[^\W\d_]++){{{size}}}")) for size in (1024, 32))
"""Patterns passing ``size`` words (:data:`WORD`'s letter runs) at once; possessive,
so no run is split in two to make up the count."""


@dataclass(frozen=True, slots=True)
class Snippet:
    """Text, and the (start, end) character spans of the query words in it."""

    text: str = ""
    marks: tuple[tuple[int, int], ...] = ()

    def html(self) -> str:
        """Escaped HTML with each match in ``<mark>``."""
        return self._render(escape, "<mark>", "</mark>")

    def _render(self, quote: Callable[[str], str], opening: str, closing: str) -> str:
        parts: list[str] = []
        at = 0
        for start, end in self.marks:
            parts += [quote(self.text[at:start]), opening, quote(self.text[start:end]), closing]
            at = end
        parts.append(quote(self.text[at:]))
        return "".join(parts)


def mark(text: str, terms: Set[str], processor: TextProcessor) -> Snippet:
    """``text`` with every word whose term is one of ``terms`` marked."""
    marks = tuple(
        (m.start(), m.end())
        for m in WORD.finditer(text)
        if processor.term(m.group().lower()) in terms
    )
    return Snippet(text, marks)


def make_snippet(
    stored: StoredText,
    positions: Mapping[str, list[int]],
    terms: Set[str],
    processor: TextProcessor,
    width: int = WINDOW,
) -> Snippet:
    """The ``width``-word passage of the body with the most query-term occurrences,
    distinct terms first; the summary (meta description) when none is in the body.

    Args:
        stored: the hit's text and word offsets.
        positions: query term → its positions in this document (from the postings).
        terms: every term the query looks for (to mark words in the passage).
    """
    body = sorted(
        p - stored.body_start for plist in positions.values() for p in plist
        if p >= stored.body_start
    )  # fmt: skip
    if not body or not stored.text:
        return mark(stored.summary, terms, processor)
    # Prefer a window with more distinct terms: score windows by distinct terms first.
    by_term = {p - stored.body_start: t for t, plist in positions.items() for p in plist}
    start = _best_distinct_window(body, by_term, width)
    start = max(0, start - LEAD)
    # Word n of the body is the n-th letter run of its text (positions count them all).
    at, rest = skip_words(stored.text, start)
    spans = list(islice(WORD.finditer(stored.text, at), rest, rest + width))
    if not spans:
        return mark(stored.summary, terms, processor)
    begin, end = spans[0].start(), spans[-1].end()
    if len(spans) < width:  # the text ends within the window: keep its last punctuation
        end = len(stored.text)
    text = stored.text[begin:end]
    prefix = "… " if begin > 0 else ""
    suffix = " …" if end < len(stored.text) else ""
    text = text.strip()
    found = mark(text, terms, processor)
    shift = len(prefix)
    return Snippet(prefix + text + suffix, tuple((s + shift, e + shift) for s, e in found.marks))


def skip_words(text: str, count: int) -> tuple[int, int]:
    """Where ``text`` is past (about) its first ``count`` words, and how many of them
    are left to pass: whole blocks of words are passed by one regular-expression match
    each, without a match object per word (the snippet's cost on a long page)."""
    at = 0
    for size, pattern in _SKIPS:
        while count >= size:
            match = pattern.match(text, at)
            if match is None:
                break
            at, count = match.end(), count - size
    return at, count


def _best_distinct_window(hits: list[int], by_term: Mapping[int, str], width: int) -> int:
    """Like :func:`best_window`, ranking windows by (distinct terms, occurrences)."""
    best, best_key = hits[0], (0, 0)
    right = 0
    inside: dict[str, int] = {}
    for left, start in enumerate(hits):
        while right < len(hits) and hits[right] < start + width:
            term = by_term.get(hits[right], "")
            inside[term] = inside.get(term, 0) + 1
            right += 1
        key = (len(inside), right - left)
        if key > best_key:
            best, best_key = start, key
        term = by_term.get(start, "")
        inside[term] -= 1
        if not inside[term]:
            del inside[term]
    return best
