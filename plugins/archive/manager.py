"""ArchiveManager: a web-graph crawl that also writes what it fetched as WARC 1.1 files."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from plugins.archive.settings import archive_settings
from plugins.archive.threads import ArchiveContext, ArchivingDownloadingThread
from plugins.archive.writer import WarcArchive
from plugins.webgraph.manager import WebGraphManager

if TYPE_CHECKING:
    from rccrawler.config import Settings
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.threads.downloading import DownloadingThread
    from rccrawler.web.fetch import Fetcher


class ArchiveManager(WebGraphManager):
    """Crawls the sites, writes their web graphs, and archives every response
    (``*.warc.gz`` in ``output_dir``, rotated at ``archive.max_file_bytes``)."""

    downloading_thread_cls: type[DownloadingThread] = ArchivingDownloadingThread
    settings_sections: ClassVar[tuple[str, ...]] = ("archive",)

    def create_context(self, data: SQLDataManager, fetcher: Fetcher) -> ArchiveContext:
        """The crawl's context with the open archive, where the downloaders write."""
        settings = self.settings
        options = archive_settings(settings)
        info = {
            "software": "rccrawler (warcio)",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
            "isPartOf": settings.crawl_name,
            "http-header-user-agent": settings.crawl.user_agent,
            "http-header-from": settings.crawl.from_,
            "operator": options.operator,
            "robots": "obey" if settings.crawl.obey_robots else "ignore",
        }
        archive = WarcArchive(settings.output_dir, options.prefix, options.max_file_bytes, info)
        context = super().create_context(data, fetcher)
        return ArchiveContext(**vars(context), archive=archive)

    @property
    def archive(self) -> WarcArchive:
        assert isinstance(self.context, ArchiveContext)
        return self.context.archive

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        super().check_settings(settings)
        archive_settings(settings)

    def open(self, *, refresh: bool = False) -> None:
        super().open(refresh=refresh)
        # After the state lock: no other run of this crawl writes these files.
        self.archive.recover()

    def unlock_state(self) -> None:
        # Finish the open file while this run still owns the output.
        self.archive.close()
        super().unlock_state()
