"""The link-checker crawl task: every broken internal link with the pages linking to it."""

from __future__ import annotations

from plugins.linkcheck.broken import BrokenLink, find_broken
from plugins.linkcheck.external import ExternalChecker
from plugins.linkcheck.manager import LinkCheckManager
from plugins.linkcheck.threads import LinkCheckParsingThread
from plugins.linkcheck.unloaders import BrokenLinksUnloader, LinkCheckReportUnloader

__all__ = [
    "BrokenLink",
    "BrokenLinksUnloader",
    "ExternalChecker",
    "LinkCheckManager",
    "LinkCheckParsingThread",
    "LinkCheckReportUnloader",
    "find_broken",
]
