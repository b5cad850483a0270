"""ContactsUnloader: ``H.contacts.csv``, what the contacts task found on each site."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.contacts.book import ContactBook
from rccrawler.unloaders import ResultUnloader

if TYPE_CHECKING:
    from pathlib import Path

CONTACTS_HEADER = ("kind", "value", "found_on")


class ContactsUnloader(ResultUnloader):
    """Writes ``H.contacts.csv``: one row per contact and page it was found on, sorted."""

    def unload(self) -> list[Path]:
        book = getattr(self.manager, "contact_book", None)
        if not isinstance(book, ContactBook):
            return []
        return self.write_site_csvs("contacts.csv", CONTACTS_HEADER, book.read)
