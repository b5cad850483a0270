"""ContactsUnloader: ``H.contacts.csv``, what the contacts task found on each site."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.journal import JournalledManager
from rccrawler.unloaders import ResultUnloader

if TYPE_CHECKING:
    from pathlib import Path

CONTACTS_HEADER = ("kind", "value", "found_on")


class ContactsUnloader(ResultUnloader):
    """Writes ``H.contacts.csv``: one row per contact and page it was found on, sorted."""

    def unload(self) -> list[Path]:
        if not isinstance(self.manager, JournalledManager):
            return []
        return self.write_site_csvs("contacts.csv", CONTACTS_HEADER, self.manager.journal.read)
