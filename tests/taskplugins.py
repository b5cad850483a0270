"""Crawl tasks the tests name by dotted path, like a user's own (as Scrapy's tests/spiders.py)."""

from __future__ import annotations

import threading
from typing import ClassVar

from plugins.webgraph import WebGraphManager
from rccrawler import ParsingThread, ResultUnloader
from rccrawler.unloaders import atomic_write


class TitleParsingThread(ParsingThread):
    """Keeps nothing itself: asks for the full parse so titles exist."""

    full_parse = True


class TitlesUnloader(ResultUnloader):
    """Writes the node URLs, one a line, to show a task's own unloader runs."""

    def unload(self):
        path = self.output_dir / "titles.txt"
        with atomic_write(path) as handle:
            for host in self.data.hosts():
                for page in self.data.iter_pages(host.host):
                    handle.write(f"{page.normalized_url}\n")
        return [path]


class TitleGraphManager(WebGraphManager):
    parsing_thread_cls = TitleParsingThread
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
