"""Sitemap reading (sitemaps.org): XML url sets and indexes, text lists, gzip; pure and bounded.

Nothing here does I/O: the downloading thread fetches each file with the crawler's own
fetcher (politeness, robots, ``resolve``, proxy) and hands the bytes to
:func:`parse_sitemap`. XML goes through defusedxml, so a hostile file cannot expand
entities or reach the network, and the result is cut at ``max_urls`` however long
the file is.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass, field

__all__ = ["SitemapContent", "parse_sitemap", "sitemap_seeds"]

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(slots=True)
class SitemapContent:
    """What one sitemap file lists."""

    kind: str = "empty"
    """``urlset``, ``sitemapindex``, ``text``, ``empty`` or ``invalid``."""
    urls: list[str] = field(default_factory=list)
    """Page URLs (``<url><loc>`` or text lines), in file order, at most ``max_urls``."""
    sitemaps: list[str] = field(default_factory=list)
    """Further sitemap files (``<sitemap><loc>`` of an index)."""
    truncated: bool = False
    """The file held more than the bounds let through."""
    error: str = ""


def sitemap_seeds(robots_sitemaps: tuple[str, ...], scheme: str, host: str) -> list[str]:
    """The sitemap files to read first: robots.txt's ``Sitemap:`` lines, then
    ``/sitemap.xml`` of the site unless robots.txt named it already."""
    seeds = list(dict.fromkeys(robots_sitemaps))
    default = f"{scheme}://{host}/sitemap.xml"
    if default not in seeds:
        seeds.append(default)
    return seeds


def _gunzip(body: bytes, max_bytes: int) -> tuple[bytes, bool]:
    """A gzip file's content, at most ``max_bytes`` of it (a small file may unpack huge)."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    data = inflater.decompress(body, max_bytes)
    return data, bool(inflater.unconsumed_tail) or (not inflater.eof and len(data) >= max_bytes)


def _local(tag: object) -> str:
    """An element's name without its namespace (sitemaps appear with and without one)."""
    text = tag if isinstance(tag, str) else ""
    return text.rsplit("}", 1)[-1].lower()


def parse_sitemap(body: bytes, *, max_urls: int, max_bytes: int) -> SitemapContent:
    """Read one sitemap file.

    Args:
        body: the file as fetched (Content-Encoding already undone); gzip files
            (``sitemap.xml.gz``) are recognized by their magic bytes.
        max_urls: page URLs (or index entries) kept at most; more set ``truncated``.
        max_bytes: the most bytes a gzip file may unpack to.

    Returns:
        The page URLs and the further sitemap files it names; a file that is neither
        XML nor a text list gives ``kind="invalid"`` with ``error`` set.
    """
    content = SitemapContent()
    if body.startswith(GZIP_MAGIC):
        try:
            body, cut = _gunzip(body, max_bytes)
        except zlib.error as exc:
            content.kind, content.error = "invalid", f"gzip: {exc}"
            return content
        content.truncated = cut
    text_start = body.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text_start:
        return content
    if text_start.startswith(b"<"):
        _read_xml(body, content, max_urls)
    else:
        _read_text(body, content, max_urls)
    return content


def _read_xml(body: bytes, content: SitemapContent, max_urls: int) -> None:
    # Imported here: most sites have no sitemap, and a crawl need not load an XML parser.
    from xml.etree.ElementTree import ParseError

    import defusedxml.ElementTree as SafeElementTree
    from defusedxml import DefusedXmlException

    depth = 0
    entry = ""  # "url" or "sitemap": the element whose <loc> is being read
    try:
        for event, element in SafeElementTree.iterparse(
            io.BytesIO(body), events=("start", "end"), forbid_dtd=True
        ):
            name = _local(element.tag)
            if event == "start":
                depth += 1
                if depth == 1:
                    content.kind = name if name in ("urlset", "sitemapindex") else "invalid"
                    if content.kind == "invalid":
                        content.error = f"root element <{name}> is not a sitemap"
                        return
                elif depth == 2:
                    entry = name
                continue
            depth -= 1
            if name == "loc" and depth == 2:
                loc = (element.text or "").strip()
                if loc and entry == "url":
                    if len(content.urls) >= max_urls:
                        content.truncated = True
                        return
                    content.urls.append(loc)
                elif loc and entry == "sitemap":
                    if len(content.sitemaps) >= max_urls:
                        content.truncated = True
                        return
                    content.sitemaps.append(loc)
            elif depth == 1:
                element.clear()  # a url entry is done: keep memory flat
    except (ParseError, DefusedXmlException, ValueError) as exc:
        content.error = f"{type(exc).__name__}: {exc}"
        if content.kind == "empty":
            content.kind = "invalid"


def _read_text(body: bytes, content: SitemapContent, max_urls: int) -> None:
    """A text sitemap: one absolute http(s) URL a line (sitemaps.org)."""
    content.kind = "text"
    for raw in body.decode("utf-8-sig", "replace").splitlines():
        line = raw.strip()
        if not line.lower().startswith(("http://", "https://")):
            continue
        if len(content.urls) >= max_urls:
            content.truncated = True
            return
        content.urls.append(line)
