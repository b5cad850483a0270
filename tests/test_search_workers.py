"""Indexing at crawl speed: the index workers, the posting lists derived in parts, and
the word splitter, each against what it replaces (same rows, same words)."""

from __future__ import annotations

import contextlib
import fcntl
import operator
import os
import random
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from crawling import crawl_command, kill_under_way, wait_until
from support.processes import process_alive
from support.sites import GeneratedSite, page_path
from support.terminal import TerminalSession

from plugins.search import SearchManager
from plugins.search.content import html_content
from plugins.search.index import (
    DOCS,
    LIST_COLUMNS,
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
from plugins.search.threads import IndexingParsingThread
from plugins.search.worker import IndexWorker, IndexWorkerPool, index_page
from rccrawler.data.storage import create_storage, open_storage
from rccrawler.manager import load_settings
from rccrawler.records import PageData, PageId
from rccrawler.web.html import parse_html
from rccrawler.workers import WorkerError

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


@pytest.mark.parametrize("fork", [False, True], ids=["interpreter", "fork"])
def test_a_crawl_indexed_by_workers_stores_what_its_threads_would(site_settings, fork):
    """The same crawl with its pages indexed in worker processes (started and up
    before it begins, as fresh interpreters or as forks of the crawl) and with
    ``search.workers: false``: the same rows, and the workers did the pages and the
    lists."""
    by_threads = site_settings(workers=False)
    _cls, settings = load_settings(by_threads)
    assert SearchManager(settings).run()
    by_workers = site_settings()
    _cls, settings = load_settings(by_workers)
    manager = SearchManager(settings)
    manager.workers.fork = fork
    for worker in manager.workers.prestart(settings.parsing_threads):
        assert worker.forked is fork
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


def test_a_crawl_whose_worker_is_killed_stores_what_its_threads_would(site_settings):
    """One worker is dead before the crawl begins: its thread finds out on the pages it
    sent (or sends) there, does them itself, and goes on alone; the rows are the same."""
    by_threads = site_settings(workers=False)
    _cls, settings = load_settings(by_threads)
    assert SearchManager(settings).run()
    threads = _stored(by_threads)
    config = site_settings()
    _cls, settings = load_settings(config)
    manager = SearchManager(settings)
    workers = manager.workers.prestart(settings.parsing_threads)
    for worker in workers:
        assert worker.ready(wait=READY_WAIT)
    assert workers[0].pid is not None
    os.kill(workers[0].pid, signal.SIGKILL)
    assert manager.run()
    stored = _stored(config)
    assert stored["docs"] == threads["docs"]
    assert stored["vocabulary"] == threads["vocabulary"]
    assert workers[1].answered > 0


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
    pool = IndexWorkerPool(settings)
    try:
        for worker in pool.prestart(2):
            pool.take()
            assert worker.ready(wait=READY_WAIT)
        assert derived(map_calls=pool.map_calls, parts=2) == at_once
    finally:
        pool.close()
    assert pool.answered == 4  # two parts of the lists, two of the vocabulary


@pytest.mark.parametrize("fork", [False, True], ids=["interpreter", "fork"])
def test_a_worker_parses_and_indexes_a_page_as_the_thread_does(site_settings, fork):
    _cls, settings = load_settings(site_settings())
    processor, caps = text_processor(settings), index_caps(settings)
    site = GeneratedSite(HOST, 30)
    worker = IndexWorker(settings, fork=fork)
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
        assert worker.answered == 30
    finally:
        worker.close()


def test_a_worker_reads_the_next_page_while_it_sends_an_answer(site_settings):
    """Two big pages sent back to back before either answer is read, as a parsing
    thread keeps the next page in the pipe: both pipes fill, and the worker still reads
    on, so both answers come, in order (the two sends had waited on each other)."""
    _cls, settings = load_settings(site_settings())
    url = f"http://{HOST}/big.html"
    text = "lorem ipsum dolor sit amet " * 150_000  # 4 MB: more than a pipe holds
    pages = [f"<title>big {n}</title><p>{text}</p>".encode() for n in range(2)]
    answers: list[tuple[object, ...]] = []

    def pipeline() -> None:
        for body in pages:
            worker.submit(index_page, (url, url, body, "text/html", {"full": True}))
        answers.extend(worker.result() for _ in pages)

    worker = IndexWorker(settings)
    thread = threading.Thread(target=pipeline, daemon=True)
    try:
        assert worker.ready(wait=READY_WAIT)
        thread.start()
        thread.join(READY_WAIT)  # a bound, not a measure: this takes well under a second
        assert not thread.is_alive(), "the worker and its caller wait on each other"
    finally:
        if thread.is_alive() and worker.pid is not None:
            os.kill(worker.pid, signal.SIGKILL)  # so that the stuck send fails, and ends
        worker.close()
    assert [parsed.title for parsed, _rows in answers] == ["big 0", "big 1"]  # type: ignore[attr-defined]


class _Unpicklable:
    """Pickles, but raises where it is unpickled (ZeroDivisionError)."""

    def __reduce__(self) -> tuple[object, tuple[int, int]]:
        return operator.truediv, (1, 0)


def test_a_request_the_worker_cannot_read_is_answered_with_an_error(site_settings):
    """A request whose pickle fails to load in the worker still gets its answer, an
    error (its caller does the work), and the worker reads on: it had stopped reading,
    and its caller waited for ever."""
    _cls, settings = load_settings(site_settings())
    worker = IndexWorker(settings)
    answers: list[object] = []

    def calls() -> None:
        worker.submit(len, _Unpicklable())
        try:
            worker.result()
        except WorkerError as exc:
            answers.append(str(exc))
        answers.append(worker.call(len, "four"))

    thread = threading.Thread(target=calls, daemon=True)
    try:
        assert worker.ready(wait=READY_WAIT)
        thread.start()
        thread.join(READY_WAIT)  # a bound, not a measure
        assert not thread.is_alive(), "the worker never answered"
    finally:
        if thread.is_alive() and worker.pid is not None:
            os.kill(worker.pid, signal.SIGKILL)
        worker.close()
    assert len(answers) == 2 and "ZeroDivisionError" in str(answers[0])
    assert answers[1] == 4


def test_an_answer_that_does_not_pickle_is_answered_with_an_error(site_settings):
    """Work whose result cannot be pickled (a module, here) gets an error for an answer,
    and the worker goes on: it had died of it, and its caller lost it."""
    _cls, settings = load_settings(site_settings())
    worker = IndexWorker(settings)
    try:
        assert worker.ready(wait=READY_WAIT)
        with pytest.raises(WorkerError, match="could not be sent"):
            worker.call(__import__, "os")
        assert worker.call(len, "four") == 4
    finally:
        worker.close()


UNLOADABLE = "type('Bad', (), {'__reduce__': lambda s: (__import__('operator').truediv, (1, 0))})()"
"""Evaluated in a worker: an answer that pickles there and raises where it is loaded."""


def test_an_answer_that_cannot_be_read_lets_the_worker_go(site_settings):
    """An answer that does not load leaves the stream in the middle of nowhere: the
    caller gets a WorkerError for it and for what it sent after (not bytes of an answer
    read as the next one), and the worker process ends."""
    _cls, settings = load_settings(site_settings())
    worker = IndexWorker(settings)
    try:
        assert worker.ready(wait=READY_WAIT)
        worker.submit(eval, UNLOADABLE)
        worker.submit(len, "four")
        with pytest.raises(WorkerError, match="ZeroDivisionError"):
            worker.result()
        assert not worker.ready()
        with pytest.raises(WorkerError):
            worker.result()
        with pytest.raises(WorkerError):
            worker.call(len, "four")
    finally:
        worker.close()
    assert worker.pid is not None and not process_alive(worker.pid)


def test_a_closing_thread_reads_the_answers_to_the_pages_it_sent(site_settings):
    """A stop that could not wait for them ends a parsing thread with pages still at its
    worker: their answers are read and dropped, so the worker's next answer (a part of
    the posting lists) is to what is sent next, not to one of those pages."""
    _cls, settings = load_settings(site_settings())
    manager = SearchManager(settings)
    site = GeneratedSite(HOST, 3)
    try:
        thread = IndexingParsingThread(manager.context, 0)
        worker = thread.worker
        assert worker is not None and worker.ready(wait=READY_WAIT)
        for i in range(3):
            url = f"http://{HOST}{page_path(i)}"
            page = PageData(id=PageId(i + 1), host=HOST, url=url, normalized_url=url)
            worker.submit(index_page, (url, url, site.body(i), "text/html", {"full": True}))
            thread._sent.append((page, site.body(i)))
        thread.close()
        assert not thread._sent
        assert worker.call(len, "four") == 4
    finally:
        manager.workers.close()


def test_a_gone_worker_leaves_the_work_to_its_caller(site_settings):
    config = site_settings(workers=False)
    _cls, settings = load_settings(config)
    assert SearchManager(settings).run()
    with open_storage(settings, task_tables=SearchManager.tables_for(settings)) as data:
        rows = sorted(data.task_rows(DOCS.name, columns=LIST_COLUMNS))
    pool = IndexWorkerPool(settings)
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
        calls = [(list_part, (0, rows, part, 2)) for part in range(2)]
        assert list(pool.map_calls(calls)) == [list_part(*a) for _, a in calls]
        assert not workers[0].ready()
    finally:
        pool.close()
    assert pool.answered == 2  # both parts, by the live worker, one after the other


@pytest.mark.parametrize("fork", [False, True], ids=["interpreter", "fork"])
def test_a_worker_goes_on_while_its_large_answer_waits_to_be_read(site_settings, tmp_path, fork):
    """A page's answer can be hundreds of kB: the worker's socket holds it unread, so the
    worker goes on to the next page meanwhile instead of waiting in its send."""
    _cls, settings = load_settings(site_settings())
    worker = IndexWorker(settings, fork=fork)
    mark = tmp_path / "next"
    try:
        assert worker.ready(wait=READY_WAIT)
        # Over the 233 kB a socket holds by default; under the 430 kB it holds where the
        # kernel caps the buffer asked for at Linux's default maximum.
        worker.submit(os.urandom, 350_000)
        worker.submit(Path.touch, mark)
        assert wait_until(mark.exists, READY_WAIT)  # before the first answer is read
        assert len(worker.result()) == 350_000
        assert worker.result() is None
    finally:
        worker.close()


def _open_files(pid: int) -> dict[int, str]:
    """File descriptor → what it is open on, of a live process (Linux)."""
    found: dict[int, str] = {}
    for link in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            found[int(link.name)] = os.readlink(link)
    return found


def test_a_forked_worker_holds_none_of_the_crawl_s_files(site_settings, tmp_path):
    """A fork gets a copy of every file the crawl has open, its state's lock among them:
    the worker closes them all but its socket, so the lock goes with a killed crawl
    (a resume is not refused while the workers end), and the crawl reaps it."""
    _cls, settings = load_settings(site_settings())
    lock = (tmp_path / "lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    worker = IndexWorker(settings, fork=True)
    try:
        assert worker.ready(wait=READY_WAIT)
        assert worker.pid is not None and process_alive(worker.pid)
        held = _open_files(worker.pid)
        assert str(tmp_path / "lock") not in held.values()
        assert [fd for fd in held if fd > 2] == [fd for fd, what in held.items() if
                                                 what.startswith("socket:")]  # fmt: skip
        lock.close()  # the crawl is gone, its worker is not
        again = (tmp_path / "lock").open("w")
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if it held it
        again.close()
        assert worker.call(len, "four") == 4
    finally:
        lock.close()
        worker.close()
    assert not Path(f"/proc/{worker.pid}").exists()  # reaped: not even a zombie is left


def test_workers_are_forks_only_of_a_process_with_one_thread():
    """A fork copies the locks other threads hold, locked: a process with a second
    thread starts fresh interpreters (a crawl from the command line forks: its threads
    start after its workers)."""
    program = (
        "import threading; from rccrawler.workers import can_fork; alone = can_fork();"
        " event = threading.Event(); thread = threading.Thread(target=event.wait);"
        " thread.start(); print(alone, can_fork()); event.set()"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert out.stdout.split() == ["True", "False"]


def test_a_killed_crawl_leaves_no_worker_behind_and_resumes_to_the_same_index(
    serve, crawler, tmp_path
):
    """SIGKILL in mid-crawl: the workers end with the crawl (their socket closes), and
    the resumed crawl stores the rows an uninterrupted one stores."""
    site = GeneratedSite(HOST, 800, fanout=8)
    server = serve({HOST: site})
    reference = crawler.settings_file(
        [HOST], server.resolve, manager=MANAGER, search={"workers": False},
        state_dir=str(tmp_path / "ref" / "state"), output_dir=str(tmp_path / "ref" / "out"),
    )  # fmt: skip
    _cls, settings = load_settings(reference)
    assert SearchManager(settings).run()
    hits = len(server.hits)
    config = crawler.settings_file([HOST], server.resolve, manager=MANAGER)
    command, env = crawl_command(config)
    workers = kill_under_way(command, env, server, hits + 300)
    assert len(workers) >= 2
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert _stored(config)["docs"] == _stored(reference)["docs"]
    assert _stored(config)["vocabulary"] == _stored(reference)["vocabulary"]


def test_a_worker_computes_its_next_call_while_its_answer_waits_to_be_taken(
    site_settings, tmp_path
):
    """map_calls sends each worker its next call with the one before, not once that
    one's answer is taken: while the caller stores the first answer, the worker whose
    answer comes second goes on to its next call."""
    _cls, settings = load_settings(site_settings())
    pool = IndexWorkerPool(settings)
    try:
        for worker in pool.prestart(2):
            pool.take()
            assert worker.ready(wait=READY_WAIT)
        marks = [tmp_path / name for name in "abcd"]  # a, c to one worker; b, d to the other
        answers = pool.map_calls([(Path.touch, (mark,)) for mark in marks])
        assert next(answers) is None
        # b's answer is not taken yet: its worker has d all the same.
        assert wait_until(marks[3].exists, READY_WAIT)
        assert list(answers) == [None] * 3
        assert all(mark.exists() for mark in marks)
    finally:
        pool.close()
    assert pool.answered == 4


@pytest.mark.both_backends
def test_a_crawl_in_the_live_view_forks_its_workers_before_the_view_starts(
    site_settings, tmp_path, storage
):
    """On a terminal the live view's thread runs while the crawl starts its threads (and,
    on PostgreSQL, its connection pool's): the workers are forked before them
    (``ApplicationManager.prepare``), with the crawl's imports done, not started as
    fresh interpreters."""
    config = site_settings()
    log_file = tmp_path / "crawl.log"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERM")}
    command = [sys.executable, "-m", "rccrawler", "--config", str(config), "-v"]
    session = TerminalSession(
        [*command, "--log-file", str(log_file)],
        width=120, height=40, env={**env, "TERM": "xterm-256color"}, cwd=tmp_path,
    )  # fmt: skip
    try:
        code = session.wait(READY_WAIT)
    finally:
        session.kill()
    assert code == 0, session.display()
    assert "information retrieval report" in session.display()  # the rich view ran
    log = log_file.read_text(encoding="utf-8")
    assert re.findall(r"index worker \d+ started, (.+)", log) == ["a fork of the crawl"] * 2, log
    assert _stored(config)["urls"] == sorted(f"http://{HOST}{page_path(n)}" for n in range(150))
