"""ContactsUnloader: ``H.contacts.csv``, what the contacts task found on each site."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugins.contacts.threads import CONTACTS
from rccrawler.unloaders import ResultUnloader

if TYPE_CHECKING:
    from pathlib import Path

CONTACTS_HEADER = ("kind", "value", "found_on")


class ContactsUnloader(ResultUnloader):
    """Writes ``H.contacts.csv``: one row per contact and page it was found on, sorted."""

    def unload(self) -> list[Path]:
        return self.write_site_csvs("contacts.csv", CONTACTS_HEADER, self.contacts)

    def contacts(self, host: str) -> list[tuple[Any, ...]]:
        return sorted(
            self.data.task_rows(CONTACTS.name, columns=CONTACTS_HEADER, equals={"host": host})
        )
