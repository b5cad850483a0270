"""Crawl tasks the tests name by dotted path, like a user's own (as Scrapy's tests/spiders.py)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import ClassVar

from plugins.webgraph import WebGraphManager
from rccrawler import DownloadingThread, ParsingThread, ResultUnloader, TaskTable
from rccrawler.unloaders import atomic_write

TITLES = TaskTable("test_titles", (("url", "text"), ("title", "text")))
"""Each parsed page's title, kept in the crawl's storage with the page."""


class TitleParsingThread(ParsingThread):
    """Asks for the full parse and keeps each page's title in the task's table."""

    full_parse = True

    def process_page(self, page, body, parsed):
        return {TITLES.name: [(page.normalized_url, parsed.title)]}


class TitlesUnloader(ResultUnloader):
    """Writes the titles the parsing threads kept, ``url<TAB>title`` a line, by URL."""

    output_names = ("titles.txt",)

    def unload(self):
        path = self.output_dir / "titles.txt"
        rows = sorted(self.data.task_rows(TITLES.name, columns=("url", "title")))
        with atomic_write(path) as handle:
            handle.writelines(f"{url}\t{title}\n" for url, title in rows)
        return [path]


class TitleGraphManager(WebGraphManager):
    parsing_thread_cls = TitleParsingThread
    task_tables = (TITLES,)
    unloader_classes = (*WebGraphManager.unloader_classes, TitlesUnloader)


class LinkHookRecorder(ParsingThread):
    """Records every call of the three link hooks, with the thread that made it."""

    calls: ClassVar[list[tuple[str, str, str, str]]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def record(self, kind, page, url):
        with self.lock:
            self.calls.append((kind, page.normalized_url, url, threading.current_thread().name))

    def found_internal_link(self, page, url):
        self.record("internal", page, url)

    def found_external_link(self, page, url):
        self.record("external", page, url)

    def found_other_link(self, page, url):
        self.record("other", page, url)


class CpuRecorder:
    """The CPUs the recorder threads below ran on, by (thread kind, page URL)."""

    seen: ClassVar[dict[tuple[str, str], frozenset[int]]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def record(cls, kind: str, url: str) -> None:
        with cls.lock:
            cls.seen[(kind, url)] = frozenset(os.sched_getaffinity(0))


class CpuRecordingDownloader(DownloadingThread):
    def process_response(self, url, result):
        CpuRecorder.record("download", url)


class CpuRecordingParser(ParsingThread):
    def process_page(self, page, body, parsed):
        CpuRecorder.record("parse", page.url)


class PausingUnloader(ResultUnloader):
    """Says it has begun (``paused`` in the output folder), waits (up to 120 s) for a
    connection to its Unix socket ``go.sock`` there, so a test can cut the storage under
    the output, then reads every page of every site and writes how many it read
    (``pages-read.txt``)."""

    output_names = ("paused", "pages-read.txt")

    def unload(self):
        go = self.output_dir / "go.sock"
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(go))
            listener.listen(1)
            listener.settimeout(120)
            (self.output_dir / "paused").touch()
            with contextlib.suppress(TimeoutError):
                listener.accept()[0].close()
        go.unlink()
        read = sum(1 for host in self.data.hosts() for _page in self.data.iter_pages(host.host))
        path = self.output_dir / "pages-read.txt"
        with atomic_write(path) as handle:
            handle.write(f"{read}\n")
        return [path]
