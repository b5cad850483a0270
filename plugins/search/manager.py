"""SearchManager: the search task, a web-graph crawl that also builds an inverted index."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from plugins.search.index import MAX_POSITIONS, MAX_WORDS, SearchDataManager
from plugins.search.processing import (
    DEFAULT_LANGUAGE,
    TextProcessor,
    languages,
    load_stopwords,
    load_synonyms,
)
from plugins.search.query import QueryEvaluator
from plugins.search.threads import IndexingParsingThread
from plugins.webgraph.manager import WebGraphManager
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.manager import STATE_FILE

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from rccrawler.config import Settings
    from rccrawler.data.base import DataManager
    from rccrawler.data.sqlite import SQLiteDataManager
    from rccrawler.threads.parsing import ParsingThread

SEARCH_KEYS = ("stopwords", "synonyms", "language", "max_words", "max_positions")
"""Keys of the ``search:`` section: word-list files (relative to settings.yaml), the
Snowball language, and the caps on words indexed per document and positions kept per
term and document."""

CAP_DEFAULTS = {"max_words": MAX_WORDS, "max_positions": MAX_POSITIONS}


def _section(settings: Settings) -> Mapping[str, Any]:
    section = settings.sections.get("search") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("search", "must be a mapping")
    return section


def _list_path(settings: Settings, key: str) -> Path | None:
    value = _section(settings).get(key)
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
    section = _section(settings)
    language = section.get("language", DEFAULT_LANGUAGE)
    if language not in languages():
        raise ConfigError("search.language", f"no Snowball stemmer for {language!r}")
    try:
        stopwords = load_stopwords(_list_path(settings, "stopwords"))
        synonyms = load_synonyms(_list_path(settings, "synonyms"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("search", f"cannot read a word list ({exc})") from exc
    return TextProcessor(stopwords, synonyms, language)


def index_caps(settings: Settings) -> dict[str, int]:
    """``max_words`` and ``max_positions`` of the ``search:`` section (or their defaults)."""
    caps = {}
    for key, default in CAP_DEFAULTS.items():
        value = _section(settings).get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**8:
            raise ConfigError(f"search.{key}", "must be a whole number from 1 to 100000000")
        caps[key] = value
    return caps


class SearchManager(WebGraphManager):
    """Crawls the sites, writes their web graphs and indexes every page it fetched
    (SPEC §7) in the crawl's own database; ``search``/``words`` read that index."""

    parsing_thread_cls: type[ParsingThread] = IndexingParsingThread
    sqlite_data_manager_cls: ClassVar[type[SQLiteDataManager]] = SearchDataManager
    settings_sections: ClassVar[tuple[str, ...]] = ("search",)

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        super().check_settings(settings)
        for key in _section(settings):
            if key not in SEARCH_KEYS:
                raise ConfigError(f"search.{key}", f"unknown key (known: {', '.join(SEARCH_KEYS)})")
        text_processor(settings)
        index_caps(settings)

    def create_data_manager(self) -> DataManager:
        data = super().create_data_manager()
        if isinstance(data, SearchDataManager):
            data.processor = text_processor(self.settings)
            data.caps = index_caps(self.settings)
        return data

    @classmethod
    def load_index(cls, settings: Settings) -> SearchDataManager:
        """The saved index, opened read-only (a running crawl may go on writing it);
        the caller closes it."""
        path = settings.state_dir / STATE_FILE
        if not path.exists():
            raise StateError(f"no saved crawl in {settings.state_dir}: run the crawl first")
        data = SearchDataManager(path, read_only=True)
        data.open()
        return data

    @classmethod
    def open_index(cls, settings: Settings) -> AbstractContextManager[SearchDataManager]:
        """:meth:`load_index` as a context manager that closes it."""
        return closing(cls.load_index(settings))

    @classmethod
    def search(cls, settings: Settings, query: str, limit: int = 10) -> list[dict[str, Any]] | None:
        with cls.open_index(settings) as data:
            evaluator = QueryEvaluator(data, text_processor(settings))
            return [hit.as_dict() for hit in evaluator.search(query, limit)]

    @classmethod
    def serve(cls, settings: Settings, host: str, port: int) -> bool:
        from plugins.search.web import serve

        with cls.open_index(settings) as data:
            serve(data, text_processor(settings), host, port)
        return True

    @classmethod
    def words(cls, settings: Settings, prefix: str = "") -> list[tuple[str, int]] | None:
        with cls.open_index(settings) as data:
            return data.word_counts(prefix.lower())
