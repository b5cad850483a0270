"""Boolean queries over the index: words, AND, OR, NOT, ( ), prefix*, "phrases" (SPEC §7).

Grammar (operators are upper case; two terms side by side mean AND)::

    query  := or
    or     := and ("OR" and)*
    and    := not (["AND"] not)*
    not    := "NOT" not | atom
    atom   := "(" or ")" | '"' words '"' | word | word*

The work of one query is bounded: its length, its nesting depth, the words a
wildcard expands to, the positions a phrase scans and the hits re-ranked by
proximity are all capped, so no query can take the server's memory or time.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from itertools import chain, compress, groupby
from operator import itemgetter, ne, or_, sub
from typing import TYPE_CHECKING

from plugins.search.index import FIELD_GAP
from plugins.search.processing import words
from plugins.search.snippet import Snippet, make_snippet
from rccrawler.exceptions import RCCrawlerError

if TYPE_CHECKING:
    from collections.abc import Callable

    from plugins.search.index import Posting, SearchIndex
    from plugins.search.processing import TextProcessor
    from rccrawler.records import PageId

MAX_QUERY_CHARS = 2_000
"""A longer query is refused (QueryError)."""

MAX_QUERY_WORDS = 64
"""Words and phrases in one query at most (operators and parentheses are bounded by
MAX_QUERY_CHARS and MAX_DEPTH)."""

MAX_DEPTH = 32
"""Parentheses and NOTs nest at most this deep (deeper is a QueryError, never a
RecursionError)."""

MAX_WILDCARD_WORDS = 500
"""A prefix matching more indexed words than this is cut to the first ones."""

MAX_PHRASE_POSITIONS = 200_000
"""Positions a query's phrases decode at most; pages past that budget are not matched."""

RERANK = 200
"""The best hits by term weight that are re-ranked by phrase and proximity."""

PROXIMITY_WEIGHT = 0.5
"""A hit whose query words stand together scores up to (1 + this) times more."""

SNIPPET_POSITIONS = 200
"""Positions of a term per hit that snippets and proximity look at."""

PHRASE_IN_TITLE = 1.0
"""A phrase standing in the title scores (1 + this) times more."""

LENGTH_NORMALIZATION = 0.3
"""BM25's ``b`` for queries of several plain words: a hit's score is divided by
``1 - b + b × length / average length``. Several words found in a short page say more
than the same words scattered over a long one. A single word, a phrase or a wildcard
is not normalized: there the page named after the word, often long, must win."""

_TOKEN = re.compile(r'\s*(?:(")([^"]*)("?)|(\()|(\))|([^\s()"]+))')

Scores = dict["PageId", float]


class QueryError(RCCrawlerError):
    """A query that cannot be parsed (unbalanced parentheses or quotes, a dangling
    operator, too deep or too long, or only words to leave out)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked answer."""

    url: str
    title: str
    summary: str
    score: float
    snippet: Snippet = field(default_factory=Snippet)

    def as_dict(self) -> dict[str, object]:
        return {"url": self.url, "title": self.title, "summary": self.summary,
                "score": self.score, "snippet": self.snippet.text,
                "marks": [list(mark) for mark in self.snippet.marks]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Results:
    """One page of ranked hits and how many there are in all."""

    total: int
    hits: list[Hit]


def tokenize(query: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; kinds: phrase, (, ), AND, OR, NOT, word.

    Raises:
        QueryError: an unclosed quote, or a query too long.
    """
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is longer than {MAX_QUERY_CHARS} characters")
    tokens: list[tuple[str, str]] = []
    position = leaves = 0
    query = query.strip()
    while position < len(query):
        match = _TOKEN.match(query, position)
        if match is None or match.end() == position:
            break
        position = match.end()
        if match.group(1):
            if not match.group(3):
                raise QueryError("a '\"' is not closed")
            tokens.append(("phrase", match.group(2)))
        elif match.group(4):
            tokens.append(("(", "("))
        elif match.group(5):
            tokens.append((")", ")"))
        else:
            text = match.group(6)
            tokens.append((text, text) if text in ("AND", "OR", "NOT") else ("word", text))
        if tokens[-1][0] in ("word", "phrase"):
            leaves += 1
            if leaves > MAX_QUERY_WORDS:
                raise QueryError(f"the query has more than {MAX_QUERY_WORDS} words and phrases")
    return tokens


TIE_MARGIN = 50
"""Hits read beyond the page asked for, so equal scores can be ordered by URL."""


def _combine(
    left: Scores | None, right: Scores | None, merge: Callable[[Scores, Scores], Scores]
) -> Scores | None:
    """Join the two sides of AND or OR; a side with no constraint (None) drops out."""
    if left is None or right is None:
        return right if left is None else left
    return merge(left, right)


def _union(left: Scores, right: Scores) -> Scores:
    """OR: every page of either side, its scores added."""
    merged = dict(left)
    for page, score in right.items():
        merged[page] = merged.get(page, 0.0) + score
    return merged


def _intersection(left: Scores, right: Scores) -> Scores:
    """AND: the pages of both sides, their scores added."""
    return {page: score + right[page] for page, score in left.items() if page in right}


class QueryEvaluator:
    """Parses a query and scores the documents of one index with it.

    A leaf scores a document ``weight × idf`` per term; AND and OR add the scores of
    their sides, NOT keeps the left side's. A leaf made only of stopwords has no
    constraint (None) and drops out of AND and OR. The best hits are then re-ranked:
    query words close together (within a field) raise a hit's score.
    """

    def __init__(self, data: SearchIndex, processor: TextProcessor) -> None:
        self.data = data
        self.processor = processor
        self.total = max(1, data.document_count())
        self._tokens: list[tuple[str, str]] = []
        self._at = 0
        self._depth = 0
        self._negated = 0
        self._positive = 0
        self._plain_words = 0
        self._budget = MAX_PHRASE_POSITIONS
        self._seen: dict[str, dict[PageId, Posting]] = {}
        self.highlight: set[str] = set()
        """Terms of the query's positive leaves (wildcards expanded): what snippets mark."""
        self._groups: list[list[str]] = []

    def search(self, query: str, limit: int | None = 10, offset: int = 0) -> list[Hit]:
        """Ranked hits: highest score first, then in the order the pages were found."""
        return self.results(query, limit, offset).hits

    def results(self, query: str, limit: int | None = 10, offset: int = 0) -> Results:
        """One page of ranked hits, each with its snippet, and the number of hits."""
        scores = self.rank(self.evaluate(query))
        if not scores:
            return Results(0, [])
        # Only the hits of the page asked for (and a few more, for ties) are read from
        # the index. Ties go by URL: page ids depend on the order parsers found the
        # pages in, which differs between runs and storage backends.
        key = [(-round(score, 4), page) for page, score in scores.items()]
        end = len(key) if limit is None else offset + limit
        chosen, documents = self._page_of_hits(heapq.nsmallest(end + TIE_MARGIN, key), offset, end)
        texts = self.data.stored_texts(chosen)
        hits = []
        for page in chosen:
            url, title, summary = documents[page]
            snippet = Snippet(summary)
            if page in texts:
                positions = {
                    term: found[page].first_positions(SNIPPET_POSITIONS)
                    for term in self.highlight
                    if (found := self._seen.get(term)) and page in found
                }
                snippet = make_snippet(texts[page], positions, self.highlight, self.processor)
            hits.append(Hit(url, title, summary, round(scores[page], 4), snippet))
        return Results(len(scores), hits)

    def _page_of_hits(
        self, near: list[tuple[float, PageId]], offset: int, end: int
    ) -> tuple[list[PageId], dict[PageId, tuple[str, str, str]]]:
        """Hits ``offset`` to ``end`` of ``near`` (sorted by score, then page id) once
        equal scores are ordered by URL, and their documents.

        Only the groups of equal scores that reach into the page are read (a page's
        row is wide: reading the ``TIE_MARGIN`` hits after it cost more than the rest).
        """
        groups: list[list[PageId]] = []
        at = first = 0
        for _score, group in groupby(near, key=itemgetter(0)):
            if at >= end:
                break
            pages = [page for _score, page in group]
            if at + len(pages) > offset:
                first = first if groups else at
                groups.append(pages)
            at += len(pages)
        documents = self.data.documents([page for pages in groups for page in pages])
        ordered = [page for pages in groups
                   for page in sorted(pages, key=lambda page: documents[page][0])]  # fmt: skip
        return ordered[offset - first : end - first], documents

    def evaluate(self, query: str) -> Scores:
        """Every matching document with its term score (before re-ranking)."""
        self._tokens, self._at = tokenize(query), 0
        self._depth = self._negated = self._positive = self._plain_words = 0
        self._budget = MAX_PHRASE_POSITIONS
        self._seen, self.highlight, self._groups = {}, set(), []
        if not self._tokens:
            return {}
        result = self._or()
        if self._at < len(self._tokens):
            token = self._tokens[self._at][1]
            raise QueryError(
                "unmatched ')'" if token == ")" else f"unexpected {token!r} in the query"
            )
        if result is not None and not self._positive:
            raise QueryError("the query has only words to leave out (NOT): add one to look for")
        return result or {}

    def rank(self, scores: Scores) -> Scores:
        """Re-rank the best hits by how close the query's words stand in them and, for
        several plain words, by their pages' lengths (:data:`LENGTH_NORMALIZATION`)."""
        groups = [g for g in self._groups if len(set(g)) > 1]
        normalize = self._plain_words > 1
        if not (groups or normalize) or len(scores) < 2:
            return scores
        best = heapq.nlargest(RERANK, scores, key=scores.__getitem__)
        factors = dict.fromkeys(best, 1.0)
        if normalize:
            average = self.data.average_length()
            for page, length in self.data.lengths(best).items():
                factors[page] = 1.0 / (
                    1.0 - LENGTH_NORMALIZATION + LENGTH_NORMALIZATION * length / average
                )
        # The hits below the re-ranked ones stay below them: they get the lowest factor.
        lowest = min(factors.values())
        ranked = {page: score * lowest for page, score in scores.items()}
        for page in best:
            nearest = 0.0
            for group in groups:
                lists = [self._seen[t][page].first_positions(SNIPPET_POSITIONS) for t in group
                         if t in self._seen and page in self._seen[t]]  # fmt: skip
                if len(lists) == len(group):
                    nearest = max(nearest, closeness(lists))
            ranked[page] = scores[page] * factors[page] * (1.0 + PROXIMITY_WEIGHT * nearest)
        return ranked

    # -- parser ------------------------------------------------------------
    def _peek(self) -> str | None:
        return self._tokens[self._at][0] if self._at < len(self._tokens) else None

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise QueryError(f"the query nests deeper than {MAX_DEPTH} levels")

    def _or(self) -> Scores | None:
        result = self._and()
        while self._peek() == "OR":
            self._at += 1
            result = _combine(result, self._and(), _union)
        return result

    def _and(self) -> Scores | None:
        start = len(self._groups)
        result = self._not()
        while self._peek() not in (None, "OR", ")"):
            if self._peek() == "AND":
                self._at += 1
            result = _combine(result, self._not(), _intersection)
        # The plain words ANDed here form one group for proximity ranking.
        joined = [term for group in self._groups[start:] for term in group]
        if len(self._groups) - start > 1:
            self._groups.append(joined)
        return result

    def _not(self) -> Scores | None:
        if self._peek() != "NOT":
            return self._atom()
        self._at += 1
        self._enter()
        self._negated += 1
        try:
            excluded = self._not()
        finally:
            self._negated -= 1
            self._depth -= 1
        if excluded is None:
            return None
        return {page: 0.0 for page in self.data.all_documents() if page not in excluded}

    def _atom(self) -> Scores | None:
        kind = self._peek()
        if kind is None:
            raise QueryError("the query ends where a word was expected")
        text = self._tokens[self._at][1]
        self._at += 1
        if kind == "(":
            self._enter()
            try:
                inner = self._or()
            finally:
                self._depth -= 1
            if self._peek() != ")":
                raise QueryError("a '(' is not closed")
            self._at += 1
            return inner
        if kind == "phrase":
            return self._phrase(text, quoted=True)
        if kind == "word":
            if text.endswith("*") and len(text) > 1:
                return self._prefix(text.rstrip("*"))
            return self._phrase(text, quoted=False)  # "e-mail" is the phrase "e mail"
        raise QueryError(f"{text!r} needs a word after it" if kind != ")" else "unmatched ')'")

    # -- leaves ------------------------------------------------------------
    def _idf(self, count: int) -> float:
        return math.log(1.0 + self.total / max(1, count))

    def _postings(self, term: str) -> dict[PageId, Posting]:
        found = self._seen.get(term)
        if found is None:
            found = self._seen[term] = self.data.postings(term)
        if not self._negated:
            self.highlight.add(term)
        return found

    def _phrase(self, text: str, *, quoted: bool) -> Scores | None:
        # Offsets count every word, stopwords too, as the index's positions do.
        found = [(i, t) for i, w in enumerate(words(text)) if (t := self.processor.term(w))]
        if not found:
            return None
        if not self._negated:
            self._positive += 1
            self._plain_words += not quoted
        lists = [self._postings(term) for _offset, term in found]
        pages = set(lists[0]).intersection(*lists[1:])
        idfs = [self._idf(len(postings)) for postings in lists]
        scores: Scores = {}
        if not self._negated:
            self._groups.append([term for _offset, term in found])
        if len(found) == 1:
            (postings,) = lists
            return {page: postings[page].weight * idfs[0] for page in pages}
        first = found[0][0]
        offsets = [offset - first for offset, _term in found]
        # Pages with the heaviest terms are checked first, while the budget lasts.
        weighed = {p: sum(ps[p].weight * idf for ps, idf in zip(lists, idfs, strict=True))
                   for p in pages}  # fmt: skip
        for page in sorted(weighed, key=lambda p: -weighed[p]):
            positions = [postings[page].positions for postings in lists]
            self._budget -= sum(map(len, positions))
            if self._budget < 0:
                break
            starts = _phrase_starts(positions, offsets)
            if starts:
                bonus = 1.0 + math.log(len(starts)) / 4
                if quoted and starts[0] < FIELD_GAP:  # the title is the first field
                    bonus += PHRASE_IN_TITLE
                scores[page] = weighed[page] * bonus
        return scores

    def _prefix(self, prefix: str) -> Scores | None:
        parts = words(prefix)
        if not parts:
            return None
        if len(parts) > 1:
            raise QueryError(f"a wildcard applies to one word, not {prefix!r}*")
        if not self._negated:
            self._positive += 1
        matched = self.data.pages_with_word_prefix(parts[0])
        scores: Scores = {}
        for word in sorted(matched)[:MAX_WILDCARD_WORDS]:
            term = self.processor.term(word)
            postings = self._postings(term) if term is not None else {}
            idf = self._idf(len(postings))
            for page in matched[word]:
                posting = postings.get(page)
                score = posting.weight * idf if posting is not None else 0.0
                scores[page] = max(scores.get(page, 0.0), score)
        return scores


def _phrase_starts(positions: list[list[int]], offsets: list[int]) -> list[int]:
    """Positions p of the first term where each i-th term stands at p + offsets[i]."""
    # Set operations in C: the starts the i-th term allows are its positions - offsets[i].
    starts = set(positions[0])
    for offset, found in zip(offsets[1:], positions[1:], strict=True):
        starts.intersection_update(map((-offset).__add__, found))
        if not starts:
            return []
    return sorted(starts)


def closeness(positions: list[list[int]]) -> float:
    """1 when the terms stand side by side somewhere, falling towards 0 as the
    smallest window holding one of each widens (a classic minimal-span measure)."""
    if len(positions) == 2:
        return _closeness_of_two(*positions)
    events = sorted((p, i) for i, plist in enumerate(positions) for p in plist)
    # Of a run of one term's positions only the two ends can bound a smallest window
    # (it starts at the last of a run and ends at the first): drop the rest, in C.
    terms = [term for _position, term in events]
    if len(terms) > 2:
        before, after = [-1, *terms[:-1]], [*terms[1:], -1]
        events = list(compress(events, map(or_, map(ne, terms, before), map(ne, terms, after))))
    need = len(positions)
    counts = [0] * need
    have = 0
    best = math.inf
    left = 0
    for position, term in events:
        counts[term] += 1
        if counts[term] == 1:
            have += 1
        while have == need:
            start, first = events[left]
            if position - start + 1 < best:
                best = position - start + 1
            counts[first] -= 1
            if counts[first] == 0:
                have -= 1
            left += 1
    if best == math.inf:
        return 0.0
    return float(need / best)


def _closeness_of_two(first: list[int], second: list[int]) -> float:
    """:func:`closeness` of two terms, in C: the smallest window holding both is two
    neighbours, one of each term, in the merged positions (a position holds one term)."""
    if not first or not second:
        return 0.0
    # Position × 2 + which term: sorted, neighbours of different terms are the windows.
    keys = sorted(chain(map((2).__mul__, first), map((1).__add__, map((2).__mul__, second))))
    spots = list(map((2).__rfloordiv__, keys))
    which = list(map((2).__rmod__, keys))
    gaps = compress(map(sub, spots[1:], spots[:-1]), map(ne, which[1:], which[:-1]))
    return 2 / (int(min(gaps)) + 1)
