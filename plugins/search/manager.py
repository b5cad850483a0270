"""SearchManager: the search task, a web-graph crawl that also builds an inverted index."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from plugins.search.commands import search_arguments, search_command, words_arguments, words_command
from plugins.search.index import TABLES, SearchIndex, build_lists
from plugins.search.query import QueryEvaluator
from plugins.search.settings import (
    SEARCH_DEFAULTS,
    SEARCH_KEYS,
    index_caps,
    index_partitions,
    index_workers,
    search_section,
    text_processor,
)
from plugins.search.threads import IndexingDownloadingThread, IndexingParsingThread, SearchContext
from plugins.search.worker import IndexWorkerPool
from plugins.webgraph.manager import WebGraphManager
from rccrawler.config import unknown_key
from rccrawler.data.storage import create_storage, open_storage, state_exists
from rccrawler.exceptions import StateError
from rccrawler.manager import TaskCommand

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from rccrawler.config import Settings
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.data.tables import TaskTable
    from rccrawler.threads.downloading import DownloadingThread
    from rccrawler.threads.parsing import ParsingThread
    from rccrawler.web.fetch import Fetcher


class SearchManager(WebGraphManager):
    """Crawls the sites, writes their web graphs and indexes every page it fetched
    (SPEC §7) in the crawl's own storage, whatever the backend; ``search``, ``words``
    and ``serve`` read that index."""

    downloading_thread_cls: type[DownloadingThread] = IndexingDownloadingThread
    parsing_thread_cls: type[ParsingThread] = IndexingParsingThread
    task_tables: ClassVar[tuple[TaskTable, ...]] = TABLES
    settings_sections: ClassVar[tuple[str, ...]] = ("search",)
    identity_keys: ClassVar[tuple[str, ...]] = (
        *WebGraphManager.identity_keys,
        *(f"search.{key}" for key in ("language", "stopwords", "synonyms", "max_words",
                                      "max_positions")),
    )  # fmt: skip
    """How the index is built: its words would not match a query's (partitions are not
    here: a saved crawl keeps the ones it was created with)."""
    section_defaults: ClassVar[Mapping[str, Mapping[str, object]]] = {"search": SEARCH_DEFAULTS}
    commands: ClassVar[Mapping[str, TaskCommand]] = {
        **WebGraphManager.commands,
        "search": TaskCommand("search the crawl's index", search_command, search_arguments),
        "words": TaskCommand(
            "list indexed words with their document counts", words_command, words_arguments
        ),
        "serve": replace(WebGraphManager.commands["serve"], help="serve the search web page"),
    }

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        super().check_settings(settings)
        for key in search_section(settings):
            if key not in SEARCH_KEYS:
                raise unknown_key(f"search.{key}", SEARCH_KEYS)
        text_processor(settings)
        index_caps(settings)
        index_partitions(settings)
        index_workers(settings)

    @classmethod
    def tables_for(cls, settings: Settings) -> tuple[TaskTable, ...]:
        """The posting lists get ``search.partitions`` hash partitions (PostgreSQL)."""
        partitions = index_partitions(settings)
        return tuple(
            replace(table, partitions=partitions) if table.partition_by else table
            for table in cls.task_tables
        )

    def create_context(self, data: SQLDataManager, fetcher: Fetcher) -> SearchContext:
        """The crawl's context with the index workers (started as the parsing threads
        ask for them)."""
        context = super().create_context(data, fetcher)
        workers = IndexWorkerPool(self.settings, enabled=index_workers(self.settings))
        return SearchContext(**vars(context), workers=workers)

    def prepare(self) -> None:
        """The parsing threads' index workers, started before any other thread (the
        live view's): as forks of this process, which has the crawl's imports done,
        rather than as fresh interpreters."""
        super().prepare()
        self.workers.prestart(self.settings.parsing_threads)

    @property
    def workers(self) -> IndexWorkerPool:
        assert isinstance(self.context, SearchContext)
        return self.context.workers

    def unload(self) -> list[str]:
        """Derive the term-keyed posting lists from the pages' rows now that the crawl is
        over (in parts, in the index workers), and write the files as a web-graph crawl
        does. ``rccrawler export`` reads the state only: it writes the files alone."""
        if self.data.read_only:
            return super().unload()
        workers = self.workers
        if not workers.size:
            build_lists(self.data)
            return super().unload()
        # This thread mostly waits for the workers: the files are written meanwhile.
        failed: list[BaseException] = []

        def derive() -> None:
            try:
                build_lists(self.data, map_calls=workers.map_calls, parts=workers.size)
            except BaseException as exc:
                failed.append(exc)

        deriving = threading.Thread(target=derive, name="SearchLists", daemon=True)
        deriving.start()
        try:
            failures = super().unload()
        finally:
            deriving.join()
        if failed:
            raise failed[0]
        return failures

    def unlock_state(self) -> None:
        # The run is over (or never began): its workers end with it.
        self.workers.close()
        super().unlock_state()

    @classmethod
    def load_index(cls, settings: Settings) -> SearchIndex:
        """The saved index, opened read-only for as long as the process lives (a WSGI
        app under another server keeps it): a running crawl may go on writing it."""
        if not state_exists(settings):
            raise StateError(f"no saved crawl of {settings.crawl_name}: run the crawl first")
        data = create_storage(settings, task_tables=cls.tables_for(settings), read_only=True)
        data.open()
        return SearchIndex(data)

    @classmethod
    @contextlib.contextmanager
    def open_index(cls, settings: Settings) -> Iterator[SearchIndex]:
        """The saved index, read-only (a running crawl may go on writing it)."""
        with open_storage(settings, task_tables=cls.tables_for(settings)) as data:
            yield SearchIndex(data)

    @classmethod
    def search(cls, settings: Settings, query: str, limit: int = 10) -> list[dict[str, Any]]:
        """Ranked hits (url, title, summary, snippet, score) of a query over the saved index."""
        with cls.open_index(settings) as index:
            evaluator = QueryEvaluator(index, text_processor(settings))
            return [hit.as_dict() for hit in evaluator.search(query, limit)]

    @classmethod
    def serve(cls, settings: Settings, host: str, port: int) -> bool:
        from plugins.search.web import serve

        with cls.open_index(settings) as index:
            serve(index, text_processor(settings), host, port)
        return True

    @classmethod
    def words(cls, settings: Settings, prefix: str = "") -> list[tuple[str, int]]:
        """Indexed words starting with ``prefix`` and their document counts."""
        with cls.open_index(settings) as index:
            return index.word_counts(prefix.lower())
