"""ContactsManager: a web-graph crawl that also lists each site's contacts."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from plugins.contacts.threads import CONTACTS, ContactsParsingThread
from plugins.contacts.unloaders import ContactsUnloader
from plugins.webgraph.manager import WebGraphManager

if TYPE_CHECKING:
    from rccrawler.data.tables import TaskTable
    from rccrawler.threads.parsing import ParsingThread
    from rccrawler.unloaders import ResultUnloader


class ContactsManager(WebGraphManager):
    """Crawls like the web-graph task and writes ``H.contacts.csv``: e-mail addresses,
    phone numbers, outbound domains and contact pages, each with the pages holding it.

    Each page's contacts are stored with its parse, in one atomic call, in the task
    table ``contacts_found``: a resumed crawl, or several PostgreSQL workers, list
    exactly what one uninterrupted crawl would.
    """

    task_tables: ClassVar[tuple[TaskTable, ...]] = (CONTACTS,)
    parsing_thread_cls: type[ParsingThread] = ContactsParsingThread
    unloader_classes: tuple[type[ResultUnloader], ...] = (
        *WebGraphManager.unloader_classes,
        ContactsUnloader,
    )
