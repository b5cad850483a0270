"""FindingsJournal: what a task's link hooks found, kept in the state directory.

The link hooks run before a page's parse is stored, and a page whose parse was not
stored is parsed again after a crash, so the journal is at-least-once and is read
back as a set: a resumed crawl reports exactly what one uninterrupted crawl would.
This is the stopgap until tasks keep their rows through the DataManager; it is
local to one machine (each PostgreSQL worker keeps its own).
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, TYPE_CHECKING, ClassVar

from plugins.webgraph.manager import WebGraphManager
from rccrawler.exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager

Finding = tuple[str, str]
"""(kind, value), e.g. ("email", "info@a.test") or ("external", "http://b.test/x")."""


class FindingsJournal:
    """An append-only journal of (host, kind, value, found_on), one JSON array a line.

    Args:
        path: the journal file (in the crawl's state directory).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._handle: IO[str] | None = None

    def open(self, *, fresh: bool) -> None:
        """Open for appending; ``fresh`` empties it (a crawl with nothing parsed yet).

        A line cut by a killed process is dropped, so the next one starts clean.
        """
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if fresh:
                self.path.write_text("", encoding="utf-8")
            elif self.path.exists():
                data = self.path.read_bytes()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    os.truncate(self.path, keep)
            self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def add_page(self, host: str, page_url: str, contacts: Iterable[Finding]) -> None:
        """Record what one page holds, in one write (parsing threads call this at once)."""
        lines = "".join(
            json.dumps([host, kind, value, page_url], ensure_ascii=False) + "\n"
            for kind, value in dict.fromkeys(contacts)
        )
        if not lines:
            return
        with self._lock:
            if self._handle is None:
                raise RuntimeError("the journal is not open")
            self._handle.write(lines)
            self._handle.flush()  # in the OS's hands: a killed process loses nothing

    def read(self, host: str) -> list[tuple[str, str, str]]:
        """(kind, value, found_on) of a site, each once, sorted."""
        found: set[tuple[str, str, str]] = set()
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    site, kind, value, page_url = json.loads(line)
                except ValueError:
                    continue  # a line cut by a killed process
                if site == host:
                    found.add((kind, value, page_url))
        return sorted(found)


class JournalledManager(WebGraphManager):
    """A web-graph task whose parsing threads journal what they find (``self.journal``).

    The journal starts empty with the crawl and survives a stop or a crash with it;
    ``--fresh`` removes it.
    """

    journal_file: ClassVar[str] = "findings.jsonl"
    """The journal's file name in ``state_dir``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.journal = FindingsJournal(self.state_dir / self.journal_file)

    def open(self) -> None:
        super().open()
        # Nothing parsed is stored yet: any journal left is of a discarded crawl (or
        # of pages that will be parsed again), so start it empty.
        self.journal.open(fresh=self.data.statistics().pages_done == 0)

    def run(self) -> bool:
        try:
            return super().run()
        finally:
            self.journal.close()

    @classmethod
    def fresh(cls, settings: Settings) -> None:
        super().fresh(settings)
        (settings.state_dir / cls.journal_file).unlink(missing_ok=True)


def journal_of(manager: ApplicationManager, key: str) -> FindingsJournal:
    """The journal of a JournalledManager, for its parsing threads.

    Raises:
        ConfigError: ``key`` names a thread that needs a JournalledManager, and the
            manager is not one.
    """
    if not isinstance(manager, JournalledManager):
        raise ConfigError(key, f"needs a JournalledManager, not {type(manager).__name__}")
    return manager.journal
