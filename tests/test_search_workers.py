"""Indexing at crawl speed: the index workers, the posting lists derived in parts, and
the word splitter, each against what it replaces (same rows, same words)."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
from support.sites import GeneratedSite

from plugins.search import SearchManager
from plugins.search.content import html_content
from plugins.search.index import (
    DOCS,
    LISTS,
    TABLES,
    VOCABULARY,
    _words,
    build_document,
    build_lists,
    document_rows,
    list_part,
)
from plugins.search.processing import WORD
from plugins.search.settings import index_caps, text_processor
from plugins.search.worker import IndexWorker, WorkerError, WorkerPool, index_page
from rccrawler.data.storage import create_storage, open_storage
from rccrawler.manager import load_settings
from rccrawler.web.html import parse_html

HOST = "w.test"
MANAGER = "plugins.search.SearchManager"
READY_WAIT = 60.0
"""Seconds a test waits for a worker's interpreter to start (a bound, not a measure)."""


def _reference_words(text: str) -> list[str]:
    """The letter runs as the regex finds them (what ``_words`` replaced)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        return [word.lower() for word in WORD.findall(text)]
    return WORD.findall(lowered)


def test_words_are_the_letter_runs_the_regex_finds_in_any_text():
    rng = random.Random(16)
    every = [chr(code) for code in range(0x3000)]
    odd = ["\ud800", "\udfff", "İ", "\u212a", "\U0001f600", "\U00010400", "²", "_", "é", "’"]
    punctuation = [char for char in every + odd if not WORD.fullmatch(char)]
    ascii_only = [chr(code) for code in range(128)]
    for n in range(6000):
        pool = (every + odd, punctuation + ascii_only, ascii_only, ascii_only + odd)[n % 4]
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 60)))
        assert _words(text) == _reference_words(text), repr(text)
    assert _words("Don’t ¶ stop—the café’s 2nd İstanbul_flight") == [
        "don", "t", "stop", "the", "café", "s", "nd", "i̇stanbul", "flight",
    ]  # fmt: skip


@pytest.fixture
def site_settings(serve, crawler, tmp_path):
    """Settings of a search crawl of a 150-page generated site (not yet run), each in
    a state and output of its own."""
    server = serve({HOST: GeneratedSite(HOST, 150)})
    made = iter(range(100))

    def settings_for(**search: object) -> Path:
        folder = tmp_path / f"crawl{next(made)}"
        return crawler.settings_file(
            [HOST], server.resolve, manager=MANAGER, search=search,
            state_dir=str(folder / "state"), output_dir=str(folder / "output"),
        )  # fmt: skip

    return settings_for


def _stored(config: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every search table's rows, the page ids replaced by the pages' URLs."""
    _cls, settings = load_settings(config)
    with open_storage(settings, task_tables=TABLES) as data:
        docs = data.task_rows(DOCS.name)
        url_of = {row[0]: row[1] for row in docs}
        lists = data.task_rows(LISTS.name)
        vocabulary = data.task_rows(VOCABULARY.name)
    return {
        "docs": sorted(row[1:] for row in docs),
        "lists": sorted(lists, key=lambda row: (row[0], row[1])),
        "vocabulary": sorted(vocabulary),
        "urls": sorted(url_of.values()),
    }


def test_a_crawl_indexed_by_workers_stores_what_its_threads_would(site_settings):
    """The same crawl with its pages indexed in worker processes (started and up
    before it begins) and with ``search.workers: false``: the same rows, and the
    workers did the pages and the lists."""
    by_threads = site_settings(workers=False)
    _cls, settings = load_settings(by_threads)
    assert SearchManager(settings).run()
    by_workers = site_settings()
    _cls, settings = load_settings(by_workers)
    manager = SearchManager(settings)
    for worker in manager.workers.prestart(settings.parsing_threads):
        assert worker.ready(wait=READY_WAIT)
    assert manager.run()
    assert manager.workers.answered >= 150  # every page (and the parts of the lists)
    # Page ids follow the order pages were found, which threads may change: compare by URL.
    threads, workers = _stored(by_threads), _stored(by_workers)
    assert len(threads["urls"]) == 150
    assert workers["docs"] == threads["docs"]
    assert workers["vocabulary"] == threads["vocabulary"]
    assert SearchManager.search(settings, "page", limit=200)
    assert len(workers["lists"]) == len(threads["lists"])


def test_the_lists_derived_in_parts_are_the_lists_derived_at_once(site_settings):
    config = site_settings(workers=False)
    _cls, settings = load_settings(config)
    assert SearchManager(settings).run()
    tables = SearchManager.tables_for(settings)

    def derived(**options: object) -> tuple[list[tuple[object, ...]], ...]:
        data = create_storage(settings, task_tables=tables)
        data.open()
        try:
            build_lists(data, **options)  # type: ignore[arg-type]
            return tuple(sorted(data.task_rows(t.name)) for t in (LISTS, VOCABULARY))
        finally:
            data.close()

    at_once = derived()
    for batch in (7, 1024):
        whole = derived(batch=batch)
        for parts in (2, 3, 5):
            assert derived(batch=batch, parts=parts) == whole, (batch, parts)
    assert derived(batch=1024) == at_once
    pool = WorkerPool(settings)
    try:
        for worker in pool.prestart(2):
            pool.take()
            assert worker.ready(wait=READY_WAIT)
        assert derived(map_parts=pool.map_parts, parts=2) == at_once
    finally:
        pool.close()
    assert pool.answered == 2


def test_a_worker_parses_and_indexes_a_page_as_the_thread_does(site_settings):
    _cls, settings = load_settings(site_settings())
    processor, caps = text_processor(settings), index_caps(settings)
    site = GeneratedSite(HOST, 30)
    worker = IndexWorker(settings)
    try:
        assert worker.ready(wait=READY_WAIT)
        for i in range(30):
            url = f"http://{HOST}/p/{i}.html"
            body = site.body(i)
            options = {"full": True, "max_links": 1000}
            parsed, rows = worker.call(index_page, (url, url, body, "text/html", options))
            here = parse_html(body, url, "text/html", full=True, max_links=1000)
            content = html_content(url, here)
            assert parsed == here
            assert rows == document_rows(build_document(content, processor, **caps))
        noindex = b'<html><head><meta name="robots" content="noindex"></head><body>x</body>'
        assert worker.call(index_page, (url, url, noindex, "text/html", {"full": True}))[1] is None
        assert worker.answered == 31
    finally:
        worker.close()


def test_a_gone_worker_leaves_the_work_to_its_caller(site_settings):
    config = site_settings(workers=False)
    _cls, settings = load_settings(config)
    assert SearchManager(settings).run()
    with open_storage(settings, task_tables=SearchManager.tables_for(settings)) as data:
        columns = ("page_id", "terms", "weights", "counts", "positions", "words", "word_terms")
        rows = sorted(data.task_rows(DOCS.name, columns=columns))
    pool = WorkerPool(settings)
    try:
        workers = pool.prestart(2)
        for worker in workers:
            pool.take()
            assert worker.ready(wait=READY_WAIT)
        pid = workers[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerError):
            workers[0].call(list_part, 0, rows)
        arguments = [(0, rows, part, 2) for part in range(2)]
        assert list(pool.map_parts(list_part, arguments)) == [list_part(*a) for a in arguments]
        assert not workers[0].ready()
    finally:
        pool.close()
    assert pool.answered == 2  # both parts, by the live worker, one after the other
