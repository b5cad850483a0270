"""WebGraphManager: the default crawl task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.webgraph.report import HtmlReportUnloader, serve_report
from plugins.webgraph.unloaders import CsvGraphUnloader, GraphMLUnloader, SkippedUnloader
from rccrawler.manager import ApplicationManager
from rccrawler.unloaders import ReportUnloader, ResultUnloader

if TYPE_CHECKING:
    from rccrawler.config import Settings


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

    @classmethod
    def serve(cls, settings: Settings, host: str, port: int) -> bool:
        """``rccrawler serve``: the crawl's report.html, once the crawl has written it."""
        return serve_report(settings, host, port)
