"""ContactsParsingThread: collects contacts through the seed spider's three link hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.contacts.book import (
    Contact,
    contacts_of_other_link,
    domain_of_link,
    is_contact_page,
)
from plugins.journal import journal_of
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from rccrawler.html import ParsedPage
    from rccrawler.manager import ApplicationManager
    from rccrawler.records import PageData


class ContactsParsingThread(ParsingThread):
    """Parses as the seed spider does; its link hooks note e-mail addresses, phone numbers,
    outbound domains and contact pages, and process_page() hands them to the manager's journal.

    The hooks run on this thread only, between classify_links() and process_page() of
    the same page, so the per-page list needs no lock; the journal has its own.
    """

    def __init__(self, manager: ApplicationManager, index: int) -> None:
        super().__init__(manager, index)
        self.journal = journal_of(manager, "parsing_thread")
        self.page_contacts: list[Contact] = []

    def found_internal_link(self, page: PageData, url: str) -> None:
        if is_contact_page(url):
            self.page_contacts.append(("contact_page", url))

    def found_external_link(self, page: PageData, url: str) -> None:
        domain = domain_of_link(url)
        if domain is not None:
            self.page_contacts.append(("domain", domain))

    def found_other_link(self, page: PageData, url: str) -> None:
        self.page_contacts.extend(contacts_of_other_link(url))

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> None:
        super().process_page(page, body, parsed)
        found, self.page_contacts = self.page_contacts, []
        self.journal.add_page(page.host, page.normalized_url, found)
