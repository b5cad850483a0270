"""Content processor of the search task: letter runs, lowercase, stopwords, synonyms, stems."""

from __future__ import annotations

import re
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import Stemmer  # type: ignore[import-not-found]

if TYPE_CHECKING:
    from collections.abc import Callable

WORD = re.compile(r"[^\W\d_]+")
"""A word is a run of letters: digits, underscores and punctuation split words."""

DEFAULT_LANGUAGE = "english"

TERM_CACHE_SIZE = 200_000
"""Distinct words whose term is remembered; the cache starts over when it is full, so a
hostile page of random words costs memory once, not forever."""


def languages() -> list[str]:
    """The Snowball languages the C stemmer (PyStemmer) knows."""
    return list(Stemmer.algorithms())


def words(text: str) -> list[str]:
    """The lowercase letter runs of ``text``, in order."""
    return WORD.findall(text.lower())


def _read_list(path: Path | None, default: str) -> list[list[str]]:
    """Non-empty, non-comment lines of a word-list file, split into lowercase words."""
    if path is None:
        text = resources.files(__package__).joinpath(default).read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        found = words(line)
        if found:
            lines.append(found)
    return lines


def load_stopwords(path: Path | None = None) -> frozenset[str]:
    """Stopwords, several to a line allowed (the bundled ``stopwords.txt`` by default)."""
    return frozenset(word for line in _read_list(path, "stopwords.txt") for word in line)


def load_synonyms(path: Path | None = None) -> dict[str, str]:
    """Synonym groups, one to a line: every word of a line maps to the line's first word."""
    mapping: dict[str, str] = {}
    for line in _read_list(path, "synonyms.txt"):
        for word in line[1:]:
            mapping[word] = line[0]
    return mapping


class _TermCache(dict[str, str]):
    """word → term ("" for a stopword), computed on the first lookup of a word."""

    def __init__(self, compute: Callable[[str], str | None]) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, word: str) -> str:
        found = self.compute(word) or ""
        if len(self) >= TERM_CACHE_SIZE:
            self.clear()
        self[word] = found
        return found


class TermNumbers(dict[str, int]):
    """word → the number of its term (0 for a stopword), numbered in the order first
    seen; ``names[number]`` is the term. Numbers let a document's terms be counted and
    ordered in numpy instead of hashing their strings again at every step.

    A document takes one table for all its words (:meth:`TextProcessor.numbering`): a
    table is never renumbered, it is replaced by a fresh one when it grows too big.
    """

    def __init__(self, lookup: Callable[[str], str]) -> None:
        super().__init__()
        self.lookup = lookup
        self.names: list[str] = [""]
        self._number_of_term: dict[str, int] = {"": 0}
        self._lock = threading.Lock()
        """Two threads numbering new terms at once must not give one number to both."""

    def __missing__(self, word: str) -> int:
        term = self.lookup(word)
        with self._lock:
            number = self._number_of_term.get(term)
            if number is None:
                number = self._number_of_term[term] = len(self.names)
                self.names.append(term)
            self[word] = number
        return number


class TextProcessor:
    """Turns text into index terms: words, minus stopwords, synonyms mapped, stemmed.

    Stemming is the Snowball project's C implementation (PyStemmer), and the term of
    each distinct word is cached, since a page repeats a few thousand words many times.
    Thread-safe: each thread gets its own stemmer (they keep state); the cache is a
    plain dict, whose single get and set are atomic.

    Args:
        stopwords: words dropped (compared before synonyms and stemming).
        synonyms: word → the word it stands for.
        language: a Snowball language (:func:`languages`).
    """

    def __init__(
        self,
        stopwords: frozenset[str] = frozenset(),
        synonyms: dict[str, str] | None = None,
        language: str = DEFAULT_LANGUAGE,
    ) -> None:
        if language not in languages():
            raise ValueError(f"no Snowball stemmer for {language!r}")
        self.stopwords = stopwords
        self.synonyms = dict(synonyms or {})
        self.language = language
        self._local = threading.local()
        self._cache = _TermCache(self._term)
        self.lookup: Callable[[str], str] = self._cache.__getitem__
        """Like :meth:`term` but "" for a stopword, and without a Python frame per call
        (for the hot loops: ``map(processor.lookup, words)``)."""
        self._numbers = TermNumbers(self.lookup)
        # Synonyms apply to a word as written, else to its stem ("automobiles" → "car").
        self._stem_synonyms = {self.stem(k): self.stem(v) for k, v in self.synonyms.items()}

    @classmethod
    def default(cls) -> TextProcessor:
        """The bundled stopword and synonym lists, English stemming."""
        return cls(load_stopwords(), load_synonyms())

    def numbering(self) -> TermNumbers:
        """The table of term numbers a document is built with (a new one once the
        current one holds :data:`TERM_CACHE_SIZE` words: the tables a document holds
        stay valid)."""
        numbers = self._numbers
        if len(numbers) >= TERM_CACHE_SIZE:
            numbers = self._numbers = TermNumbers(self.lookup)
        return numbers

    def stem(self, word: str) -> str:
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer(self.language)
        result: str = stemmer.stemWord(word)
        return result

    def term(self, word: str) -> str | None:
        """The index term of one lowercase word, or None for a stopword."""
        return self._cache[word] or None

    def _term(self, word: str) -> str | None:
        if word in self.stopwords:
            return None
        if word in self.synonyms:
            word = self.synonyms[word]
            return None if word in self.stopwords else self.stem(word)
        stem = self.stem(word)
        return self._stem_synonyms.get(stem, stem)

    def analyze(self, text: str, limit: int | None = None) -> list[tuple[str, str]]:
        """(word as written, its term) of each word of ``text`` that reaches the index,
        in order: one pass gives both the terms and the indexed words.

        Args:
            limit: at most this many words of the text are looked at.
        """
        found = words(text)
        if limit is not None and len(found) > limit:
            found = found[:limit]
        return [(w, t) for w, t in zip(found, map(self.lookup, found), strict=True) if t]

    def terms(self, text: str) -> list[str]:
        """The index terms of a text, in order (stopwords left out)."""
        return [t for _w, t in self.analyze(text)]

    def indexed_words(self, text: str) -> list[str]:
        """The words of a text that reach the index (not stopwords), as written."""
        return [w for w, _t in self.analyze(text)]
