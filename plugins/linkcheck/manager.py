"""LinkCheckManager: a web-graph crawl that reports every broken internal link."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.linkcheck.unloaders import BrokenLinksUnloader, LinkCheckReportUnloader
from plugins.webgraph.manager import WebGraphManager
from rccrawler.unloaders import ReportUnloader

if TYPE_CHECKING:
    from rccrawler.unloaders import ResultUnloader


class LinkCheckManager(WebGraphManager):
    """Crawls the sites and lists every internal link that answered 4xx or 5xx or failed
    on the network, with every page linking to it (``H.broken.csv``, ``report.json``).

    The crawl itself finds them: every internal link is fetched once anyway, and the
    DataManager keeps each page's final state and every arc to it.
    """

    unloader_classes: tuple[type[ResultUnloader], ...] = (
        *(
            LinkCheckReportUnloader if cls is ReportUnloader else cls
            for cls in WebGraphManager.unloader_classes
        ),
        BrokenLinksUnloader,
    )
