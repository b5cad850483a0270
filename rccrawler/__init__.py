"""rccrawler: a polite, resumable, multithreaded crawler framework (the RCCrawler architecture).

This file pulls together the public API: the classes a crawl task subclasses
and the records that threads exchange through the DataManager.
"""

from __future__ import annotations

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
    PageData,
    PageId,
    PageState,
    SkipReason,
)
from rccrawler.threads import CrawlerThread, DownloadingThread, ParsingThread, RoutineThread
from rccrawler.unloaders import ResultUnloader

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
