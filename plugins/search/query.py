"""Boolean queries over the index: words, AND, OR, NOT, ( ), prefix*, "phrases" (SPEC §7).

Grammar (operators are upper case; two terms side by side mean AND)::

    query  := or
    or     := and ("OR" and)*
    and    := not (["AND"] not)*
    not    := "NOT" not | atom
    atom   := "(" or ")" | '"' words '"' | word | word*
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from plugins.search.processing import words
from rccrawler.exceptions import RCCrawlerError

if TYPE_CHECKING:
    from plugins.search.index import Posting, SearchIndex
    from plugins.search.processing import TextProcessor
    from rccrawler.records import PageId

MAX_WILDCARD_WORDS = 500
"""A prefix matching more indexed words than this is cut to the first ones."""

_TOKEN = re.compile(r'\s*(?:(")([^"]*)"?|(\()|(\))|([^\s()"]+))')

Scores = dict["PageId", float]


class QueryError(RCCrawlerError):
    """A query that cannot be parsed (unbalanced parentheses, a dangling operator)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked answer."""

    url: str
    title: str
    summary: str
    score: float

    def as_dict(self) -> dict[str, object]:
        return {"url": self.url, "title": self.title, "summary": self.summary,
                "score": self.score}  # fmt: skip


def tokenize(query: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; kinds: phrase, (, ), AND, OR, NOT, word."""
    tokens: list[tuple[str, str]] = []
    position = 0
    query = query.strip()
    while position < len(query):
        match = _TOKEN.match(query, position)
        if match is None or match.end() == position:
            break
        position = match.end()
        if match.group(1):
            tokens.append(("phrase", match.group(2)))
        elif match.group(3):
            tokens.append(("(", "("))
        elif match.group(4):
            tokens.append((")", ")"))
        else:
            text = match.group(5)
            tokens.append((text, text) if text in ("AND", "OR", "NOT") else ("word", text))
    return tokens


class QueryEvaluator:
    """Parses a query and scores the documents of one index with it.

    A leaf scores a document ``weight × idf`` per term; AND and OR add the scores of
    their sides, NOT keeps the left side's. A leaf made only of stopwords has no
    constraint (None) and drops out of AND and OR.
    """

    def __init__(self, data: SearchIndex, processor: TextProcessor) -> None:
        self.data = data
        self.processor = processor
        self.total = max(1, data.document_count())
        self._tokens: list[tuple[str, str]] = []
        self._at = 0

    def search(self, query: str, limit: int | None = 10, offset: int = 0) -> list[Hit]:
        """Ranked hits: highest score first, then by URL."""
        scores = self.evaluate(query)
        if not scores:
            return []
        ranked = sorted(scores.items(), key=lambda item: -item[1])
        documents = self.data.documents(page for page, _score in ranked)
        hits = [
            Hit(*documents[page], score=round(score, 4))
            for page, score in ranked
            if page in documents
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.url))
        end = None if limit is None else offset + limit
        return hits[offset:end]

    def evaluate(self, query: str) -> Scores:
        self._tokens, self._at = tokenize(query), 0
        if not self._tokens:
            return {}
        result = self._or()
        if self._at < len(self._tokens):
            raise QueryError(f"unexpected {self._tokens[self._at][1]!r} in the query")
        return result or {}

    # -- parser ------------------------------------------------------------
    def _peek(self) -> str | None:
        return self._tokens[self._at][0] if self._at < len(self._tokens) else None

    def _or(self) -> Scores | None:
        result = self._and()
        while self._peek() == "OR":
            self._at += 1
            right = self._and()
            if result is None or right is None:
                result = right if result is None else result
                continue
            merged = dict(result)
            for page, score in right.items():
                merged[page] = merged.get(page, 0.0) + score
            result = merged
        return result

    def _and(self) -> Scores | None:
        result = self._not()
        while self._peek() not in (None, "OR", ")"):
            if self._peek() == "AND":
                self._at += 1
            right = self._not()
            if result is None or right is None:
                result = right if result is None else result
                continue
            result = {p: s + right[p] for p, s in result.items() if p in right}
        return result

    def _not(self) -> Scores | None:
        if self._peek() != "NOT":
            return self._atom()
        self._at += 1
        excluded = self._not()
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
            inner = self._or()
            if self._peek() != ")":
                raise QueryError("a '(' is not closed")
            self._at += 1
            return inner
        if kind == "phrase":
            return self._phrase(text)
        if kind == "word":
            if text.endswith("*") and len(text) > 1:
                return self._prefix(text.rstrip("*"))
            return self._phrase(text)  # "e-mail" is the phrase "e mail"
        raise QueryError(f"{text!r} needs a word after it" if kind != ")" else "unmatched ')'")

    # -- leaves ------------------------------------------------------------
    def _idf(self, count: int) -> float:
        return math.log(1.0 + self.total / max(1, count))

    def _postings(self, term: str) -> dict[PageId, Posting]:
        return self.data.postings(term)

    def _phrase(self, text: str) -> Scores | None:
        terms = self.processor.terms(text)
        if not terms:
            return None
        lists = [self._postings(term) for term in terms]
        pages = set(lists[0]).intersection(*lists[1:])
        scores: Scores = {}
        for page in pages:
            if len(terms) > 1 and not _adjacent([postings[page].positions for postings in lists]):
                continue
            scores[page] = sum(
                postings[page].weight * self._idf(len(postings)) for postings in lists
            )
        return scores

    def _prefix(self, prefix: str) -> Scores | None:
        parts = words(prefix)
        if not parts:
            return None
        if len(parts) > 1:
            raise QueryError(f"a wildcard applies to one word, not {prefix!r}*")
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


def _adjacent(positions: list[tuple[int, ...]]) -> bool:
    """Whether some position p of the first term has p+i among the i-th term's."""
    later = [set(p) for p in positions[1:]]
    return any(
        all(start + i + 1 in found for i, found in enumerate(later)) for start in positions[0]
    )
