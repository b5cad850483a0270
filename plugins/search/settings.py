"""The ``search:`` section of settings.yaml: word lists and the stemmer's language."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plugins.search.index import MAX_POSITIONS, MAX_WORDS
from plugins.search.processing import (
    DEFAULT_LANGUAGE,
    TextProcessor,
    languages,
    load_stopwords,
    load_synonyms,
)
from rccrawler.exceptions import ConfigError

if TYPE_CHECKING:
    from rccrawler.config import Settings

SEARCH_KEYS = (
    "stopwords", "synonyms", "language", "max_words", "max_positions", "partitions", "workers"
)  # fmt: skip
"""Keys of the ``search:`` section: word-list files (relative to settings.yaml), the
Snowball language, the caps on words indexed per document and positions kept per term
and document, the PostgreSQL partitions, and whether pages are indexed in worker
processes."""

CAP_DEFAULTS = {"max_words": MAX_WORDS, "max_positions": MAX_POSITIONS}

SEARCH_DEFAULTS: Mapping[str, object] = {
    "stopwords": None, "synonyms": None, "language": DEFAULT_LANGUAGE, **CAP_DEFAULTS,
    "partitions": None, "workers": True,
}  # fmt: skip
"""What each key of the ``search:`` section means when it is left out (the bundled word
lists, English, the caps, the backend's partitions, worker processes)."""


def search_section(settings: Settings) -> Mapping[str, Any]:
    section = settings.sections.get("search") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("search", "must be a mapping")
    return section


def _list_path(settings: Settings, key: str) -> Path | None:
    value = search_section(settings).get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"search.{key}", "must be a file path")
    path = Path(value).expanduser()
    if not path.is_absolute() and settings.source is not None:
        path = settings.source.parent / path
    if not path.is_file():
        raise ConfigError(f"search.{key}", f"{path} is not a readable file")
    return path


def text_processor(settings: Settings) -> TextProcessor:
    """The content processor that the ``search:`` section describes."""
    section = search_section(settings)
    language = section.get("language", SEARCH_DEFAULTS["language"])
    if language not in languages():
        raise ConfigError("search.language", f"no Snowball stemmer for {language!r}")
    try:
        stopwords = load_stopwords(_list_path(settings, "stopwords"))
        synonyms = load_synonyms(_list_path(settings, "synonyms"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("search", f"cannot read a word list ({exc})") from exc
    return TextProcessor(stopwords, synonyms, language)


MAX_PARTITIONS = 256


def index_partitions(settings: Settings) -> int | None:
    """``partitions`` of the ``search:`` section: how many hash partitions by term the
    postings get on PostgreSQL (None: the backend's default). A new crawl reads it; a
    saved one keeps the partitions it was created with."""
    value = search_section(settings).get("partitions")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise ConfigError("search.partitions", f"must be a whole number from 1 to {MAX_PARTITIONS}")
    return value


def index_caps(settings: Settings) -> dict[str, int]:
    """``max_words`` and ``max_positions`` of the ``search:`` section (or their defaults)."""
    caps = {}
    for key, default in CAP_DEFAULTS.items():
        value = search_section(settings).get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**8:
            raise ConfigError(f"search.{key}", "must be a whole number from 1 to 100000000")
        caps[key] = value
    return caps


def index_workers(settings: Settings) -> bool:
    """``workers`` of the ``search:`` section (default true): whether each parsing
    thread parses and indexes its pages in a worker process (:mod:`plugins.search.worker`)."""
    value = search_section(settings).get("workers", SEARCH_DEFAULTS["workers"])
    if not isinstance(value, bool):
        raise ConfigError("search.workers", "must be true or false")
    return value
