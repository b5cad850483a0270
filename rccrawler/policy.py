"""The crawl rules of SPEC §5 as decisions: pure functions that every storage backend applies.

Storage records what these functions decide and never re-derives it, so a rule
exists once whatever the backend (SPEC §2). Like urllib3's ``Retry``, nothing
here touches a connection: each function takes the facts (the page, the host,
the response, the clock) and returns a frozen outcome.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from rccrawler.records import (
    DownloadResult,
    FoundLink,
    HostData,
    PageChange,
    PageData,
    PageId,
    PageState,
    SkipReason,
)
from rccrawler.web.html import HTML_MEDIA_TYPES

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers worth another attempt: the server is busy or failing for now."""
MAX_BACKOFF_S = 30.0
"""The longest pause a failing host gets between two attempts."""
BLOCKED_BY_ROBOTS = "robots.txt"
"""How the stop reason of a host whose robots.txt forbids everything starts."""
AUTO_THROTTLE_TARGET_CONCURRENCY = 1.0
"""Requests a host should have in flight on average under ``crawl.auto_throttle``."""
AUTO_THROTTLE_MAX_DELAY = 60.0
"""The longest delay auto-throttle sets (a slower robots Crawl-delay still wins)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlLimits:
    """The per-crawl numbers the rules need (from ``crawl:``)."""

    max_pages: int = 0
    """Pages admitted per site; 0 means no limit."""
    max_download_attempts: int = 3
    max_redirects: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class ScopeRules:
    """A site's ``include``/``exclude`` rules (``crawl:`` keys, patterns compiled)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    include_regex: tuple[re.Pattern[str], ...] = ()
    exclude_regex: tuple[re.Pattern[str], ...] = ()


def scope_skip(url: str, rules: ScopeRules) -> SkipReason | None:
    """Why the scope rules keep ``url`` out of the crawl; None when they let it in.

    The one scope decision, for links found on pages, redirect targets and sitemap
    URLs alike. Exclusion wins: a URL containing an ``exclude`` string or matching an
    ``exclude_regex`` is out (``exclude``) whatever else matches. Otherwise, when
    ``include`` is set the URL must contain one of its strings, and when
    ``include_regex`` is set it must match one of its patterns (``include``).
    Patterns are searched anywhere in the URL (``re.search``); anchor them with ``^``.
    """
    if any(token in url for token in rules.exclude) or any(
        pattern.search(url) for pattern in rules.exclude_regex
    ):
        return SkipReason.EXCLUDE
    if rules.include and not any(token in url for token in rules.include):
        return SkipReason.INCLUDE
    if rules.include_regex and not any(pattern.search(url) for pattern in rules.include_regex):
        return SkipReason.INCLUDE
    return None


def media_type(content_type: str) -> str:
    """The media type of a Content-Type value, lowercased, its parameters dropped."""
    return content_type.split(";", 1)[0].strip().lower()


def is_html(content_type: str) -> bool:
    """Whether a Content-Type makes a graph node (SPEC §5.4)."""
    return media_type(content_type) in HTML_MEDIA_TYPES


def backoff_s(attempts: int) -> float:
    """Seconds a host waits after the ``attempts``-th failed attempt at one of its pages:
    0.5, 1, 2, 4 … up to MAX_BACKOFF_S (a failing server usually fails for every page)."""
    return min(MAX_BACKOFF_S, 0.5 * 2.0 ** (attempts - 1))


def throttled_delay(host: HostData, latency: float, *, ok: bool) -> float:
    """The host's next crawl delay under ``crawl.auto_throttle`` (Scrapy's AutoThrottle).

    A server that needs ``latency`` seconds per answer gets one request every
    ``latency / concurrency`` seconds: the delay moves halfway there, or all the way
    up when the server got slower. An error answer never lowers it (error pages are
    small and fast, and say nothing about load). Never below ``min_crawl_delay``.
    """
    target = latency / AUTO_THROTTLE_TARGET_CONCURRENCY
    delay = max(target, (host.crawl_delay + target) / 2)
    ceiling = max(AUTO_THROTTLE_MAX_DELAY, host.min_crawl_delay)
    delay = min(max(host.min_crawl_delay, delay), ceiling)
    if not ok and delay < host.crawl_delay:
        return host.crawl_delay
    return delay


def error_cause(kind: str) -> str:
    """An error kind (``dns``, ``connection_refused``, ``http_503``...) as a failure line
    and a stop reason say it: ``dns``, ``connection refused``, ``HTTP 503``."""
    code = kind.removeprefix("http_")
    if code != kind and code.isdigit():
        return f"HTTP {code}"
    return kind.replace("_", " ")


def robots_stop_reason(status: int | None, error: str = "") -> str:
    """Why a site whose robots.txt forbids everything (5xx or unreachable) is not crawled,
    with the cause: ``robots.txt unavailable (HTTP 503)``, ``robots.txt unreachable
    (dns)``.

    Args:
        status: the answer's status; None when no answer came.
        error: the request's error kind when no answer came (``dns``, ``timeout``...).
    """
    if status is not None:
        return f"{BLOCKED_BY_ROBOTS} unavailable ({error_cause(f'http_{status}')})"
    if error:
        return f"{BLOCKED_BY_ROBOTS} unreachable ({error_cause(error)})"
    return f"{BLOCKED_BY_ROBOTS} unreachable"


# -- downloads ---------------------------------------------------------------
class DownloadVerdict(StrEnum):
    """What a finished request means for its page."""

    RETRY = "retry"
    """Back to the queue for another attempt (the host backs off)."""
    ERROR = "error"
    """Final error: a failed request, 4xx/5xx, or retries used up."""
    NOT_NODE = "not_node"
    """2xx that is not HTML (or not 200): done without being a node (SPEC §5.4)."""
    HTML = "html"
    """200 HTML: a node, unless its body duplicates a known page (SPEC §5.7)."""
    UNCHANGED = "unchanged"
    """A refresh found a page the last run parsed unchanged: ``304 Not Modified`` to its
    conditional request, or 200 HTML with the same body. Not parsed again; its links
    stand (SPEC §10)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DownloadOutcome:
    """The decision about one download, and what it changes in the host's politeness."""

    verdict: DownloadVerdict
    attempts: int
    status: int | None
    error: str = ""
    """The error kind (``timeout``, ``http_404``…) or skip reason (``not_html``)."""
    host: HostData
    """The host as it must be saved (backoff, Retry-After, auto-throttle applied)."""
    host_changed: bool = False
    answered: bool = True
    """The server answered (its status, type and body size are stored); False for a
    failed request or a 5xx/429, whose body says nothing about the page."""


def decide_download(
    page: PageData,
    result: DownloadResult,
    host: HostData,
    now: float,
    limits: CrawlLimits,
    content_hash: str = "",
) -> DownloadOutcome:
    """Decide what a response (or a failed request) means (SPEC §5.4, §5.9, §10).

    Args:
        page: the leased page, with the attempts made before this one.
        result: what the DownloadingThread got.
        host: a copy of the page's host; the returned one carries the changes.
        now: the clock of the storage (the database's, for shared crawls).
        limits: the crawl's numbers.
        content_hash: the body's hash (of a 200), to tell an unchanged page on a refresh.
    """
    host = replace(host)
    changed = False
    attempts = page.download_attempts + 1
    if result.retry_after is not None:
        host.retry_after_until = max(host.retry_after_until, now + result.retry_after)
        changed = True
    if result.throttle and result.status is not None:
        delay = throttled_delay(host, result.elapsed, ok=result.status == 200)
        if delay != host.crawl_delay:
            host.crawl_delay = delay
            changed = True
    status = result.status
    if result.error or (status is not None and (status >= 500 or status == 429)):
        error = result.error or f"http_{status}"
        retry = result.retryable or status in RETRYABLE_STATUSES
        if retry and attempts < limits.max_download_attempts:
            if result.retry_after is None:
                host.next_fetch_at = max(host.next_fetch_at, now + backoff_s(attempts))
                changed = True
            verdict = DownloadVerdict.RETRY
        else:
            verdict = DownloadVerdict.ERROR
        return DownloadOutcome(
            verdict=verdict, attempts=attempts, status=status, error=error, host=host,
            host_changed=changed, answered=False,
        )  # fmt: skip
    code = status or 0
    if is_unchanged(page, result, content_hash):
        return DownloadOutcome(
            verdict=DownloadVerdict.UNCHANGED, attempts=attempts, status=200, host=host,
            host_changed=changed,
        )  # fmt: skip
    if code == 200 and is_html(result.content_type):
        return DownloadOutcome(
            verdict=DownloadVerdict.HTML, attempts=attempts, status=200, host=host,
            host_changed=changed,
        )  # fmt: skip
    if 200 <= code < 300:
        verdict, error = DownloadVerdict.NOT_NODE, SkipReason.NOT_HTML.value
    else:
        verdict, error = DownloadVerdict.ERROR, f"http_{code}"
    return DownloadOutcome(
        verdict=verdict, attempts=attempts, status=code, error=error, host=host,
        host_changed=changed,
    )  # fmt: skip


# -- refresh (SPEC §10) ---------------------------------------------------------
MAX_VALIDATOR_LENGTH = 512
"""An ``ETag`` or ``Last-Modified`` longer than this is not kept (nor sent back): a
validator is a short token or a date, and a hostile server must not grow every row."""


def validator(value: str) -> str:
    """A response's ``ETag`` or ``Last-Modified`` as kept for the next run ('' if unusable)."""
    value = value.strip()
    if len(value) > MAX_VALIDATOR_LENGTH or not value.isprintable():
        return ""
    return value


def last_visit(page: PageData) -> PageData:
    """The page as the last run that reached it left it (its ``prev_`` fields), as a
    PageData: :func:`page_status` and the tasks' own rules read either visit alike."""
    return PageData(
        id=page.id, host=page.host, url=page.prev_url, normalized_url=page.prev_url,
        state=PageState(page.prev_state) if page.prev_state else PageState.UNREACHED,
        http_status=page.prev_http_status, error_code=page.prev_error_code,
        content_hash=page.prev_hash,
    )  # fmt: skip


def is_node(page: PageData) -> bool:
    """A page of the graph (SPEC §5.4): answered 200 with HTML; a duplicate is one too
    (``H.nodes.csv`` lists it with ``duplicate_of``), a redirect alias is not."""
    return (
        page.state is PageState.DONE and page.http_status == 200 and page.error_code != "redirect"
    )


def page_status(page: PageData) -> str:
    """What ``H.changes.csv`` says of a page: ``200`` for a node, the HTTP status or
    error name of an error, ``redirect`` for an alias, the skip reason of a page not
    crawled, '' for one not reached (or not fetched yet)."""
    if page.state is PageState.DONE:
        return "redirect" if page.error_code == "redirect" else str(page.http_status or 200)
    if page.state is PageState.ERROR:
        return str(page.http_status) if page.http_status else page.error_code or "error"
    if page.state is PageState.SKIPPED:
        return page.error_code or "skipped"
    return ""


def revisits(page: PageData) -> bool:
    """Whether a page is revisited on a refresh: the last run parsed it as a node, at
    this same URL. Only such a page may be found unchanged (its links stand); any other
    is fetched and parsed as if new (a duplicate before may be the one page of its
    body now, an alias may answer 200 now, a moved page resolves links anew)."""
    return (
        page.parsed
        and page.prev_state == PageState.DONE
        and page.prev_http_status == 200
        and page.prev_error_code == ""
        and bool(page.prev_hash)
        and page.prev_url == page.normalized_url
    )


def conditional_headers(page: PageData) -> dict[str, str]:
    """``If-None-Match``/``If-Modified-Since`` for a revisited page that had validators
    (RFC 9110 §13.1), so that an unchanged page costs a ``304`` and no body."""
    if not revisits(page):
        return {}
    headers = {}
    if page.etag:
        headers["If-None-Match"] = page.etag
    if page.last_modified:
        headers["If-Modified-Since"] = page.last_modified
    return headers


def is_unchanged(page: PageData, result: DownloadResult, content_hash: str) -> bool:
    """Whether a refresh's answer says the page is as the last run parsed it: ``304 Not
    Modified`` to its conditional request, or 200 HTML with the same body (a server
    without validators, or one that ignores them)."""
    if not revisits(page):
        return False
    if result.status == 304:
        return bool(conditional_headers(page))
    return result.status == 200 and is_html(result.content_type) and content_hash == page.prev_hash


def page_change(page: PageData, *, run_over: bool = True) -> PageChange | None:
    """What became of a page since the last run (SPEC §10); None when it was no node in
    either (an error both times, a link never crawled...).

    Args:
        page: the page with its ``prev_`` fields.
        run_over: whether this run is over: until then a page not reached yet may still
            be reached, and is not called removed.
    """
    was = is_node(last_visit(page))
    now = is_node(page)
    if page.state is PageState.UNREACHED and not run_over:
        return None
    if not was:
        return PageChange.ADDED if now else None
    moved = page.normalized_url != page.prev_url
    if moved or (page.state is PageState.DONE and page.error_code == "redirect"):
        return PageChange.REDIRECTED
    if not now:
        return PageChange.REMOVED
    return PageChange.UNCHANGED if page.content_hash == page.prev_hash else PageChange.CHANGED


# -- redirects ---------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RedirectOutcome:
    """The decision about one redirect: what becomes of the page, and the chain so far."""

    verdict: RedirectVerdict
    chain: str
    """Every URL of the chain so far, one a line (kept as ``redirect_target``)."""
    hops: int
    """Redirects the page has followed after this decision (``crawl.max_redirects``)."""
    reason: str = ""
    """The skip reason (``SKIP``) or error (``LOOP``) stored for the page."""
    alias_of: PageId | None = None
    """For an ``ALIAS``: the page the target URL already is."""


class RedirectVerdict(StrEnum):
    """What a 3xx means for its page (SPEC §5.5)."""

    SKIP = "skip"
    """Not followed (another host, robots, include…): the page ends as skipped."""
    LOOP = "loop"
    """A loop or a chain too long: the page ends in error ``redirect_loop``."""
    ALIAS = "alias"
    """The target is a page already: this URL is an alias of it (done, not a node)."""
    MOVE = "move"
    """The page becomes the target URL and waits to be fetched there."""


def redirect_chain(page: PageData) -> list[str]:
    """The URLs a page went through (its first URL when it never redirected)."""
    return [u for u in page.redirect_target.split("\n") if u] or [page.url]


def redirects_back_to(
    known: PageId | None,
    page_id: PageId,
    replace_of: Callable[[PageId], PageId | None],
    max_hops: int,
) -> bool:
    """Whether a redirect target that is page ``known`` already stands for ``page_id``
    (an alias of it, maybe through other aliases): A → B → A across two pages is a
    loop too, not two aliases of each other.

    Args:
        known: the page the target URL belongs to (None: a new URL).
        page_id: the redirecting page.
        replace_of: reads a page's ``replace_id`` from storage.
        max_hops: how far to follow aliases.
    """
    if known is None or known == page_id:
        return False  # a new URL, or another spelling of this very page
    current: PageId | None = known
    for _ in range(max_hops + 1):
        current = replace_of(current)  # type: ignore[arg-type]
        if current is None:
            return False
        if current == page_id:
            return True
    return False


def decide_redirect(
    page: PageData,
    target_url: str,
    skip: SkipReason | None,
    known: PageId | None,
    loops_back: bool,
    limits: CrawlLimits,
) -> RedirectOutcome:
    """Decide where a redirect leaves its page (SPEC §5.5).

    Args:
        page: the leased page.
        target_url: the absolute target, as it would be requested.
        skip: why the thread would not follow it (scope, robots, include), if so.
        known: the page the target's normalized URL belongs to already, if any.
        loops_back: ``redirects_back_to`` for that page.
        limits: the crawl's numbers.
    """
    chain = redirect_chain(page)
    full = "\n".join([*chain, target_url])
    hops = page.redirect_hops + 1
    if skip is not None:
        return RedirectOutcome(
            verdict=RedirectVerdict.SKIP, chain=full, hops=page.redirect_hops, reason=skip.value
        )
    if target_url in chain or hops > limits.max_redirects or loops_back:
        return RedirectOutcome(
            verdict=RedirectVerdict.LOOP, chain=full, hops=hops,
            reason=SkipReason.REDIRECT_LOOP.value,
        )  # fmt: skip
    if known is not None and known != page.id:
        return RedirectOutcome(
            verdict=RedirectVerdict.ALIAS, chain=full, hops=page.redirect_hops, alias_of=known
        )
    return RedirectOutcome(verdict=RedirectVerdict.MOVE, chain=full, hops=hops)


# -- links -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LinkAdmission:
    """Which links of a parsed page become pages, arcs or skipped entries."""

    new: list[FoundLink] = field(default_factory=list)
    """Links to queue as new pages (level = the page's + 1)."""
    not_queued: list[tuple[str, str]] = field(default_factory=list)
    """(normalized url, reason) of new links that are not queued (depth, budget)."""
    known_targets: list[int] = field(default_factory=list)
    """Ids of pages the links point to that exist already (arcs)."""
    later_arcs: list[str] = field(default_factory=list)
    """Normalized urls of the not-queued links held back by their ``skip_if_new``
    (depth, nofollow) or by the budget: arcs once another path (or a resumed run with a
    larger ``max_depth`` or ``max_pages``) makes them pages, whatever the order."""
    budget_hit: bool = False


def unique_links(links: Sequence[FoundLink]) -> dict[str, FoundLink]:
    """The page's links by normalized URL, first spelling wins (one page per identity)."""
    unique: dict[str, FoundLink] = {}
    for link in links:
        unique.setdefault(link.normalized_url, link)
    return unique


def admit_links(
    unique: Mapping[str, FoundLink], known: Mapping[str, int], admitted: int, limits: CrawlLimits
) -> LinkAdmission:
    """Decide which found links are queued (SPEC §5.1, §5.6, §5.9).

    Args:
        unique: the page's links, from :func:`unique_links`.
        known: normalized URL → page id, for those already known.
        admitted: pages the site has admitted so far (the budget's count).
        limits: the crawl's numbers.
    """
    admission = LinkAdmission()
    budget_hit = False
    for norm, link in unique.items():
        page_id = known.get(norm)
        if page_id is not None:
            admission.known_targets.append(page_id)
        elif link.skip_if_new is not None:
            admission.not_queued.append((norm, link.skip_if_new.value))
            admission.later_arcs.append(norm)
        elif limits.max_pages and admitted + len(admission.new) >= limits.max_pages:
            admission.not_queued.append((norm, SkipReason.BUDGET.value))
            admission.later_arcs.append(norm)
            budget_hit = True
        else:
            admission.new.append(link)
    return replace(admission, budget_hit=True) if budget_hit else admission


def breadth_first_allows(level: int, busy_levels: Sequence[int]) -> bool:
    """The breadth-first barrier: no page two levels below one still in progress, or it
    would be fetched before links its parent's level has not produced yet."""
    return not busy_levels or level <= min(busy_levels) + 1
