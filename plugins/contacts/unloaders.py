"""ContactsUnloader: ``H.contacts.csv``, what the contacts task found on each site."""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING

from plugins.contacts.book import ContactBook
from rccrawler.unloaders import ResultUnloader, atomic_write, host_file_stem

if TYPE_CHECKING:
    from pathlib import Path

CONTACTS_HEADER = ("kind", "value", "found_on")


class ContactsUnloader(ResultUnloader):
    """Writes ``H.contacts.csv``: one row per contact and page it was found on, sorted."""

    def unload(self) -> list[Path]:
        book = getattr(self.manager, "contact_book", None)
        if not isinstance(book, ContactBook):
            return []
        written = []
        for host in self.data.hosts():
            path = self.output_dir / f"{host_file_stem(host.host)}.contacts.csv"
            with atomic_write(path, newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(CONTACTS_HEADER)
                writer.writerows(book.read(host.host))
            written.append(path)
        return written
