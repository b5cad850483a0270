"""What the contacts task looks for in a link: e-mail addresses, phone numbers, domains."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

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
