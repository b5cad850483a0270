"""ContactsParsingThread: collects contacts through the seed spider's three link hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.contacts.links import (
    Contact,
    contacts_of_other_link,
    domain_of_link,
    is_contact_page,
)
from rccrawler.data.tables import TaskTable
from rccrawler.threads.parsing import ParsingThread

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.data.base import TaskRows
    from rccrawler.records import PageData
    from rccrawler.web.html import ParsedPage

CONTACTS = TaskTable(
    "contacts_found",
    (("host", "text"), ("kind", "text"), ("value", "text"), ("found_on", "text")),
    key=("page_id", "kind", "value"),
    indexes=(("host",),),
)
"""One row per contact and page holding it (``found_on`` is the page's URL)."""


class ContactsParsingThread(ParsingThread):
    """Parses as the seed spider does; its link hooks note e-mail addresses, phone numbers,
    outbound domains and contact pages, and process_page() returns them as the page's
    rows, which the DataManager stores with the parse.

    The hooks run on this thread only, between classify_links() and process_page() of
    the same page, so the per-page list needs no lock.
    """

    def __init__(self, context: CrawlContext, index: int) -> None:
        super().__init__(context, index)
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

    def process_page(self, page: PageData, body: bytes, parsed: ParsedPage) -> TaskRows | None:
        found, self.page_contacts = self.page_contacts, []
        rows = [
            (page.host, kind, value, page.normalized_url) for kind, value in dict.fromkeys(found)
        ]
        return {CONTACTS.name: rows}
