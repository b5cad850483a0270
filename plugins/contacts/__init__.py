"""The contacts crawl task: e-mail addresses (mailto: links) and outbound domains of each site,
collected through the parsing thread's link hooks, written as ``H.contacts.csv``."""

from __future__ import annotations

from plugins.contacts.manager import ContactsManager
from plugins.contacts.threads import ContactsParsingThread
from plugins.contacts.unloaders import ContactsUnloader

__all__ = ["ContactsManager", "ContactsParsingThread", "ContactsUnloader"]
