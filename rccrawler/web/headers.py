"""http.client's response-header parse, without the email package for plain headers.

http.client (under urllib3) parses every response's header block with
``email.parser``: a feed parser that splits, classifies and joins each line through
generators, about a tenth of the crawl's Python on a site of small pages (py-spy,
PostgreSQL docs). A block of plain ``Name: value`` lines, which is what servers send,
gives the same ``HTTPMessage`` from one regular expression and a loop; anything else
(folded lines, a line without a colon, bare CRs, a missing blank line, too long or too
many lines) goes through the email package exactly as before.

:func:`install` puts :func:`parse_headers` in http.client's place (the module's
function, which ``HTTPResponse.begin`` looks up at each call). It returns what the
email parser returns, so other users of http.client in the process (a test's
``http.server``) see no difference; tests compare the two on hostile input.
"""

from __future__ import annotations

import email.parser
import http.client
import re
from typing import BinaryIO

__all__ = ["install", "installed", "parse_headers", "stdlib_parse_headers"]

_PLAIN_BLOCK = re.compile(r"(?:[!-9;-~]+:[^\r\n]*\r?\n)*\r?\n")
"""Header lines as the email parser reads them without a defect or a fold: a name of
printable ASCII but ``:`` (its header pattern), a value without CR or LF, CRLF or LF;
then the blank line."""

stdlib_parse_headers = http.client.parse_headers
"""http.client's own, as it was before :func:`install`."""


def parse_headers(fp: BinaryIO, _class: type[http.client.HTTPMessage] = http.client.HTTPMessage
                  ) -> http.client.HTTPMessage:  # fmt: skip
    """``http.client.parse_headers``: the header lines of ``fp`` up to the blank line,
    read with http.client's limits, as a ``_class`` message."""
    text = b"".join(http.client._read_headers(fp)).decode("iso-8859-1")  # type: ignore[attr-defined]
    if _class is not http.client.HTTPMessage or _PLAIN_BLOCK.fullmatch(text) is None:
        # Another message class (an http.server's MessageClass) may build itself its
        # own way: the email parser makes it, as before.
        return email.parser.Parser(_class=_class).parsestr(text)
    message = _class()
    # The lines end in "\n" (some in "\r\n"); the last two pieces are the blank line.
    for line in text.split("\n")[:-2]:
        name, _, value = line.partition(":")
        # compat32's header_source_parse: the value's leading blanks and line end go.
        message.set_raw(name, value.lstrip(" \t").rstrip("\r"))
    message.set_payload("")  # the email parser's body of a block that ends at its blank line
    return message


def install() -> None:
    """Make :func:`parse_headers` the one http.client uses (idempotent). A Python whose
    http.client lacks the line reader it builds on keeps its own."""
    if hasattr(http.client, "_read_headers"):
        http.client.parse_headers = parse_headers  # type: ignore[assignment]


def installed() -> bool:
    """Whether http.client parses headers with :func:`parse_headers`."""
    return http.client.parse_headers is parse_headers
