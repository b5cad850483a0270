"""The worker threads of a crawl: downloading, parsing and routine work."""

from __future__ import annotations

from rccrawler.threads.base import CrawlerThread
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.parsing import ParsingThread
from rccrawler.threads.routine import RoutineThread

__all__ = ["CrawlerThread", "DownloadingThread", "ParsingThread", "RoutineThread"]
