"""ArchivingDownloadingThread: hands every response it fetches to the crawl's WARC archive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rccrawler.context import CrawlContext
from rccrawler.threads.downloading import DownloadingThread

if TYPE_CHECKING:
    from plugins.archive.writer import WarcArchive
    from rccrawler.records import DownloadResult


@dataclass(eq=False, kw_only=True)
class ArchiveContext(CrawlContext):
    """The archive task's crawl context: its threads also reach the open WARC archive."""

    archive: WarcArchive


class ArchivingDownloadingThread(DownloadingThread):
    """A DownloadingThread whose every response (robots.txt, sitemaps, redirects, pages,
    error answers) goes to the archive, in the thread that fetched it."""

    context: ArchiveContext

    def process_response(self, url: str, result: DownloadResult) -> None:
        self.context.archive.write(result)
