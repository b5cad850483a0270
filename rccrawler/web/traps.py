"""Crawl-trap limits that no single page shows: many query strings of one path.

A calendar, a faceted search or a session id in every link makes each page link to
new, unique query strings of the same path: the crawl never ends (and the state grows)
although every page looks fine. The parsing threads share one :class:`QueryVariantLimit`.
"""

from __future__ import annotations

import hashlib
import threading

__all__ = ["QueryVariantLimit"]


class QueryVariantLimit:
    """Admits at most ``limit`` distinct query strings per host and path.

    Thread-safe; memory stays small: a path that reaches its cap keeps no more hashes.
    The counts live for one run of the crawl (a resumed crawl counts afresh).

    Args:
        limit: distinct query strings allowed per host and path (``crawl.max_query_variants``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, str], set[bytes] | None] = {}
        self._lock = threading.Lock()

    def admit(self, host: str, path: str, query: str) -> bool:
        """Whether ``host``/``path?query`` may be crawled: a query seen before always may."""
        if not query:
            return True
        digest = hashlib.blake2b(query.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        with self._lock:
            seen = self._seen.setdefault((host, path), set())
            if seen is None:
                return False  # the cap was reached: the hashes were dropped
            if digest in seen:
                return True
            if len(seen) >= self.limit:
                self._seen[(host, path)] = None
                return False
            seen.add(digest)
            return True
