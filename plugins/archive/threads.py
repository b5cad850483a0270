"""ArchivingDownloadingThread: hands every response it fetches to the crawl's WARC archive."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rccrawler.threads.downloading import DownloadingThread

if TYPE_CHECKING:
    from plugins.archive.manager import ArchiveManager
    from rccrawler.records import DownloadResult


class ArchivingDownloadingThread(DownloadingThread):
    """A DownloadingThread whose every response (robots.txt, sitemaps, redirects, pages,
    error answers) goes to the archive, in the thread that fetched it."""

    manager: ArchiveManager

    def process_response(self, url: str, result: DownloadResult) -> None:
        self.manager.archive.write(result)
