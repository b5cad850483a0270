"""rccrawler: a polite, resumable, multithreaded crawler framework (the RCCrawler architecture).

This file pulls together the public API: the classes a crawl task subclasses
and the records that threads exchange through the DataManager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rccrawler.loading import lazy_names

if TYPE_CHECKING:
    from rccrawler.context import CrawlContext
    from rccrawler.data.base import DataManager, TaskRows
    from rccrawler.data.tables import TaskTable
    from rccrawler.exceptions import (
        ConfigError,
        FetchError,
        RCCrawlerError,
        StateError,
    )
    from rccrawler.finisher import ApplicationFinisher
    from rccrawler.manager import ApplicationManager, TaskCommand, load_settings
    from rccrawler.records import (
        CrawlStats,
        HostData,
        HostStats,
        PageArc,
        PageChange,
        PageData,
        PageId,
        PageState,
        SkipReason,
    )
    from rccrawler.threads import CrawlerThread, DownloadingThread, ParsingThread, RoutineThread
    from rccrawler.unloaders import ResultUnloader

_HOMES = {
    "CrawlContext": "rccrawler.context",
    "DataManager": "rccrawler.data.base",
    "TaskRows": "rccrawler.data.base",
    "TaskTable": "rccrawler.data.tables",
    "ConfigError": "rccrawler.exceptions",
    "FetchError": "rccrawler.exceptions",
    "RCCrawlerError": "rccrawler.exceptions",
    "StateError": "rccrawler.exceptions",
    "ApplicationFinisher": "rccrawler.finisher",
    "ApplicationManager": "rccrawler.manager",
    "TaskCommand": "rccrawler.manager",
    "load_settings": "rccrawler.manager",
    "CrawlStats": "rccrawler.records",
    "HostData": "rccrawler.records",
    "HostStats": "rccrawler.records",
    "PageArc": "rccrawler.records",
    "PageChange": "rccrawler.records",
    "PageData": "rccrawler.records",
    "PageId": "rccrawler.records",
    "PageState": "rccrawler.records",
    "SkipReason": "rccrawler.records",
    "CrawlerThread": "rccrawler.threads",
    "DownloadingThread": "rccrawler.threads",
    "ParsingThread": "rccrawler.threads",
    "RoutineThread": "rccrawler.threads",
    "ResultUnloader": "rccrawler.unloaders",
}
"""Where each public name lives: it is imported on first use (``lazy_names``)."""

__version__ = "0.1.0"

__all__ = [
    "ApplicationFinisher",
    "ApplicationManager",
    "ConfigError",
    "CrawlContext",
    "CrawlStats",
    "CrawlerThread",
    "DataManager",
    "DownloadingThread",
    "FetchError",
    "HostData",
    "HostStats",
    "PageArc",
    "PageChange",
    "PageData",
    "PageId",
    "PageState",
    "ParsingThread",
    "RCCrawlerError",
    "ResultUnloader",
    "RoutineThread",
    "SkipReason",
    "StateError",
    "TaskCommand",
    "TaskRows",
    "TaskTable",
    "__version__",
    "load_settings",
]

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
