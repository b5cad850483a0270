"""The web-graph crawl task: each site's pages and links as CSV and GraphML files (SPEC §8)."""

from __future__ import annotations

from plugins.webgraph.manager import WebGraphManager
from plugins.webgraph.report import HtmlReportUnloader
from plugins.webgraph.unloaders import CsvGraphUnloader, GraphMLUnloader, SkippedUnloader

__all__ = [
    "CsvGraphUnloader",
    "GraphMLUnloader",
    "HtmlReportUnloader",
    "SkippedUnloader",
    "WebGraphManager",
]
