"""robots.txt rules (RFC 9309): parse a file once per host, then answer "may we fetch this URL?".

The module is pure: it does no I/O and imports from rccrawler only the canonical
percent-escape of the URL rules (``web/urls.py``, pure as well), so the fetching code
decides *when* to read robots.txt and this module decides *what it means*.

Protego is deliberately not used for parsing or matching. Its behaviour differs from
RFC 9309 where this crawler must be exact:

* group selection: a group for ``rc`` also applies to ``rccrawler`` (it matches a token
  prefix), and ``User-agent: *bot`` is read as ``bot``;
* ``Disallow: /a$`` also adds a rule for the literal path ``/a$``, and ``Allow: /x/index.html``
  silently allows ``/x/`` too;
* percent-encoding: ``%3D`` is decoded to ``=`` although ``=`` is a reserved character;
* lines without a colon are read as rules whatever their shape; we follow Google's parser,
  which accepts ``Disallow /x`` (exactly two words) and nothing looser;
* its rule sets are private API, so wrapping them would break on any Protego upgrade.

Percent-encoding (RFC 9309 §2.2.2), applied in the same way to patterns and to URLs:
escapes of *unreserved* characters (``A-Z a-z 0-9 - . _ ~``) are decoded, so
``/foo/%62ar`` equals ``/foo/bar``; escapes of *reserved* characters are kept, so ``%2F``
stays distinct from ``/`` and ``%3F`` from ``?`` (decoding them would change which
resource the URL names); every other octet (non-ASCII characters as UTF-8, spaces,
controls, a stray ``%``) is percent-encoded; hex digits are upper-cased.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from rccrawler.web.urls import (
    SCHEME,
    SUB_DELIMS_CLASS,
    UNRESERVED_CLASS,
    canonical_escape,
    escape_pattern,
)

__all__ = [
    "MAX_ROBOTS_BYTES",
    "RobotsRules",
    "cut_robots_body",
    "meta_directives",
    "product_token",
    "robots_tag_directives",
]

MAX_ROBOTS_BYTES = 500 * 1024
"""RFC 9309 §2.5: crawlers must parse at least 500 KiB; we parse exactly that much."""

_URL_CACHE_SIZE = 4_096

# Directive names, lower-cased. Besides the RFC names we accept the misspellings that
# Google's parser accepts: obeying a typo is the polite reading of a site's intent.
_SPELLINGS = {
    "user-agent": ("user-agent", "useragent", "user agent"),
    "allow": ("allow",),
    "disallow": ("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"),
    "crawl-delay": ("crawl-delay", "crawl delay"),
    "sitemap": ("sitemap", "site-map"),
}
_DIRECTIVE = {spelling: name for name, spellings in _SPELLINGS.items() for spelling in spellings}
"""Each accepted spelling of a directive → its RFC name."""

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
_GLOBAL_AGENT = re.compile(r"\*(?:\s|$)")
_DELAY = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)")
_MATCH_ALL = re.compile(r"\**/?\**")
# Both parts are optional: removing the match leaves the path and query.
_SCHEME_AND_AUTHORITY = re.compile(rf"\A(?:{SCHEME}:)?(?://[^/?]*)?")

# Unreserved + reserved (RFC 3986 §2.2): text made only of these, with no "%", is already
# in normal form, which is the common case and skips the substitution below.
_URI_CHARACTERS = UNRESERVED_CLASS + SUB_DELIMS_CLASS + r":/?#\[\]@"
_NORMAL = re.compile(f"[{_URI_CHARACTERS}]*")
_TO_NORMALIZE = escape_pattern(_URI_CHARACTERS)


def cut_robots_body(body: bytes) -> bytes:
    """The part of a robots.txt body that is read: at most :data:`MAX_ROBOTS_BYTES`.

    The line the cut goes through is dropped: "Allow: /public" cut to "Allow: /pub"
    would allow more than the site meant.
    """
    if len(body) <= MAX_ROBOTS_BYTES:
        return body
    body = body[:MAX_ROBOTS_BYTES]
    return body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent string, used to pick the robots.txt group.

    ``'rccrawler/0.1 (+https://x/bot)'`` -> ``'rccrawler'``: the leading run of letters,
    digits, ``_`` and ``-`` (RFC 9309 §2.2.1). The RFC's identifier has no digits; we keep
    them so that a token like ``bot2`` is not cut short. An agent with no such prefix
    gives ``''``, which only the ``*`` group applies to.
    """
    match = _TOKEN.match(user_agent.strip())
    return match.group() if match else ""


_META_SEPARATORS = re.compile(r"[\s,]+")


def meta_directives(meta_robots: str) -> frozenset[str]:
    """The directives of a page's ``<meta name="robots">`` contents (as
    ``ParsedPage.meta_robots`` holds them, lowercased): ``none`` stands for both
    ``noindex`` and ``nofollow``, as the robots meta tag's spec (Google's) defines it.

    A crawl follows no link of a ``nofollow`` page (``crawl.obey_robots``), and the
    search task indexes no ``noindex`` page. Not cached: a page's tag can be as long
    as the page, and most pages have none.
    """
    if not meta_robots:
        return frozenset()
    directives = set(_META_SEPARATORS.split(meta_robots.strip())) - {""}
    if "none" in directives:
        directives |= {"noindex", "nofollow"}
    return frozenset(directives)


_COLON_DIRECTIVES = frozenset(
    ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview")
)
"""Directives written ``name: value``, which an X-Robots-Tag value may start with."""


def robots_tag_directives(values: Sequence[str], token: str) -> frozenset[str]:
    """The directives of a response's ``X-Robots-Tag`` headers that apply to the crawler
    whose product token is ``token``: a value for every crawler (``noindex, nofollow``)
    or one naming it (``rccrawler: nofollow``); one naming another crawler
    (``otherbot: noindex``) does not. Read as :func:`meta_directives` reads a tag.
    """
    ours: list[str] = []
    for value in values:
        name, colon, rest = value.partition(":")
        name = name.strip().lower()
        if (
            colon
            and name
            and not any(c in name for c in ", \t")
            and (name not in _COLON_DIRECTIVES)
        ):
            if name == token.lower():
                ours.append(rest)
            continue
        ours.append(value)
    return meta_directives(", ".join(ours).lower()) if ours else frozenset()


def _normalize(text: str) -> str:
    """Put percent-encoding in the one form both patterns and URLs are compared in."""
    if not _NORMAL.fullmatch(text):
        text = _TO_NORMALIZE.sub(canonical_escape, text)
    path, question, query = text.partition("?")
    if question and _QUERY_DELIMS.search(query):
        # In a query, ":" "/" "?" "@" are data, and a URL may carry them raw or escaped
        # (RFC 9309 §2.2.2's own example: "?baz=https://foo.bar" is
        # "?baz=https%3A%2F%2Ffoo.bar"); both sides take the escaped form.
        text = path + question + _QUERY_DELIMS.sub(_escape_delim, query)
    return text


_QUERY_DELIMS = re.compile(r"[:/?@]")
_LITERAL_SPECIALS = re.compile(r"%2A|%24")


def _escape_delim(match: re.Match[str]) -> str:
    return f"%{ord(match.group()):02X}"


def _unescape_special(match: re.Match[str]) -> str:
    return "*" if match.group() == "%2A" else "$"


@lru_cache(maxsize=_URL_CACHE_SIZE)
def _request_path(url: str) -> str:
    """The normalized path and query that rules match against (scheme, host, fragment dropped).

    Cached across hosts because the same links turn up on page after page.
    """
    path = url.partition("#")[0]
    if not path.startswith("/") or path.startswith("//"):
        # A regex rather than urlsplit(), which raises on malformed hosts like "http://[x".
        path = _SCHEME_AND_AUTHORITY.sub("", path, count=1)
        if not path.startswith("/"):
            path = f"/{path}"
    # A URL's "*" and "$" are plain characters, escaped or not (RFC 9309 §2.2.3).
    return _LITERAL_SPECIALS.sub(_unescape_special, _normalize(path))


@dataclass(frozen=True, slots=True)
class _Rule:
    """One compiled Allow or Disallow line."""

    allow: bool
    priority: int
    """Length in octets of the normalized pattern: the longest (most specific) match wins."""
    head: str
    """The literal text before the first ``*``; the whole pattern when there is none."""
    middle: tuple[str, ...]
    tail: str
    wildcard: bool
    anchored: bool
    """The pattern ended with ``$``: the URL must end where the pattern does."""

    @classmethod
    def compile(cls, pattern: str, *, allow: bool) -> _Rule:
        normalized = _normalize(pattern)
        # Only a final "$" anchors; elsewhere it is an ordinary (reserved) character.
        anchored = normalized.endswith("$")
        body = normalized[:-1] if anchored else normalized
        # Split on the wildcards first: "%2A" and "%24" then stand for a literal "*"
        # and "$" in the path (RFC 9309 §2.2.3).
        parts = [_LITERAL_SPECIALS.sub(_unescape_special, part) for part in body.split("*")]
        return cls(
            allow=allow,
            priority=len(normalized),
            head=parts[0],
            middle=tuple(parts[1:-1]),
            tail=parts[-1] if len(parts) > 1 else "",
            wildcard=len(parts) > 1,
            anchored=anchored,
        )

    def matches(self, path: str) -> bool:
        """Match without regexes: finding each literal piece as early as possible is
        exact for ``*`` patterns, and linear where a backtracking regex is not."""
        if not self.wildcard:
            return path == self.head if self.anchored else path.startswith(self.head)
        if not path.startswith(self.head):
            return False
        pos = len(self.head)
        for part in self.middle:
            found = path.find(part, pos)
            if found < 0:
                return False
            pos = found + len(part)
        if self.anchored:
            return len(path) - len(self.tail) >= pos and path.endswith(self.tail)
        return path.find(self.tail, pos) >= 0


@dataclass(slots=True)
class _Group:
    """A group while the file is being read: its agents, then its lines."""

    agents: set[str]
    rules: list[tuple[bool, str]]
    delays: list[float]


def _parse_delay(value: str) -> float | None:
    # A strict pattern: float() would also accept "nan", "inf" and "1_0".
    if not _DELAY.fullmatch(value):
        return None
    delay = float(value)
    return delay if math.isfinite(delay) else None


def _split_line(line: str) -> tuple[str, str] | None:
    line = line.partition("#")[0]
    key, colon, value = line.partition(":")
    if not colon:
        # Google's parser, which most sites are written against, accepts a missing colon
        # when the line is exactly two words ("Disallow /x/"); so do we.
        words = line.split()
        if len(words) != 2:
            return None
        key, value = words
    return key.strip().lower(), value.strip()


def _read_groups(text: str) -> tuple[list[_Group], list[str]]:
    """Split robots.txt into groups (RFC 9309 §2.1) and site-wide sitemap URLs."""
    groups: list[_Group] = []
    sitemaps: list[str] = []
    current: _Group | None = None
    in_body = False  # a rule was seen, so the next user-agent line starts a new group
    for line in _LINE_BREAK.split(text.removeprefix("\ufeff")):
        split = _split_line(line)
        if split is None:
            continue
        key, value = split
        directive = _DIRECTIVE.get(key)
        if directive == "user-agent":
            if current is None or in_body:
                current = _Group(agents=set(), rules=[], delays=[])
                groups.append(current)
                in_body = False
            if _GLOBAL_AGENT.match(value):
                current.agents.add("*")
            elif token := product_token(value):
                current.agents.add(token.lower())
        elif directive in ("allow", "disallow"):
            if current is None:
                continue  # a rule before any user-agent line belongs to no group
            in_body = True
            if value:  # an empty pattern matches nothing (RFC 9309 §2.2.2)
                current.rules.append((directive == "allow", value))
        elif directive == "crawl-delay":
            if current is None:
                continue
            in_body = True
            delay = _parse_delay(value)
            if delay is not None:
                current.delays.append(delay)
        elif directive == "sitemap" and value and value not in sitemaps:
            # Sitemaps are not group members (RFC 9309 §2.2.4), so grouping is untouched.
            sitemaps.append(value)
    return groups, sitemaps


class RobotsRules:
    """Parsed robots.txt rules for one host and one product token.

    Immutable, and thread-safe to call: crawler threads share one instance per host.
    """

    __slots__ = ("_crawl_delay", "_disallows_everything", "_rules", "_sitemaps")

    def __init__(
        self,
        rules: tuple[_Rule, ...] = (),
        *,
        crawl_delay: float | None = None,
        sitemaps: tuple[str, ...] = (),
        disallows_everything: bool = False,
    ) -> None:
        # Most specific first and Allow first among equals, so the first match decides.
        self._rules = tuple(sorted(rules, key=lambda rule: (-rule.priority, not rule.allow)))
        self._crawl_delay = crawl_delay
        self._sitemaps = sitemaps
        self._disallows_everything = disallows_everything

    @classmethod
    def parse(cls, text: str, user_agent: str) -> RobotsRules:
        """Read robots.txt text and keep only the groups that apply to ``user_agent``.

        Args:
            text: the file, decoded; a leading BOM and any line-ending style are accepted.
                Only its first 500 KiB (as UTF-8) are read, as in :meth:`from_response`.
            user_agent: our product token, or a full User-Agent it is taken from.
        """
        if len(text) > MAX_ROBOTS_BYTES // 4:  # may be over the cut once encoded
            text = cut_robots_body(text.encode("utf-8", "surrogatepass")).decode(
                "utf-8", errors="replace"
            )
        groups, sitemaps = _read_groups(text)
        token = product_token(user_agent).lower()
        chosen = [group for group in groups if token and token in group.agents]
        if not chosen:  # the "*" group only applies when no group names us (§2.2.1)
            chosen = [group for group in groups if "*" in group.agents]
        rules = tuple(
            _Rule.compile(pattern, allow=allow)
            for group in chosen
            for allow, pattern in group.rules
        )
        delays = [delay for group in chosen for delay in group.delays]
        everything = not any(rule.allow for rule in rules) and any(
            _MATCH_ALL.fullmatch(pattern) for group in chosen for _, pattern in group.rules
        )
        return cls(
            rules,
            # Merged groups may each set a delay: the largest is the polite reading.
            crawl_delay=max(delays) if delays else None,
            sitemaps=tuple(sitemaps),
            disallows_everything=everything,
        )

    @classmethod
    def allow_all(cls) -> RobotsRules:
        """No restrictions (no robots.txt, or a 4xx answer)."""
        return cls()

    @classmethod
    def disallow_all(cls) -> RobotsRules:
        """Full restriction (robots.txt unreachable, or a 5xx answer)."""
        return cls((_Rule.compile("/", allow=False),), disallows_everything=True)

    @classmethod
    def from_response(cls, status: int | None, body: bytes, user_agent: str) -> RobotsRules:
        """RFC 9309 §2.3.1: status None (unreachable) or 5xx -> disallow_all; 4xx -> allow_all;
        2xx -> parse(body decoded as UTF-8 with errors='replace', BOM stripped); anything else
        (3xx left over after redirects were followed) -> allow_all. Bodies larger than 500 KiB
        are cut at 500 KiB (RFC 9309 §2.5), at the last line break before the cut."""
        if status is None or 500 <= status <= 599:
            return cls.disallow_all()
        if not 200 <= status <= 299:
            return cls.allow_all()
        return cls.parse(cut_robots_body(body).decode("utf-8", errors="replace"), user_agent)

    def allowed(self, url: str) -> bool:
        """Whether the URL (absolute, or a path+query) may be fetched. '/robots.txt' is always
        allowed.

        Not cached per URL: each page is downloaded once, and the parsing threads keep
        their link decisions in one bounded memo (``CrawlContext.link_decisions``). A
        cache here grew by a URL per page done (issue 43); the rules are prefix tests.
        """
        if not self._rules:
            return True
        path = _request_path(url)
        if path.partition("?")[0] == "/robots.txt":  # RFC 9309 §2.2.2: implicitly allowed
            return True
        for rule in self._rules:
            if rule.matches(path):
                return rule.allow
        return True

    @property
    def crawl_delay(self) -> float | None:
        """Crawl-delay (seconds, float allowed) of the matched group, else None."""
        return self._crawl_delay

    @property
    def sitemaps(self) -> tuple[str, ...]:
        """Sitemap URLs; site-wide, so listed whatever group was matched."""
        return self._sitemaps

    @property
    def disallows_everything(self) -> bool:
        """True for disallow_all() (used to mark a host as not crawlable), and for parsed
        rules that are a bare ``Disallow: /`` (or ``/*``, ``*``) with no Allow at all."""
        return self._disallows_everything

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(rules={len(self._rules)}, crawl_delay={self._crawl_delay!r}, "
            f"disallows_everything={self._disallows_everything})"
        )
