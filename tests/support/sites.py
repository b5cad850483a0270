"""Big deterministic sites for the tests and benchmarks, built on lookup.

Written in the demo site's English-looking text (:mod:`rccrawler.demo.site`), so a crawl
of these sites can be asserted page by page and benchmarks compare like with like.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from html import escape

from rccrawler.demo.site import NOUNS, anchor, html_page, paragraph, seeded
from support.loopback import Resource

__all__ = ["GeneratedSite", "SlowSite", "generated_site", "page_level", "page_path"]

# -- generated sites -----------------------------------------------------------------


def page_path(i: int) -> str:
    """Path of page ``i`` of a :func:`generated_site`: ``/`` for 0, else ``/p/<i>.html``."""
    return "/" if i == 0 else f"/p/{i}.html"


def page_level(i: int, fanout: int = 10) -> int:
    """Breadth-first level of page ``i`` (the links from parent to children form a tree)."""
    level = 0
    while i > 0:
        i = (i - 1) // fanout
        level += 1
    return level


def _page_index(path: str) -> int | None:
    if path == "/":
        return 0
    if not (path.startswith("/p/") and path.endswith(".html")):
        return None
    digits = path[3:-5]
    # One spelling per page: no signs, no leading zeros.
    if not digits.isdigit() or not digits.isascii() or digits.startswith("0"):
        return None
    return int(digits)


class GeneratedSite(Mapping[str, Resource]):
    """A site of ``pages`` pages built on lookup, so 100,000 pages take no memory.

    Page ``i`` links to its children ``i*fanout+1 … i*fanout+fanout`` (those that
    exist), to ``/``, to two pseudo-random pages, and to ``extra_unvisited_links``
    paths under ``/x/`` that answer 404. Every page body is distinct.

    Combine it with fixed pages (``/robots.txt``) through ``collections.ChainMap``.

    Args:
        host: the host name the pages are written for (it appears in titles).
        pages: number of pages; page ``i`` lives at :func:`page_path`.
        fanout: children per page; page ``i`` is at level :func:`page_level`.
        seed: changes the text and the pseudo-random links, not the tree.
        extra_unvisited_links: 404 links added to every page, to grow the frontier.
    """

    def __init__(
        self,
        host: str,
        pages: int,
        *,
        fanout: int = 10,
        seed: int = 0,
        extra_unvisited_links: int = 0,
    ) -> None:
        if pages < 1 or fanout < 1 or extra_unvisited_links < 0:
            raise ValueError("need pages >= 1, fanout >= 1 and extra_unvisited_links >= 0")
        self.host = host
        self.pages = pages
        self.fanout = fanout
        self.seed = seed
        self.extra_unvisited_links = extra_unvisited_links

    def __getitem__(self, path: str) -> Resource:
        i = _page_index(path)
        if i is None or i >= self.pages:
            raise KeyError(path)
        return Resource(self.body(i))

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        i = _page_index(path)
        return i is not None and i < self.pages

    def __len__(self) -> int:
        return self.pages

    def __iter__(self) -> Iterator[str]:
        return (page_path(i) for i in range(self.pages))

    def links(self, i: int) -> list[str]:
        """The link targets of page ``i``, in document order."""
        first = i * self.fanout + 1
        children = [page_path(j) for j in range(first, min(first + self.fanout, self.pages))]
        rng = seeded("links", self.seed, i)
        others = [page_path(rng.randrange(self.pages)) for _ in range(2)]
        extra = [f"/x/{i}/{k}.html" for k in range(self.extra_unvisited_links)]
        return [*children, "/", *others, *extra]

    def body(self, i: int) -> bytes:
        rng = seeded("page", self.seed, i)
        words = tuple(rng.sample(NOUNS, 3))
        title = f"Page {i} of {self.host}: {' '.join(words)}"
        links = "".join(f"<li>{anchor(href, href)}</li>\n" for href in self.links(i))
        return html_page(
            title,
            f"<h1>{escape(title)}</h1>\n<p>{paragraph(rng, words, 3)}</p>\n<ul>\n{links}</ul>\n",
            keywords=", ".join(words),
        )


generated_site = GeneratedSite
"""A deterministic site of ``pages`` HTML pages reachable breadth-first from ``/``."""


class SlowSite(Mapping[str, Resource]):
    """A :func:`generated_site` whose every answer takes ``latency`` seconds, like a
    server across the world: the benchmarks' shape of the real web."""

    def __init__(self, host: str, pages: int, latency: float, *, fanout: int = 6) -> None:
        self.site = generated_site(host, pages, fanout=fanout)
        self.latency = latency

    def __getitem__(self, path: str) -> Resource:
        return replace(self.site[path], delay=self.latency)

    def __iter__(self) -> Iterator[str]:
        return iter(self.site)

    def __len__(self) -> int:
        return len(self.site)
