"""The records that threads exchange through the DataManager: HostData, PageData, PageArc."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, NewType

PageId = NewType("PageId", int)


class PageState(StrEnum):
    """Where a page is in its life; the queues of a SQL workload."""

    WAITING = "waiting"
    """Known, not fetched yet (the frontier)."""
    RUNNING = "running"
    """Leased by a DownloadingThread."""
    DOWNLOADED = "downloaded"
    """Body stored, waiting for a ParsingThread."""
    PARSING = "parsing"
    """Leased by a ParsingThread."""
    DONE = "done"
    """Finished: a node, a duplicate, or a redirect alias."""
    ERROR = "error"
    """Finished with an error (HTTP 4xx/5xx, timeout, redirect loop...)."""
    SKIPPED = "skipped"
    """Finished without being a node (not HTML, robots, redirect off the site...)."""
    UNREACHED = "unreached"
    """Known from an earlier run of the crawl and not reached yet in this one (a refresh,
    SPEC §10): a link from a page of this run makes it waiting again; one that no link
    reaches by the end of the run is removed."""


class PageChange(StrEnum):
    """What became of a page since the last run of the crawl (SPEC §10, ``H.changes.csv``)."""

    ADDED = "added"
    """A node now, and not one in the last run (new, or back, or no longer an error)."""
    REMOVED = "removed"
    """A node in the last run, and not one now: not reached any more, an error (404,
    410...), or no longer HTML or allowed."""
    CHANGED = "changed"
    """A node in both runs, with another body."""
    UNCHANGED = "unchanged"
    """A node in both runs, with the same body (or a ``304 Not Modified``)."""
    REDIRECTED = "redirected"
    """A node in the last run whose URL now redirects (to a page of the site, or to a new
    URL that is then a page of its own)."""


class SkipReason(StrEnum):
    """Why a URL that was found was not crawled (SPEC §8, ``H.skipped.csv``)."""

    EXTERNAL = "external"
    SUBDOMAIN = "subdomain"
    SCHEME = "scheme"
    ROBOTS = "robots"
    DEPTH = "depth"
    INCLUDE = "include"
    """Matches no ``crawl.include`` string or no ``crawl.include_regex`` pattern."""
    EXCLUDE = "exclude"
    """Contains a ``crawl.exclude`` string or matches a ``crawl.exclude_regex`` pattern."""
    SITEMAP_OUTSIDE = "sitemap_outside"
    """Listed in a site's sitemap but not on that site (another host, a subdomain...)."""
    BUDGET = "budget"
    NOT_HTML = "not_html"
    DUPLICATE = "duplicate"
    REDIRECT_LOOP = "redirect_loop"
    ERROR = "error"
    TRUNCATED = "truncated"
    """The first link left out of a page over ``crawl.max_links_per_page`` (and all after it)."""
    TOO_LONG = "too_long"
    """Longer than ``crawl.max_url_length``."""
    TOO_MANY_QUERIES = "too_many_queries"
    """One more query string of a path that already has ``crawl.max_query_variants``."""
    WAITING = "waiting"
    """Queued but not fetched: the crawl was stopped (or its finisher ended it) before it
    came to the page; a resumed run fetches it."""
    NOFOLLOW = "nofollow"
    """Found only on pages that say ``nofollow`` (or ``none``) in a ``<meta name="robots">``
    tag or an ``X-Robots-Tag`` header, with ``crawl.obey_robots``: such a page's links are
    arcs to pages found by other paths, never a reason to fetch."""


class RobotsState(StrEnum):
    """Whether a host's robots.txt is known yet."""

    PENDING = "pending"
    FETCHING = "fetching"
    READY = "ready"


@dataclass(slots=True, kw_only=True)
class HostData:
    """One site: its politeness parameters and robots rules."""

    host: str
    """host[:port] as in the graph (lowercase, default port removed)."""
    scheme: str = "http"
    base: str = ""
    """The start URL of the site."""
    crawl_delay: float = 1.0
    """Seconds between two requests to this host (robots Crawl-delay wins when larger)."""
    min_crawl_delay: float = 0.0
    """The politeness floor: crawl_delay_ms, or a larger robots Crawl-delay. crawl_delay
    starts there; auto-throttle moves it up and down but never below."""
    max_downloads_at_time: int = 2
    robots_state: RobotsState = RobotsState.PENDING
    robots_status: int | None = None
    """HTTP status of robots.txt; None when unreachable or not fetched."""
    robots_text: str = ""
    next_fetch_at: float = 0.0
    """Wall-clock time (time.time()) before which no request may start."""
    retry_after_until: float = 0.0
    """Wall-clock time before which the host asked us (429/503) to wait."""
    in_flight: int = 0
    stop_reason: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0


@dataclass(slots=True, kw_only=True)
class PageData:
    """One URL of a site, from discovery to its final state."""

    id: PageId
    host: str
    url: str
    """The URL as first found (fragment dropped): what is requested."""
    normalized_url: str
    """The page identity (SPEC §6); the url in the output."""
    id_from: PageId | None = None
    level: int = 0
    out_degree: int = 0
    state: PageState = PageState.WAITING
    downloaded: bool = False
    parsed: bool = False
    http_status: int | None = None
    content_type: str = ""
    content_hash: str = ""
    error_code: str = ""
    replace_id: PageId | None = None
    """Id of the page this one duplicates (same body, or a redirect to a known page)."""
    download_attempts: int = 0
    redirect_target: str = ""
    redirect_hops: int = 0
    bytes: int = 0
    truncated: bool = False
    referer: str = ""
    """The URL of the page where this link was found (for the Referer header)."""
    etag: str = ""
    """The ``ETag`` of the page's last 200 answer ('' when it sent none): a refresh asks
    with ``If-None-Match``."""
    last_modified: str = ""
    """The ``Last-Modified`` of the page's last 200 answer: a refresh asks with
    ``If-Modified-Since``."""
    nofollow: bool = False
    """Its last parse said ``nofollow``: a refresh that finds it unchanged does not follow
    its links either."""
    prev_run: int = 0
    """The last run before this one that reached the page (0: none)."""
    prev_url: str = ""
    """The ``prev_`` fields: the page as the last run left it (its normalized URL, state,
    status, error and body hash; the state is ``unreached`` when that run did not reach
    it, '' before any refresh). See :func:`rccrawler.policy.last_visit`."""
    prev_state: str = ""
    prev_http_status: int | None = None
    prev_error_code: str = ""
    prev_hash: str = ""
    robots_tags: tuple[str, ...] = field(default=(), metadata={"stored": False})
    """The ``X-Robots-Tag`` values of its response, for its parse: not stored, as its
    body is not (a page whose parse was lost is fetched again)."""


class PageArc(NamedTuple):
    """A link from one page to another, as the DataManager gives arcs out.

    The design card's arc id is the pair itself: a site has one arc per (from, to), so
    the storage keys arcs by it and a pair unpacks as ``for source, target in arcs``.
    """

    from_id: PageId
    to_id: PageId


@dataclass(frozen=True, slots=True)
class FoundLink:
    """An internal link a ParsingThread found: an arc, and a new page unless skip_if_new."""

    url: str
    """As found, absolute, fragment dropped (what would be requested)."""
    normalized_url: str
    skip_if_new: SkipReason | None = None
    """Why not to queue it when it is not a page yet (depth, nofollow): the arc still
    counts if it is, or once another path makes it one."""


@dataclass(frozen=True, slots=True)
class SkippedLink:
    """A link a ParsingThread found and will not crawl, with why."""

    url: str
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """One request as sent and its response head as received, for archives (WARC).

    The body of the matching DownloadResult is the *decoded* payload (gzip, br...
    undone), while ``response_headers`` still name the encoding it came with: an
    archive says so (see ``plugins/archive``).
    """

    url: str
    method: str
    target: str
    """The origin-form request target (``/path?query``)."""
    request_headers: tuple[tuple[str, str], ...]
    """As sent, ``Host`` included (cookies and ``crawl.headers`` too)."""
    http_version: str
    """``HTTP/1.1`` or ``HTTP/1.0``."""
    reason: str
    response_headers: tuple[tuple[str, str], ...]
    """In the order received, repeated names kept, original spelling."""


@dataclass(frozen=True, slots=True)
class DownloadResult:
    """What a DownloadingThread learned about a page.

    Exactly one of these shapes: a final response (status + headers + body), a
    redirect (status 3xx + location), or a transport error (error set).
    """

    status: int | None = None
    content_type: str = ""
    body: bytes = b""
    location: str = ""
    """Absolute redirect target, for 3xx."""
    error: str = ""
    """A transport error name (timeout, connection, decode, tls, too_many_redirects)."""
    retryable: bool = False
    retry_after: float | None = None
    """Seconds the host asked us to wait (429/503 Retry-After)."""
    truncated: bool = False
    elapsed: float = 0.0
    """Seconds from sending the request to the end of the body (the response latency)."""
    throttle: bool = False
    """Adapt the host's crawl delay to ``elapsed`` (``crawl.auto_throttle``)."""
    exchange: HttpExchange | None = None
    """The request and response heads, when a response came (for archiving tasks)."""
    robots_tags: tuple[str, ...] = ()
    """The response's ``X-Robots-Tag`` header values, as sent."""
    etag: str = ""
    """The response's ``ETag`` (a validator for the next run's conditional request)."""
    last_modified: str = ""
    """The response's ``Last-Modified``."""


@dataclass(frozen=True, slots=True)
class CrawlRun:
    """One run of a crawl: the first, or a refresh (SPEC §10)."""

    run: int
    """Numbered from 1 (the first crawl)."""
    kind: str
    """``crawl`` or ``refresh``."""
    started_at: float
    """Wall-clock time (time.time()) when it began."""
    finished_at: float = 0.0
    """When it ended, every site done (0: under way, or stopped)."""
    changes: str = ""
    """What changed in it, per site (JSON: host → change → pages), once finished."""


@dataclass(frozen=True, slots=True)
class HostStats:
    """Counters of one site, from the DataManager's running totals."""

    host: str
    waiting: int = 0
    running: int = 0
    """Pages being downloaded or parsed."""
    downloaded: int = 0
    """Pages downloaded, waiting for a ParsingThread."""
    parsing: int = 0
    """Of ``running``, the pages being parsed."""
    done: int = 0
    errors: int = 0
    skipped: int = 0
    duplicates: int = 0
    bytes: int = 0
    crawl_delay: float = 0.0
    stop_reason: str = ""
    robots_state: str = ""
    errors_by_kind: tuple[tuple[str, int], ...] = ()
    budget_hit: bool = False
    """Some link was not queued because the site reached max_pages."""
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def active(self) -> int:
        """Pages not finished yet (queued or being worked on)."""
        return self.waiting + self.running + self.downloaded

    @property
    def requests(self) -> int:
        """Requests in flight to the site (never more than its ``max_downloads_at_time``):
        the ``running`` column of the live view and of ``status``."""
        return self.running - self.parsing

    @property
    def to_parse(self) -> int:
        """Pages downloaded and waiting for a parser, or being parsed: the ``parsing``
        column of the live view and of ``status``."""
        return self.downloaded + self.parsing


class DownloadDemand(NamedTuple):
    """What the downloads of one process may be right now: what sizes an automatic pool
    of DownloadingThreads (see :meth:`rccrawler.data.base.DataManager.download_demand`)."""

    in_flight: int
    """Requests of this process under way (pages, robots.txt files)."""
    allowed: int
    """Requests politeness allows this process right now: those in flight, and the free
    slots of every host that is due (up to its ``max_downloads_at_time``)."""


@dataclass(frozen=True, slots=True)
class CrawlStats:
    """A frozen snapshot of the whole crawl, read by the finisher and the status view."""

    hosts: tuple[HostStats, ...] = ()
    pages_done: int = 0
    """Pages finished (nodes and duplicates), all sites: the rate's numerator."""
    bytes: int = 0
    downloading: int = 0
    """Pages leased by DownloadingThreads right now (busy downloaders)."""
    parsing: int = 0
    """Pages leased by ParsingThreads right now (busy parsers)."""
    downloading_threads: int = 0
    """DownloadingThreads running (every worker's, on shared storage); 0 when unknown."""
    taken_at: float = 0.0

    @property
    def active(self) -> int:
        return sum(h.active for h in self.hosts)

    def host(self, host: str) -> HostStats | None:
        for stats in self.hosts:
            if stats.host == host:
                return stats
        return None
