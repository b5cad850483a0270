"""WebGraphManager: the default crawl task."""

from __future__ import annotations

from plugins.webgraph.report import HtmlReportUnloader
from plugins.webgraph.unloaders import CsvGraphUnloader, GraphMLUnloader, SkippedUnloader
from rccrawler.manager import ApplicationManager
from rccrawler.unloaders import ReportUnloader, ResultUnloader


class WebGraphManager(ApplicationManager):
    """Crawls the sites and writes their web graphs (nodes, arcs, GraphML, skipped) and
    the report (report.json, report.html)."""

    unloader_classes: tuple[type[ResultUnloader], ...] = (
        CsvGraphUnloader,
        GraphMLUnloader,
        SkippedUnloader,
        ReportUnloader,
        HtmlReportUnloader,
    )
