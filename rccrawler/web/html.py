"""HTML for the crawl: `<a href>` links and the search fields (SPEC §5, §7).

Everything here is a pure function of its arguments, so the parsing threads can call it
concurrently. Two backends share one contract: lexbor (fast, via selectolax) and html5lib
(pure Python, the reference tree builder). Both must give identical ``links`` and
``base_url`` for the same input.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selectolax.lexbor import LexborHTMLParser

from rccrawler.web.encoding import html_utf8
from rccrawler.web.urls import resolve_link

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

    from selectolax.lexbor import LexborNode

logger = logging.getLogger(__name__)

__all__ = [
    "HTML_MEDIA_TYPES",
    "PARSERS",
    "ParsedPage",
    "parse_html",
]

PARSERS = ("lexbor", "html5lib")
"""The HTML parser backends (``parser:`` in the settings)."""
HTML_MEDIA_TYPES = ("text/html", "application/xhtml+xml")
"""The media types of HTML: pages that are graph nodes and get parsed (SPEC §5.4)."""


@dataclass(frozen=True, slots=True)
class ParsedPage:
    """What one parse of a page yields; ``full=False`` fills only links, base and robots."""

    links: tuple[str, ...]
    """Absolute URLs of HTML ``<a href>`` in document order, fragment dropped, first kept."""
    base_url: str
    """The effective base URL: the first ``<base href>`` resolved against the page URL."""
    title: str
    """Text of the first ``<title>``, whitespace collapsed."""
    meta_keywords: str
    """``<meta name=keywords content>``, whitespace collapsed."""
    meta_description: str
    """``<meta name=description>``, else ``<meta name=summary>``, whitespace collapsed."""
    headings: tuple[str, ...]
    """Non-empty texts of h1..h6 in document order."""
    text: str
    """Visible body text (no script/style/noscript/template), whitespace collapsed."""
    meta_robots: str
    """Lowercased ``<meta name=robots>`` contents joined by ", " (e.g. "noindex, nofollow"),
    and those of the ``<meta>`` naming the crawler (``robots_name``).

    Filled even with ``full=False``: a crawler needs "nofollow" before it follows links."""
    truncated: str = ""
    """What a parse budget cut, in words ("" when nothing was): links over ``max_links``,
    markup nested deeper than ``max_depth`` (flattened)."""
    first_cut_link: str = ""
    """The first link left out by ``max_links`` (absolute), to record where the cut began."""


# --------------------------------------------------------------------------- URLs


# The URL parser strips C0 controls and spaces around a URL and tabs/newlines inside it.
_URL_STRIP = "".join(map(chr, range(0x21)))
_URL_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_BAD_BASE_SCHEMES = ("data:", "javascript:")


def _clean_hrefs(hrefs: Iterable[str]) -> list[str]:
    """Hrefs as the URL parser reads them: C0 controls and spaces stripped from the
    ends, tabs and newlines removed. A pass in C over all of them for each step (a page
    has hundreds, and a Python call for each took a tenth of a full parse): the rare
    tab or newline is looked for once in all of them."""
    cleaned = [href.strip(_URL_STRIP) for href in hrefs]
    seen = "".join(cleaned)
    if "\t" in seen or "\n" in seen or "\r" in seen:
        cleaned = [href.translate(_URL_TAB_NEWLINE) for href in cleaned]
    return cleaned


def _clean_href(href: str) -> str:
    return _clean_hrefs((href,))[0]


def _without_fragments(hrefs: Iterable[str]) -> list[str]:
    """Each href cleaned and without its fragment, unless that would leave white space
    at its end for the resolver to strip (``"a #x"`` resolves to ``a%20``, not ``a``)."""
    cleaned = _clean_hrefs(hrefs)
    if "#" not in "".join(cleaned):
        return cleaned
    return [
        href if (head := href.partition("#")[0]) and head[-1] <= " " else head for href in cleaned
    ]


def _effective_base(page_url: str, base_href: str | None) -> str:
    """The document base URL: the first <base href> resolved against the page URL.

    A base that does not resolve, or a data:/javascript: one, falls back to the page URL,
    as the HTML spec's "frozen base URL" does.
    """
    page = page_url.partition("#")[0]
    base = resolve_link(page, _clean_href(base_href)) if base_href else None
    if base is None or base.lower().startswith(_BAD_BASE_SCHEMES):
        return page
    return base


_RELATIVE_PATH = re.compile(r"[^/?:]+(?:[/?]|$)")
"""A relative-path reference (RFC 3986 §4.2): no scheme, authority or absolute path,
and not a bare query (which keeps the base's last segment)."""


def _directory_of(base_url: str) -> str:
    """``http://h/a/b?q`` → ``http://h/a/``: all that a relative path is merged with, or
    "" when the base has no path (then each link resolves in full)."""
    scheme_end = base_url.find("://")
    query = base_url.find("?")
    path_end = query if query >= 0 else len(base_url)
    path_start = base_url.find("/", scheme_end + 3, path_end) if scheme_end > 0 else -1
    if path_start < 0:
        return ""
    return base_url[: base_url.rfind("/", path_start, path_end) + 1]


def _resolve_links(
    base_url: str, hrefs: Iterable[str], max_links: int | None = None
) -> tuple[tuple[str, ...], str]:
    """Absolute links in first-seen order; each distinct href is resolved once.

    Returns:
        At most ``max_links`` links, and the first link left out ("" when none was).
    """
    # Pages repeat navigation hrefs many times, so deduplicating before resolving saves
    # most of the resolver calls; a second pass merges spellings that resolve alike.
    # The resolving is lazy, so a page of a million links stops costing at the cap (the
    # hrefs before it are as many as the <a> tags parsed: see _limit_anchors). The
    # fragment is cut first, as the resolver drops it anyway: Sphinx's "#section" and
    # "page.html#name" links then collapse into one href each. Exact repeats go before
    # that, so each spelling is cleaned and cut once (the SQLAlchemy docs' 73,130 hrefs
    # are 35,545 spellings, the Python docs' 164,265 are 99,649); order is first-seen.
    distinct = dict.fromkeys(_without_fragments(dict.fromkeys(hrefs)))
    # A relative path resolves against the base's directory alone, so resolving it there
    # lets the resolver's cache serve every page of that directory.
    directory = _directory_of(base_url)
    # An empty href is a link to the base itself (RFC 3986 §5.2.2), whatever the resolver
    # makes of it; the caller deduplicates self-links.
    resolved = (
        base_url
        if not href
        else resolve_link(directory, href)
        if directory and _RELATIVE_PATH.match(href)
        else resolve_link(base_url, href)
        for href in distinct
    )
    links: dict[str, None] = {}
    for url in resolved:
        if url is None or url in links:
            continue
        if max_links is not None and len(links) >= max_links:
            return tuple(links), url
        links[url] = None
    return tuple(links), ""


# --------------------------------------------------------------------------- budgets

ANCHORS_PER_LINK = 4
"""Markup is parsed up to ``ANCHORS_PER_LINK × max_links`` ``<a`` tags: room for the
repeats of navigation links, while a page of a million links is never built as a
tree (about 500 bytes of memory per element)."""
_ANCHOR = re.compile(rb"<[aA][\s/>]")
_HREF = re.compile(rb"""\shref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)


def _limit_anchors(data: bytes, max_links: int, tags: int) -> tuple[bytes, str]:
    """Cut the markup (UTF-8) before its ``ANCHORS_PER_LINK × max_links + 1``-th ``<a`` tag.

    ``tags`` is the markup's count of ``<`` (counted once for all the budgets).

    Returns:
        The markup to parse, and the href of the first ``<a`` cut off ("" when none was).
    """
    limit = ANCHORS_PER_LINK * max_links
    if tags <= limit or data.count(b"<a") + data.count(b"<A") <= limit:
        return data, ""
    found = next(itertools.islice(_ANCHOR.finditer(data), limit, None), None)
    if found is None:
        return data, ""
    return _cut_at(data, found.start())


def _cut_at(data: bytes, position: int) -> tuple[bytes, str]:
    """The markup before ``position``, and the href of the first ``<a`` from there on
    ("#" for one without an href, "" when none follows)."""
    found = _ANCHOR.search(data, position)
    if found is None:
        return data[:position], ""
    tag = data[found.start() : data.find(b">", found.start()) + 1 or found.start() + 4096]
    href = _HREF.search(tag)
    first = next((g for g in href.groups() if g is not None), b"") if href else b""
    return data[:position], first.decode("utf-8", "replace") or "#"


def _limit_tags(data: bytes, max_tags: int, tags: int) -> tuple[bytes, str] | None:
    """Cut the markup before its ``max_tags + 1``-th ``<``: lexbor keeps about 180 bytes
    per element and 20 per parse error, so 10 MB of ``<p>`` took 590 MB to parse.

    Returns:
        None when nothing is cut, else the markup to parse and the href of the first
        ``<a`` cut off ("" when none was).
    """
    if tags <= max_tags:
        return None
    rest = data.split(b"<", max_tags)[-1]  # after the max_tags-th "<", split in C
    return _cut_at(data, len(data) - len(rest) + rest.find(b"<"))


NUL_FLOOD = 65_536
"""NUL bytes above which a page's NULs are read as U+FFFD before parsing. lexbor keeps
a parse error per NUL outside attributes (about 17 bytes each: a 10 MB page of zeros,
a gzip bomb, took 170 MB); as U+FFFD they are text. Attribute values (links) read the
same either way; only the text of such a page gains the replacement characters."""


def _defuse_nuls(data: bytes) -> bytes:
    if b"\0" not in data or data.count(b"\0") <= NUL_FLOOD:
        return data
    return data.replace(b"\0", "\ufffd".encode())


_DEPTH_SCAN_TAGS = 16_384
"""Pages with fewer ``<`` than this are not scanned for depth; above it a tree builder's
cost grows with depth². Nested all the way down, such a page costs a parsing thread
about half a second, outside the GIL (selectolax 1.0.2: 16,000 nested ``<div>`` 0.43 s,
8,000 0.11 s, another thread running meanwhile; ``<span>`` or ``<b>``, which walk no
scope, 4 ms): bounded, and cheaper for a crawl than scanning every page of 4,096 tags
or more (149 of the Python docs' 530 pages, against 11 above this)."""
_WS = rb"\t\n\f\r "
_TAG_BODY = (
    rb"(?:[" + _WS + rb"/]++|(?>[^" + _WS + rb"/>][^" + _WS + rb"/>=]*+)"
    rb"(?>[" + _WS + rb"]*+=[" + _WS + rb"]*+(?:\"[^\"]*+\"|'[^']*+'|[^" + _WS + rb">]*+))?)*+"
    rb"(?:>|\Z)"
)
"""What follows a tag's name, as the tokenizer reads it: attributes, whose quoted values
may hold ``>`` (an ``=`` starts a value only after a name), up to the ``>`` that ends
the tag, or to the end of the page (the tokenizer drops such a tag, and nothing after
it is a tag). Possessive, so a page of ``<a x`` without ``>`` is read once: a search
for the ``>`` from every ``<`` took 126 s on 320 kB."""
_TAG_NAME = rb"[A-Za-z][^" + _WS + rb"/>]*+"
"""A tag's name runs to a space, ``/`` or ``>``: ``<p"x>`` is an element of its own."""
_COMMENT = rb"<!--(?:-?>|.*?--!?>|.*)"
"""A comment, as the tokenizer ends it (``<!-->`` and ``--!>`` too): the tags in it are
text, and an end tag there closes nothing."""
_CDATA = rb"<!\[CDATA\["
"""In SVG or MathML, text up to ``]]>``; in HTML, a bogus comment up to the first ``>``."""
_BOGUS = rb"<(?:!|\?|/(?![A-Za-z]))[^>]*+(?:>|\Z)"
"""``<!DOCTYPE>``, ``<?x>``, ``</ x>``: a bogus comment, up to the first ``>``; the tags in
it are text (``<!x </div>`` closes nothing)."""
_TAG = re.compile(
    _COMMENT + rb"|(" + _CDATA + rb")|" + _BOGUS + rb"|<(/?)(" + _TAG_NAME + rb")" + _TAG_BODY,
    re.DOTALL,
)
"""A comment or a bogus one (no group), a CDATA section's start (group 1), or a tag: its
slash (group 2) and name (group 3)."""
_RAW_TEXT = frozenset((b"script", b"style", b"textarea", b"title", b"xmp", b"iframe", b"noembed",
                       b"noframes", b"noscript", b"plaintext"))  # fmt: skip
# Elements that never nest (void), close themselves (optional end tags), or that the
# tree builder never nests (<a>): they neither count for depth nor get flattened.
_FLAT = frozenset(
    [
        b"area",
        b"base",
        b"br",
        b"col",
        b"embed",
        b"hr",
        b"img",
        b"input",
        b"link",
        b"meta",
        b"param",
        b"source",
        b"track",
        b"wbr",
        b"keygen",
        b"p",
        b"li",
        b"dt",
        b"dd",
        b"option",
        b"optgroup",
        b"tr",
        b"td",
        b"th",
        b"tbody",
        b"thead",
        b"tfoot",
        b"rb",
        b"rt",
        b"rp",
        b"colgroup",
        b"caption",
        b"a",
    ]
)


_RAW_TEXT_LAST = rb"(?<=[" + bytes(sorted({name[-1] for name in _RAW_TEXT})) + rb"])"
_RAW_TEXT_AFTER = (
    _RAW_TEXT_LAST + rb"(?:" + b"|".join(b"(?<=<%s)" % name for name in sorted(_RAW_TEXT)) + rb")"
)
"""After a tag's name: it is a raw-text element's. The name's last letter is looked at
first (in either case, as the scans ignore case), so most names are turned down by one
test instead of ten: the scan of the large pages of the Python and SQLAlchemy docs
takes 11 to 19% less time."""
_DEPTH_TAGS = (
    _BOGUS + rb"|<(/?" + _TAG_NAME + rb")(?:(?:" + _RAW_TEXT_AFTER + rb")" + _TAG_BODY
    + rb"(?:.*?(?=</\1[" + _WS + rb"/>])|.*)|" + _TAG_BODY + rb")"
)  # fmt: skip
"""A tag as ``name`` or ``/name`` (a bogus comment as ``b""``), as the exact scan reads
them: a raw-text element's start tag is one match with its content, which the exact
scan skips (``<script/>`` too: the tokenizer ignores a slash on an element that is not
void); its end tag is a match of its own."""
_DEPTH_TAG = re.compile(_COMMENT + rb"|" + _DEPTH_TAGS, re.IGNORECASE | re.DOTALL)
"""Comments (as ``b""``) and tags, on a page without <svg> or <math>: a CDATA section is
a bogus comment there."""
_DEPTH_TAG_FOREIGN = re.compile(
    _COMMENT + rb"|" + _CDATA + rb".*?(?:\]\]>|\Z)|" + _DEPTH_TAGS, re.IGNORECASE | re.DOTALL
)
"""The same for a page with <svg> or <math>, where a CDATA section runs to ``]]>``."""


class _DepthSteps(dict[bytes, int]):
    """What a tag (``b"div"``, ``b"/DIV"``) adds to the depth: +1, -1, or 0 for flat ones.
    A dict, so the per-tag lookup stays in C; a page's new names are added once."""

    def __missing__(self, tag: bytes) -> int:
        end = tag.startswith(b"/")
        step = 0 if not tag or tag.lstrip(b"/").lower() in _FLAT else -1 if end else 1
        self[tag] = step
        return step


_FOREIGN = re.compile(rb"<(?:svg|math)[" + _WS + rb"/>]", re.IGNORECASE)
_DEPTH_STEPS = _DepthSteps()
_DEPTH_STEPS_KEPT = 4096


def _nesting_bound(data: bytes) -> int:
    """An upper bound of the depth :func:`_flatten_nesting` would find, computed by the
    regex engine and C iterators rather than a Python loop per tag: most large pages are
    shallow, and the exact scan cost a big page nearly as much as parsing it.

    The depth after each tag is ``S - min(0, min of S so far)``, with ``S`` the running
    sum of the tags' steps (end tags at depth 0 are ignored), so ``max(S) - min(0,
    min(S))`` bounds it. A raw-text element counts as its start and end tags, with its
    content skipped, as the exact scan does; on a page with <svg> or <math> every ``<``
    not read as markup counts one level more (see below).
    """
    if len(_DEPTH_STEPS) > _DEPTH_STEPS_KEPT:  # a page of made-up names keeps none
        _DEPTH_STEPS.clear()
    hidden = 0
    if _FOREIGN.search(data) is None:
        tags = _DEPTH_TAG.findall(data)
    else:
        # In SVG or MathML a <style>, <title> or CDATA section may hold markup, and which
        # mode the tree builder is in at each, no regex can tell: every '<' in them may
        # be a start tag more (their end tags may close nothing, so none is counted).
        # A match starts at each '<' the scan reads as markup: the others (in those, in
        # attribute values, comments or text) are fewer than the '<' not matched.
        tags = _DEPTH_TAG_FOREIGN.findall(data)
        hidden = data.count(b"<") - len(tags)
    sums = list(itertools.accumulate(map(_DEPTH_STEPS.__getitem__, tags)))
    return max(sums, default=0) - min(0, min(sums, default=0)) + hidden


def _limit_nesting(data: bytes, max_depth: int, tags: int | None = None) -> tuple[bytes, int]:
    """Flatten markup nested deeper than ``max_depth``: start tags past it (and as many
    end tags after them) are dropped, their content kept, as Chromium's tree builder
    does past 512. Tree builders pay depth² for deep markup (100,000 nested ``<div>``
    took 49 s), so this bounds the parse; links and text stay.

    Returns:
        The markup to parse, and how many start tags were flattened.
    """
    if (data.count(b"<") if tags is None else tags) <= max(_DEPTH_SCAN_TAGS, max_depth):
        return data, 0
    if _nesting_bound(data) <= max_depth:
        return data, 0
    return _flatten_nesting(data, max_depth)


def _flatten_nesting(data: bytes, max_depth: int) -> tuple[bytes, int]:
    """The exact scan behind :func:`_limit_nesting`, one tag at a time (on UTF-8 markup:
    tag names are ASCII, as the HTML tokenizer reads them)."""
    depth = excess = flattened = 0
    pieces: list[bytes] = []
    start = pos = 0
    foreign = False  # an <svg> or <math> was opened: raw text may be markup from then on
    raw_until = 0  # end tags before this closes nothing (see below)
    while (match := _TAG.search(data, pos)) is not None:
        pos = match.end()
        if match.group(1) is not None:  # CDATA: text in SVG or MathML, else a bogus comment
            close = data.find(b"]]>" if foreign else b">", pos)
            if foreign:  # but maybe markup: as in a <style> there (see below)
                raw_until = max(raw_until, close if close >= 0 else len(data))
            else:
                pos = close + 1 if close >= 0 else len(data)
            continue
        if match.group(3) is None:
            continue  # a comment, or a bogus one
        slash, name = match.group(2), match.group(3).lower()
        # A slash before the '>' closes nothing: the tokenizer ignores it on an element
        # that is not void (<div/> nests, <script/> opens a script). Inside <svg> it
        # does close, so such markup counts deeper than it is (flattened the sooner).
        if name in _FLAT:
            continue
        if slash and match.start() < raw_until:
            continue
        if slash:
            if excess:
                excess -= 1
                pieces.append(data[start : match.start()])
                start = pos
            elif depth:
                depth -= 1
            continue
        if depth >= max_depth:
            excess += 1
            flattened += 1
            pieces.append(data[start : match.start()])
            start = pos
        else:
            depth += 1
        foreign = foreign or name in (b"svg", b"math")
        if name in _RAW_TEXT:  # its content is text: skip to its end tag
            closing = re.compile(rb"</" + name + rb"[" + _WS + rb"/>]", re.IGNORECASE)
            found = closing.search(data, pos)
            end = found.start() if found is not None else len(data)
            if not foreign:
                pos = end
            else:
                # In SVG or MathML, <style> or <title> hold markup (and a <div> there
                # leaves the SVG); which one the tree builder is in, a scan of tags cannot
                # tell. So their tags count as markup, but their end tags close nothing:
                # too deep either way, never too shallow.
                raw_until = max(raw_until, end)
    if not flattened:
        return data, 0
    pieces.append(data[start:])
    return b"".join(pieces), flattened


def _collapse(text: str) -> str:
    return " ".join(text.split())


# --------------------------------------------------------------------------- the fields

_SKIPPED_TEXT_TAGS = ("script", "style", "noscript", "template")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


@dataclass(slots=True)
class _Metas:
    """The <meta name> values, first one per name (robots: all of them)."""

    robots_only: bool = False
    robot_names: tuple[str, ...] = ("robots",)
    """The names whose contents are robots directives: ``robots``, and the crawler's own."""
    keywords: str = ""
    description: str = ""
    summary: str = ""
    robots: list[str] | None = None

    def add(self, name: str | None, content: str | None) -> None:
        if not name or content is None:
            return
        name = name.strip().lower()
        if name in self.robot_names:
            robots = _collapse(content).lower()
            if robots:
                self.robots = [*(self.robots or ()), robots]
        elif self.robots_only:
            return
        elif name in ("keywords", "description", "summary") and not getattr(self, name):
            setattr(self, name, _collapse(content))

    @property
    def robots_text(self) -> str:
        return ", ".join(self.robots or ())


def _page(
    links: tuple[str, ...],
    base_url: str,
    metas: _Metas,
    title: str = "",
    headings: Iterable[str] = (),
    text: str = "",
    *,
    first_cut_link: str = "",
) -> ParsedPage:
    return ParsedPage(
        links=links,
        base_url=base_url,
        title=_collapse(title),
        meta_keywords=metas.keywords,
        meta_description=metas.description or metas.summary,
        headings=tuple(h for h in map(_collapse, headings) if h),
        text=_collapse(text),
        meta_robots=metas.robots_text,
        first_cut_link=first_cut_link,
    )


# --------------------------------------------------------------------------- lexbor

# Foreign elements whose children the tree builder puts back in the HTML namespace.
_HTML_POINTS = {
    "svg": frozenset(("foreignobject", "desc", "title")),
    "math": frozenset(("mi", "mo", "mn", "ms", "mtext")),
}


def _namespace_step(child_ns: str, element: LexborNode) -> tuple[str, str]:
    """The namespace of ``element`` under a parent whose children get ``child_ns``, and the
    namespace its own children get."""
    tag = (element.tag or "").lower()
    if child_ns == "html":
        namespace = tag if tag in ("svg", "math") else "html"
    elif child_ns == "annotation":  # an <svg> under annotation-xml is SVG
        namespace = "svg" if tag == "svg" else "math"
    else:
        namespace = child_ns
    if tag in _HTML_POINTS.get(namespace, ()):
        return namespace, "html"
    if namespace == "math" and tag == "annotation-xml":
        encoding = (element.attributes.get("encoding") or "").strip().lower()
        return namespace, "html" if encoding in HTML_MEDIA_TYPES else "annotation"
    return namespace, namespace


def _lexbor_namespace(node: LexborNode, memo: dict[int, str]) -> str:
    """The namespace ("html", "svg" or "math") the tree builder gave ``node``.

    lexbor's selectors match local names only, so ``a[href]`` also finds SVG and MathML
    ``<a>``, which html5lib's tree keeps apart. Replaying the foreign-content rules from
    the root down (integration points switch back to HTML) recovers the namespace;
    ``memo`` (element id -> its children's namespace) makes a page's replays linear.
    """
    chain = []
    child_ns = "html"
    parent = node.parent
    while parent is not None:
        known = memo.get(parent.mem_id)
        if known is not None:
            child_ns = known
            break
        chain.append(parent)
        parent = parent.parent
    for element in reversed(chain):
        child_ns = memo[element.mem_id] = _namespace_step(child_ns, element)[1]
    return _namespace_step(child_ns, node)[0]


_MISSING = "\x00 no such attribute"
"""What ``attrs.get`` gives for an attribute the element lacks (None is the value of a
bare ``<a href>``, which is a link), told apart by identity: a string, so the values
need no ``cast`` (a Python call per link)."""
_LINK_TAGS = ("a", "base", "meta", "svg", "math")
"""The elements a links-only parse reads (<svg> and <math> for their namespaces)."""
_FULL_TAGS = (*_LINK_TAGS, "title", *_SKIPPED_TEXT_TAGS, *_HEADINGS)
_SELECTORS = {False: ", ".join(_LINK_TAGS), True: ", ".join(_FULL_TAGS)}
"""One selector of plain names for every element a parse reads: one css() walk tests
each node against the names in C, in less than half the time of a tags() walk a name
(each tags() call walks the whole tree again)."""
_GROUPS = {**dict.fromkeys(_SKIPPED_TEXT_TAGS, "skipped"), **dict.fromkeys(_HEADINGS, "headings")}
"""The elements read together, in document order: other names are read by name."""
_DROPPED_WITH = ", ".join((*_SKIPPED_TEXT_TAGS, *_HEADINGS))
"""The elements found by the walk that a skipped element may hold, freed with it."""


def _attribute_values(nodes: Iterable[LexborNode], name: str) -> list[str]:
    """The value of attribute ``name`` of each node that has it ("" when bare), as
    ``tag[name]`` selects them; ``attrs`` reads one attribute (``attributes`` would
    build a dict of them all, per node)."""
    values = [node.attrs.get(name, _MISSING) for node in nodes]
    return [value or "" for value in values if value is not _MISSING]


def _drop_skipped_text(skipped: Iterable[LexborNode]) -> set[int]:
    """Remove the elements whose text is not the page's (scripts, styles, …), given in
    document order; the ids of the found elements that went with them.

    An element inside another one (markup in a <noscript>, or in an SVG <script>) is
    freed with it, so each one's own such descendants are noted before it goes, and
    skipped when their turn comes (as are headings inside them: their text is not the
    page's either)."""
    gone: set[int] = set()
    for node in skipped:
        if node.mem_id in gone:
            continue
        # Also the node itself; most are a <script> or <style> with one text child.
        gone.update(inner.mem_id for inner in node.css(_DROPPED_WITH))
        node.decompose()
    return gone


def _parse_lexbor(data: bytes, page_url: str, full: bool, max_links: int | None,
                  robot_names: tuple[str, ...]) -> ParsedPage:  # fmt: skip
    tree = LexborHTMLParser(data)  # UTF-8 bytes: read as they are, without a copy
    found: defaultdict[str, list[LexborNode]] = defaultdict(list)
    for node in tree.css(_SELECTORS[full]):  # in document order
        tag = node.tag or ""  # an element's, never None (no cast: a Python call per node)
        found[_GROUPS.get(tag, tag)].append(node)
    foreign_roots = [*found["svg"], *found["math"]]
    """The <svg> and <math> elements: only nodes inside them can be foreign."""
    memo: dict[int, str] = {}

    def html_only(selector: str, nodes: list[LexborNode]) -> list[LexborNode]:
        if not foreign_roots:  # most pages
            return nodes
        # The subtrees of the <svg>/<math> elements are walked, not the whole tree
        # again for each selector: many sites have an <svg> icon on every page.
        suspects = {node.mem_id for root in foreign_roots for node in root.css(selector)}
        if not suspects:
            return nodes
        return [
            node
            for node in nodes
            if node.mem_id not in suspects or _lexbor_namespace(node, memo) == "html"
        ]

    # A node without the attribute is no suspect of html_only's: it is kept, then left out.
    base_href = next(iter(_attribute_values(html_only("base[href]", found["base"]), "href")), None)
    base_url = _effective_base(page_url, base_href)
    hrefs = _attribute_values(html_only("a[href]", found["a"]), "href")
    links, cut = _resolve_links(base_url, hrefs, max_links)

    metas = _Metas(robots_only=not full, robot_names=robot_names)
    for node in found["meta"]:
        attributes = node.attrs
        metas.add(attributes.get("name"), attributes.get("content"))
    if not full:
        return _page(links, base_url, metas, first_cut_link=cut)

    title = next(iter(html_only("title", found["title"])), None)
    title_text = title.text(deep=True) if title else ""
    # Decomposing is cheaper than walking the tree in Python to skip these subtrees.
    gone = _drop_skipped_text(found["skipped"])
    headings = [
        node.text(deep=True, separator=" ") for node in found["headings"] if node.mem_id not in gone
    ]
    body = tree.body
    body_text = body.text(deep=True, separator=" ") if body is not None else ""
    return _page(links, base_url, metas, title_text, headings, body_text, first_cut_link=cut)


# --------------------------------------------------------------------------- html5lib


@functools.cache
def _html5lib_parser_factory() -> Callable[[], Any]:
    """html5lib is imported on first use: a crawl on lexbor never pays its memory."""
    import html5lib  # type: ignore[import-untyped, unused-ignore]

    builder = html5lib.getTreeBuilder("etree")
    return lambda: html5lib.HTMLParser(tree=builder, namespaceHTMLElements=False)


def _local_name(tag: object) -> str | None:
    """The tag of an element without its namespace; None for comments."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else None


def _etree_text(root: Element) -> str:
    """Text under ``root`` joined by spaces (as lexbor's ``text(separator=" ")``)."""
    parts: list[str] = []
    # An explicit stack: deeply nested garbage must not hit the recursion limit.
    stack: list[Element | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        if _local_name(item.tag) in (None, *_SKIPPED_TEXT_TAGS):
            continue  # a comment or an invisible element; its tail was queued by the parent
        if item.text:
            parts.append(item.text)
        for child in reversed(item):
            if child.tail:
                stack.append(child.tail)
            stack.append(child)
    return " ".join(parts)


def _html5lib_tree(text: str) -> Element:
    """The html5lib tree of ``text``, <html> as root and HTML elements without a namespace."""
    parser = _html5lib_parser_factory()()
    try:
        parser.parse(text)
    except AssertionError:
        # html5lib 1.1 trips its own asserts on a few malformed inputs (e.g. EOF after
        # "<table><svg><html>"), usually once the tree is complete: keep what it built.
        logger.debug("html5lib assertion while parsing; using the partial tree")
    root: Element = parser.tree.getDocument()
    return root


def _parse_html5lib(data: bytes, page_url: str, full: bool, max_links: int | None,
                    robot_names: tuple[str, ...]) -> ParsedPage:  # fmt: skip
    root = _html5lib_tree(data.decode("utf-8", "replace"))
    # html5lib keeps <template> contents in the tree; lexbor (and browsers) keep them out.
    in_template = {id(node) for tpl in root.iter("template") for node in tpl.iter()}

    def live(tag: str) -> Iterator[Element]:
        return (node for node in root.iter(tag) if id(node) not in in_template)

    base = next((node for node in live("base") if "href" in node.attrib), None)
    base_url = _effective_base(page_url, base.get("href") if base is not None else None)
    hrefs = (a.get("href", "") for a in live("a") if "href" in a.attrib)
    links, cut = _resolve_links(base_url, hrefs, max_links)

    metas = _Metas(robots_only=not full, robot_names=robot_names)
    for node in live("meta"):
        metas.add(node.get("name"), node.get("content"))
    if not full:
        return _page(links, base_url, metas, first_cut_link=cut)

    title = next(live("title"), None)
    title_text = "".join(title.itertext()) if title is not None else ""
    # lexbor drops these subtrees (in any namespace) before it looks for headings.
    hidden = {
        id(node)
        for top in root.iter()
        if _local_name(top.tag) in _SKIPPED_TEXT_TAGS
        for node in top.iter()
    }
    headings = [_etree_text(h) for h in root.iter() if h.tag in _HEADINGS and id(h) not in hidden]
    body = root.find("body")
    body_text = _etree_text(body) if body is not None else ""
    return _page(links, base_url, metas, title_text, headings, body_text, first_cut_link=cut)


# --------------------------------------------------------------------------- entry point

_BACKENDS: dict[str, Callable[[bytes, str, bool, int | None, tuple[str, ...]], ParsedPage]] = {
    "lexbor": _parse_lexbor,
    "html5lib": _parse_html5lib,
}


def parse_html(
    body: bytes,
    page_url: str,
    content_type: str | None = None,
    *,
    parser: str = "lexbor",
    full: bool = False,
    max_links: int | None = None,
    max_depth: int | None = None,
    max_tags: int | None = None,
    robots_name: str = "",
) -> ParsedPage:
    """Parse a page once, with the backend ``parser`` names.

    Args:
        body: the raw response body; its charset is found as browsers find it
            (:func:`rccrawler.web.encoding.html_utf8`).
        page_url: the URL the page was fetched from (after redirects).
        content_type: the Content-Type header value, for its charset.
        parser: one of :data:`PARSERS`.
        full: False fills only ``links``, ``base_url`` and ``meta_robots`` (the fast path
            for the web-graph crawl); True also fills the search fields.
        max_links: keep at most this many links (``crawl.max_links_per_page``); None = all.
        max_depth: flatten markup nested deeper (``crawl.max_html_depth``); None = no limit.
        max_tags: parse markup up to this many ``<`` (``crawl.max_html_tags``); None = all.
        robots_name: a crawler's name (its product token): ``<meta name=NAME>`` then
            counts as ``<meta name=robots>`` (as Google reads ``<meta name=googlebot>``).

    Returns:
        The page's :class:`ParsedPage`.

    Raises:
        ValueError: for an unknown ``parser``.
    """
    try:
        backend = _BACKENDS[parser]
    except KeyError:
        raise ValueError(f"unknown HTML parser {parser!r}; expected one of {PARSERS}") from None
    data = _defuse_nuls(html_utf8(body, content_type))
    tags = data.count(b"<")  # once: every budget first asks whether it has anything to do
    flattened = 0
    cut_href = ""
    cuts = []
    if max_links is not None:
        data, cut_href = _limit_anchors(data, max_links, tags)
        if cut_href:
            cuts.append(f"markup after {ANCHORS_PER_LINK * max_links} <a> tags left out")
            tags = data.count(b"<")
    tags_cut = _limit_tags(data, max_tags, tags) if max_tags is not None else None
    if tags_cut is not None:
        data, first_href = tags_cut
        cut_href = cut_href or first_href
        cuts.append(f"markup after {max_tags} tags left out")
        tags = data.count(b"<")
    if max_depth is not None:
        data, flattened = _limit_nesting(data, max_depth, tags)
    robot_names = ("robots", robots_name.lower()) if robots_name else ("robots",)
    page = backend(data, page_url, full, max_links, robot_names)
    if page.first_cut_link:
        cuts.append(f"links over {max_links} left out, from {page.first_cut_link}")
    elif cut_href:
        # The parse kept max_links or fewer distinct links; the cut markup began here.
        first = resolve_link(page.base_url, _clean_href(cut_href)) or ""
        page = dataclasses.replace(page, first_cut_link=first)
    if flattened:
        cuts.append(f"{flattened} elements nested deeper than {max_depth} flattened")
    return dataclasses.replace(page, truncated="; ".join(cuts)) if cuts else page
