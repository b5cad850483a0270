"""The exception tree of rccrawler: every error the framework raises on purpose."""

from __future__ import annotations


class RCCrawlerError(Exception):
    """Base exception of rccrawler."""


class ConfigError(RCCrawlerError):
    """A settings key is missing, unknown or has a bad value.

    Args:
        key: the dotted settings key (``crawl.timeout_s``), shown first so the
            user knows exactly which line of settings.yaml to fix.
        problem: what is wrong with it.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class StateError(RCCrawlerError):
    """The saved crawl state cannot be used as it is (another version, another
    manager, locked by another process, unwritable)."""


class FetchError(RCCrawlerError):
    """A download failed for a transport reason (timeout, reset, bad encoding).

    Args:
        kind: a short error name that ends up in reports (``timeout``,
            ``connection``, ``decode``, ``tls``).
        retryable: whether another attempt may succeed.
    """

    def __init__(self, kind: str, message: str, *, retryable: bool) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.retryable = retryable
