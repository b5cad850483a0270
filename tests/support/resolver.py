"""A name resolver for the tests that logs every lookup and knows no name outside loopback.

The crawler resolves names through ``socket.getaddrinfo`` (urllib3 calls it for every new
connection). :func:`logging_resolver` stands in front of it for the length of a test:
each name asked is logged, a name under ``.invalid`` (RFC 6761: never resolves) fails as
a real resolver fails for an unknown name (``socket.gaierror``, ``EAI_NONAME``) without
asking any DNS server, and every other name goes to the system's resolver as before (the
loopback addresses that ``crawl.resolve`` maps names to). So a test can count how often
the crawler looked a dead name up, with no network.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["ResolverLog", "logging_resolver"]

DEAD_SUFFIX = ".invalid"


class ResolverLog:
    """The names looked up while :func:`logging_resolver` was on, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.names: list[str] = []

    def add(self, name: str) -> None:
        with self._lock:
            self.names.append(name)

    def count(self, name: str) -> int:
        """How often ``name`` was looked up."""
        with self._lock:
            return Counter(self.names)[name]


@contextlib.contextmanager
def logging_resolver() -> Iterator[ResolverLog]:
    """Log every lookup of this process, and fail those of ``*.invalid`` names."""
    log = ResolverLog()
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        log.add(name)
        if name.lower().rstrip(".").endswith(DEAD_SUFFIX):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield log
    finally:
        socket.getaddrinfo = real
