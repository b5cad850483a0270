"""ContactsManager: a web-graph crawl that also lists each site's contacts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.contacts.book import ContactBook
from plugins.contacts.threads import ContactsParsingThread
from plugins.contacts.unloaders import ContactsUnloader
from plugins.webgraph.manager import WebGraphManager

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.threads.parsing import ParsingThread
    from rccrawler.unloaders import ResultUnloader

JOURNAL_FILE = "contacts.jsonl"
"""The ContactBook's journal in ``state_dir`` (``--fresh`` removes it)."""


class ContactsManager(WebGraphManager):
    """Crawls like the web-graph task and writes ``H.contacts.csv``: e-mail addresses,
    phone numbers, outbound domains and contact pages, each with the pages holding it.

    The contacts are journalled in ``state_dir`` beside the crawl state, so a stopped
    crawl resumes with them; with PostgreSQL workers each machine keeps its own journal
    and only the one that writes the results sees its own finds.
    """

    parsing_thread_cls: type[ParsingThread] = ContactsParsingThread
    unloader_classes: tuple[type[ResultUnloader], ...] = (
        *WebGraphManager.unloader_classes,
        ContactsUnloader,
    )

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.contact_book = ContactBook(self.state_dir / JOURNAL_FILE)

    def open(self) -> None:
        super().open()
        # Nothing parsed is stored yet: any journal left is of a discarded crawl (or
        # of pages that will be parsed again), so start it empty.
        self.contact_book.open(fresh=self.data.statistics().pages_done == 0)

    def run(self) -> bool:
        try:
            return super().run()
        finally:
            self.contact_book.close()

    @staticmethod
    def discard_state(state_dir: Path) -> None:
        WebGraphManager.discard_state(state_dir)
        (state_dir / JOURNAL_FILE).unlink(missing_ok=True)
