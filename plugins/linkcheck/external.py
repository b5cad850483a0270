"""Checking external links without crawling them: HEAD (GET when HEAD is refused), once
each, one request at a time per host with the crawl delay between two (``check_external``),
many hosts at once. A host whose name did not resolve or that refused the connection is
tried once: its other links fail at once, with no delay between them (the fetcher
remembers it for the run).

A redirect to another host is followed by the worker of the link's host, so that host
may see one request beside its own worker's. robots.txt of the other hosts is not read:
nothing is crawled there, each link is asked about once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from rccrawler.config import unknown_key
from rccrawler.exceptions import ConfigError, FetchError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from rccrawler.config import Settings
    from rccrawler.web.fetch import Fetcher

logger = logging.getLogger(__name__)

LINKCHECK_KEYS = ("check_external",)
"""Keys of the ``linkcheck:`` settings section."""

HEAD_REFUSED = frozenset({405, 501})
"""Statuses that say "no HEAD here" rather than "no such page": ask again with GET."""


class ExternalChecker:
    """Checks a set of URLs of other hosts and returns the broken ones with their status.

    Args:
        fetcher: the crawl's fetcher (user agent, From, resolve, proxy and TLS apply).
        delay: seconds between two requests to one host (the crawl's ``crawl_delay_ms``).
        max_redirects: hops followed before a link counts as broken (``too_many_redirects``).
        workers: hosts checked at once (one request at a time per host).
        on_progress: called with (URLs checked, URLs in all) as the check goes on, from
            the checking threads (at most every ``progress_every`` URLs, and at the end).
    """

    progress_every = 16
    """URLs checked between two calls of ``on_progress``."""

    def __init__(
        self,
        fetcher: Fetcher,
        *,
        delay: float,
        max_redirects: int,
        workers: int,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.fetcher = fetcher
        self.delay = delay
        self.max_redirects = max_redirects
        self.workers = max(1, workers)
        self.on_progress = on_progress
        self._pause = threading.Event()  # never set: waits are the per-host delay only

    def check(self, urls: Iterable[str]) -> dict[str, str]:
        """{url: status} of the broken URLs: an HTTP status >= 400 or a network error's name."""
        by_host: defaultdict[str, list[str]] = defaultdict(list)
        for url in sorted(set(urls)):
            by_host[_host_key(url)].append(url)
        hosts: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        for host_urls in by_host.values():
            hosts.put(host_urls)
        broken: dict[str, str] = {}
        lock = threading.Lock()
        total = sum(map(len, by_host.values()))
        checked = 0

        def count_one() -> None:
            nonlocal checked
            with lock:
                checked += 1
                done = checked
            if self.on_progress is not None and (done % self.progress_every == 0 or done == total):
                self.on_progress(done, total)

        def work() -> None:
            while True:
                try:
                    host_urls = hosts.get_nowait()
                except queue.Empty:
                    return
                requests = 0

                def pace() -> None:
                    nonlocal requests
                    if requests:
                        self._pause.wait(self.delay)
                    requests += 1

                for url in host_urls:
                    status = self.check_one(url, pace)
                    if status is not None:
                        with lock:
                            broken[url] = status
                    count_one()

        if self.on_progress is not None and total:
            self.on_progress(0, total)
        threads = [
            threading.Thread(target=work, name=f"ExternalChecker-{i}", daemon=True)
            for i in range(min(self.workers, len(by_host)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return broken

    def check_one(self, url: str, pace: Callable[[], None] = lambda: None) -> str | None:
        """The broken status of one URL after its redirects, or None when it answers < 400.

        Args:
            url: the link.
            pace: called before each request (waits out the host's delay).
        """
        for _ in range(self.max_redirects + 1):
            cause = self.fetcher.unreachable_cause(url)
            if cause is not None:
                return cause  # tried once this run already: no request, no delay to wait
            try:
                pace()
                response = self.fetcher.get(url, method="HEAD", max_bytes=0)
                if response.status in HEAD_REFUSED:
                    pace()
                    # One byte is enough to know the status; the rest is not read.
                    response = self.fetcher.get(url, max_bytes=1)
            except FetchError as exc:
                logger.info("external link %s failed: %s", url, exc)
                return exc.kind
            location = response.headers.get("location", "").strip()
            if 300 <= response.status < 400 and location:
                url = urljoin(url, location)
                continue
            return str(response.status) if response.status >= 400 else None
        return "too_many_redirects"


def _host_key(url: str) -> str:
    try:
        parts = urlsplit(url)
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}"
    except ValueError:
        return url


def check_external_enabled(settings: Settings) -> bool:
    """The ``linkcheck.check_external`` setting (default false), validated.

    Raises:
        ConfigError: the section is not a mapping, has an unknown key, or the value
            is not a boolean.
    """
    section = settings.sections.get("linkcheck") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("linkcheck", "must be a mapping")
    for key in section:
        if key not in LINKCHECK_KEYS:
            raise unknown_key(f"linkcheck.{key}", LINKCHECK_KEYS)
    value = section.get("check_external", False)
    if not isinstance(value, bool):
        raise ConfigError("linkcheck.check_external", f"must be true or false, not {value!r}")
    return value
