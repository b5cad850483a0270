"""The charset of an HTML body, as browsers find it (SPEC §5).

Labels are looked up in the WHATWG Encoding Standard's table, which ``webencodings``
(installed with html5lib) keeps; this module adds only the documented exceptions below,
and the ``<meta>`` prescan, which webencodings does not provide (html5lib's is private
and misses ``<meta/charset=…>``).
"""

from __future__ import annotations

import codecs
import re

import webencodings

__all__ = ["decode_html", "detect_encoding", "html_utf8"]

_OVERRIDES: dict[str, str | None] = {
    # Browsers decode GBK (and so gb2312) with the GB18030 decoder, and Python's gbk
    # lacks GB18030's four-byte sequences that real "gb2312" pages contain.
    "gbk": "gb18030",
    # webencodings' x-user-defined codec is not registered with ``codecs``; such pages
    # are Latin text in practice, decoded as the labels of windows-1252 are.
    "x-user-defined": "cp1252",
    # The "replacement" labels (iso-2022-kr, hz-gb-2312...) would turn a page into one
    # U+FFFD; as an unknown label, the next source of a charset is tried instead.
    "replacement": None,
}
"""webencodings' name of an encoding -> the Python codec used instead (None: skip it)."""

# Python codecs that are not byte->text charsets a page may claim: UTF-7 is a known XSS
# vector (WHATWG drops it) and the rest decode escapes or raise on everything.
_UNSAFE_CODECS = frozenset(
    {
        "utf-7",
        "unicode-escape",
        "raw-unicode-escape",
        "idna",
        "punycode",
        "undefined",
        "mbcs",
        "oem",
        "charmap",
    }
)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_PRESCAN_BYTES = 4096
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([^"';,\s]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""charset\s*=\s*["']?\s*([^"';>\s]+)""", re.IGNORECASE)
_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.DOTALL)
_META_TAG = re.compile(rb"<meta[\s/]([^>]*)", re.IGNORECASE)
_ATTRIBUTE = re.compile(
    rb"""([^\s/>=][^\s/>=]*)(?:\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s>]*)))?""",
)


def _whatwg_codec(label: str) -> str | None:
    """The Python codec of a WHATWG label (exceptions applied), or None if it is not one."""
    encoding = webencodings.lookup(label)
    if encoding is None:
        return None
    if encoding.name in _OVERRIDES:
        return _OVERRIDES[encoding.name]
    name: str = encoding.codec_info.name
    return name


def _codec_for_label(label: str) -> str | None:
    """Python codec name for a charset label, or None when no safe text codec has it."""
    key = label.strip().strip("\"'").lower()
    if not key:
        return None
    if webencodings.lookup(key) is not None:
        codec = _whatwg_codec(key)
    else:
        # Labels outside the WHATWG list (e.g. "latin_1", "cp437") still name a real
        # charset; Python's canonical name goes through the table again, so "latin_1"
        # (Python's iso8859-1) also means windows-1252.
        try:
            info = codecs.lookup(key)
        except (LookupError, ValueError):
            return None
        if not getattr(info, "_is_text_encoding", True) or info.name in _UNSAFE_CODECS:
            return None
        codec = _whatwg_codec(info.name) if webencodings.lookup(info.name) else info.name
    return None if codec is None else codecs.lookup(codec).name


def _prescan_meta(head: bytes) -> str | None:
    """Charset declared by a <meta> in the first bytes, per the WHATWG prescan (simplified)."""
    head = _COMMENT.sub(b"", head)
    for tag in _META_TAG.finditer(head):
        attrs: dict[bytes, bytes] = {}
        for name, dq, sq, bare in _ATTRIBUTE.findall(tag.group(1)):
            attrs.setdefault(name.lower(), dq or sq or bare)
        label: bytes | None = attrs.get(b"charset")
        if label is None and attrs.get(b"http-equiv", b"").strip().lower() == b"content-type":
            found = _META_CHARSET.search(attrs.get(b"content", b""))
            label = found.group(1) if found else None
        if not label:
            continue
        codec = _codec_for_label(label.decode("ascii", "replace"))
        if codec is None:
            continue  # the prescan goes on to the next <meta> when a label is unknown
        # A document that could be read as ASCII to find this tag is not UTF-16.
        return "utf-8" if codec.startswith("utf-16") else codec
    return None


def detect_encoding(body: bytes, content_type: str | None) -> str:
    """Charset of an HTML body, as a Python codec name that ``codecs.lookup`` accepts.

    The order is the HTML spec's: a BOM (UTF-8/UTF-16), then the Content-Type ``charset``
    parameter, then ``<meta charset>`` or ``<meta http-equiv=Content-Type>`` in the first
    4096 bytes, else UTF-8. Labels map as browsers map them (WHATWG Encoding Standard), so
    "iso-8859-1" gives cp1252 and "gb2312" gives gb18030; unknown labels are skipped.

    Args:
        body: the raw response body.
        content_type: the Content-Type header value, if any.

    Returns:
        A codec name such as "utf-8", "cp1251" or "utf-16-le".
    """
    for bom, bom_codec in _BOMS:
        if body.startswith(bom):
            return bom_codec
    found = _HEADER_CHARSET.search(content_type) if content_type else None
    codec = _codec_for_label(found.group(1)) if found else None
    if codec is not None:
        return codec
    return _prescan_meta(body[:_PRESCAN_BYTES]) or "utf-8"


def decode_html(body: bytes, content_type: str | None) -> str:
    """The body as text: decoded with :func:`detect_encoding`, bad bytes replaced, BOM removed."""
    return _decoded(body, detect_encoding(body, content_type))


def _decoded(body: bytes, codec: str) -> str:
    text = body.decode(codec, errors="replace")
    return text[1:] if text.startswith("\ufeff") else text


def html_utf8(body: bytes, content_type: str | None) -> bytes:
    """The body as UTF-8, what lexbor reads, BOM removed: a UTF-8 body as it came (no
    decoding at all: lexbor replaces a bad byte with U+FFFD as ``errors="replace"``
    does), any other charset decoded with :func:`detect_encoding` and encoded again."""
    codec = detect_encoding(body, content_type)
    if codec == "utf-8":
        return body[3:] if body.startswith(codecs.BOM_UTF8) else body
    return _decoded(body, codec).encode("utf-8", "replace")
