"""LinkCheckManager: a web-graph crawl that reports every broken link."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from plugins.linkcheck.external import check_external_enabled
from plugins.linkcheck.threads import EXTERNAL_LINKS, LinkCheckParsingThread
from plugins.linkcheck.unloaders import (
    BrokenLinksUnloader,
    LinkCheckReportUnloader,
    NewlyBrokenUnloader,
)
from plugins.webgraph.manager import WebGraphManager
from rccrawler.unloaders import ReportUnloader

if TYPE_CHECKING:
    from rccrawler.config import Settings
    from rccrawler.data.tables import TaskTable
    from rccrawler.threads.parsing import ParsingThread
    from rccrawler.unloaders import ResultUnloader


class LinkCheckManager(WebGraphManager):
    """Crawls the sites and lists every internal link that answered 4xx or 5xx or failed
    on the network, with every page linking to it (``H.broken.csv``, ``report.json``).

    The crawl itself finds them: every internal link is fetched once anyway, and the
    DataManager keeps each page's final state and every arc to it. With
    ``linkcheck: {check_external: true}`` the links to other hosts are stored with
    each page's parse (task table ``linkcheck_external``) and checked once each when
    the crawl is over.
    """

    settings_sections: ClassVar[tuple[str, ...]] = ("linkcheck",)
    task_tables: ClassVar[tuple[TaskTable, ...]] = (EXTERNAL_LINKS,)
    parsing_thread_cls: type[ParsingThread] = LinkCheckParsingThread
    unloader_classes: tuple[type[ResultUnloader], ...] = (
        *(
            LinkCheckReportUnloader if cls is ReportUnloader else cls
            for cls in WebGraphManager.unloader_classes
        ),
        BrokenLinksUnloader,
        NewlyBrokenUnloader,
    )

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        super().check_settings(settings)
        check_external_enabled(settings)
