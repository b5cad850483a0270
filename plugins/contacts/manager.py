"""ContactsManager: a web-graph crawl that also lists each site's contacts."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from plugins.contacts.threads import ContactsParsingThread
from plugins.contacts.unloaders import ContactsUnloader
from plugins.journal import JournalledManager

if TYPE_CHECKING:
    from rccrawler.threads.parsing import ParsingThread
    from rccrawler.unloaders import ResultUnloader


class ContactsManager(JournalledManager):
    """Crawls like the web-graph task and writes ``H.contacts.csv``: e-mail addresses,
    phone numbers, outbound domains and contact pages, each with the pages holding it.

    The contacts are journalled in ``state_dir`` beside the crawl state, so a stopped
    crawl resumes with them; with PostgreSQL workers each machine keeps its own journal
    and only the one that writes the results sees its own finds.
    """

    journal_file: ClassVar[str] = "contacts.jsonl"
    parsing_thread_cls: type[ParsingThread] = ContactsParsingThread
    unloader_classes: tuple[type[ResultUnloader], ...] = (
        *JournalledManager.unloader_classes,
        ContactsUnloader,
    )
