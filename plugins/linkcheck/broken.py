"""Which internal links of a site are broken, and which pages link to them (pure reads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rccrawler.policy import last_visit, page_status
from rccrawler.records import PageData, PageState, SkipReason

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rccrawler.data.base import DataManager

NOT_BROKEN_ERRORS = frozenset({SkipReason.REDIRECT_LOOP.value, "too_many_redirects"})
"""Errors of the crawl's own rules, not of the link: a redirect loop is reported as such."""


@dataclass(frozen=True, slots=True)
class BrokenLink:
    """An internal link that answered 4xx or 5xx or failed on the network."""

    url: str
    """The URL as linked (before any redirect), normalized."""
    status: str
    """The final HTTP status ("404"), or the network error's name ("timeout", "decode")."""
    found_on: tuple[str, ...]
    """The pages linking to it, sorted; empty for a start page nobody links to."""
    old_status: str | None = None
    """After a refresh: what the last run found there when it was not broken then (its
    ``H.changes.csv`` status, '' for a page it did not know); None when it was broken
    then too, or for an external link (the last run's are not kept)."""

    @property
    def newly_broken(self) -> bool:
        """Broken in this run and not in the last (a refresh's news)."""
        return self.old_status is not None

    def rows(self) -> list[tuple[str, str, str]]:
        """Its rows of ``H.broken.csv``: one per referring page."""
        return [(self.url, self.status, page) for page in self.found_on or ("",)]

    def as_dict(self) -> dict[str, object]:
        return {"url": self.url, "status": self.status, "found_on": list(self.found_on)}


def broken_status(page: PageData) -> str | None:
    """The status to report if the page is a broken link, else None."""
    if page.state is not PageState.ERROR or page.error_code in NOT_BROKEN_ERRORS:
        return None
    if page.http_status is not None and page.http_status >= 400:
        return str(page.http_status)
    if page.http_status is None:
        return page.error_code or "error"
    return None


def linked_url(page: PageData) -> str:
    """The URL other pages link to: before the first redirect, if it was redirected."""
    first = page.redirect_target.split("\n", 1)[0]
    return first or page.normalized_url


def find_broken(data: DataManager, host: str) -> list[BrokenLink]:
    """Every broken internal link of a site with every page linking to it, by URL.

    Reads the site's pages twice and its raw arcs once; memory grows with the broken
    links and redirect aliases, not with the site.
    """
    status_of: dict[int, str] = {}
    alias_of: dict[int, int] = {}
    url_of: dict[int, str] = {}
    before: dict[int, str | None] = {}
    """After a refresh: the last run's status of a page not broken then."""
    refreshed = False
    for page in data.iter_pages(host):
        status = broken_status(page)
        refreshed = refreshed or page.prev_run > 0
        last = last_visit(page)
        before[page.id] = None if broken_status(last) is not None else page_status(last)
        if status is not None:
            status_of[page.id] = status
            url_of[page.id] = linked_url(page)
        elif page.replace_id is not None and page.error_code == "redirect":
            alias_of[page.id] = page.replace_id
            url_of[page.id] = linked_url(page)
    # A link to a redirect alias of a broken page is broken too (aliases may chain).
    for alias in list(alias_of):
        target, hops = alias_of[alias], 0
        while target in alias_of and hops < len(alias_of):
            target, hops = alias_of[target], hops + 1
        if target in status_of:
            status_of[alias] = status_of[target]
            before[alias] = before[target]
    referrers: dict[int, set[int]] = {page_id: set() for page_id in status_of}
    for arc in data.iter_raw_arcs(host):
        if arc.to_id in referrers:
            referrers[arc.to_id].add(arc.from_id)
    names = _page_urls(data, host, {s for sources in referrers.values() for s in sources})
    found = [
        BrokenLink(
            url_of[page_id],
            status_of[page_id],
            tuple(sorted(names[s] for s in sources)),
            before[page_id] if refreshed else None,
        )
        for page_id, sources in referrers.items()
    ]
    return sorted(found, key=lambda link: link.url)


def _page_urls(data: DataManager, host: str, ids: Iterable[int]) -> dict[int, str]:
    wanted = set(ids)
    if not wanted:
        return {}
    return {page.id: page.normalized_url for page in data.iter_pages(host) if page.id in wanted}
