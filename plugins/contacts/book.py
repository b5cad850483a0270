"""ContactBook: what the contacts task found, journalled in the state directory.

The link hooks run before a page's parse is stored, and a page whose parse was not
stored is parsed again after a crash, so the journal is at-least-once and is read
back as a set: a resumed crawl reports exactly what one uninterrupted crawl would.
"""

from __future__ import annotations

import json
import os
import threading
from typing import IO, TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

Contact = tuple[str, str]
"""(kind, value): ("email", "info@a.test"), ("phone", "+1-555-0100"), ("domain", "b.test"),
("contact_page", "http://a.test/contact")."""

CONTACT_PAGE_WORDS = ("contact", "kontakt", "impressum", "imprint", "about")
"""Internal URLs whose path holds one of these are listed as contact pages."""


def emails_of_mailto(url: str) -> list[str]:
    """The addresses of a mailto: URL (RFC 6068): the path and the to/cc/bcc fields,
    percent-decoded, the domain lowercased (the local part is case-sensitive)."""
    body, _, query = url[len("mailto:") :].partition("?")
    candidates = body.split(",")
    for name, value in parse_qsl(query, keep_blank_values=False):
        if name.lower() in ("to", "cc", "bcc"):
            candidates += value.split(",")
    found = []
    for candidate in candidates:
        address = unquote(candidate).strip()
        local, at, domain = address.rpartition("@")
        if at and local and domain and not any(c.isspace() for c in address):
            found.append(f"{local}@{domain.lower()}")
    return found


def contacts_of_other_link(url: str) -> list[Contact]:
    """E-mail addresses of a mailto: link and the number of a tel: link; nothing otherwise."""
    scheme = url.partition(":")[0].lower()
    if scheme == "mailto":
        return [("email", address) for address in emails_of_mailto(url)]
    if scheme == "tel":
        number = unquote(url[len("tel:") :]).partition(";")[0].strip()
        return [("phone", number)] if number else []
    return []


def domain_of_link(url: str) -> str | None:
    """The host name of an http(s) link, lowercased, without port; None if it has none."""
    try:
        return urlsplit(url).hostname or None
    except ValueError:
        return None


def is_contact_page(url: str) -> bool:
    """Whether an internal URL looks like a contact or imprint page (by its path)."""
    try:
        path = urlsplit(url).path.lower()
    except ValueError:
        return False
    return any(word in path for word in CONTACT_PAGE_WORDS)


class ContactBook:
    """An append-only journal of (host, kind, value, found_on), one JSON array a line.

    Args:
        path: the journal file (in the crawl's state directory).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._handle: IO[str] | None = None

    def open(self, *, fresh: bool) -> None:
        """Open for appending; ``fresh`` empties it (a crawl with nothing parsed yet).

        A line cut by a killed process is dropped, so the next one starts clean.
        """
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if fresh:
                self.path.write_text("", encoding="utf-8")
            elif self.path.exists():
                data = self.path.read_bytes()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):
                    os.truncate(self.path, keep)
            self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def add_page(self, host: str, page_url: str, contacts: Iterable[Contact]) -> None:
        """Record what one page holds, in one write (parsing threads call this at once)."""
        lines = "".join(
            json.dumps([host, kind, value, page_url], ensure_ascii=False) + "\n"
            for kind, value in dict.fromkeys(contacts)
        )
        if not lines:
            return
        with self._lock:
            if self._handle is None:
                raise RuntimeError("the contact book is not open")
            self._handle.write(lines)
            self._handle.flush()  # in the OS's hands: a killed process loses nothing

    def read(self, host: str) -> list[tuple[str, str, str]]:
        """(kind, value, found_on) of a site, each once, sorted."""
        found: set[tuple[str, str, str]] = set()
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    site, kind, value, page_url = json.loads(line)
                except ValueError:
                    continue  # a line cut by a killed process
                if site == host:
                    found.add((kind, value, page_url))
        return sorted(found)
