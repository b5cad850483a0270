"""WebGraphManager: the default crawl task."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, ClassVar

from plugins.webgraph.report import HtmlReportUnloader
from plugins.webgraph.unloaders import (
    ChangesUnloader,
    CsvGraphUnloader,
    GraphMLUnloader,
    SkippedUnloader,
)
from rccrawler.commands import EXIT_OK, EXIT_USAGE
from rccrawler.manager import ApplicationManager, TaskCommand
from rccrawler.unloaders import ReportUnloader, ResultUnloader

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from rccrawler.config import Settings


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")


def serve_command(
    manager_cls: type[ApplicationManager], settings: Settings, args: argparse.Namespace
) -> int:
    """``rccrawler serve``: the task's page (report.html, or the search page) until Ctrl-C."""
    assert issubclass(manager_cls, WebGraphManager)
    try:
        served = manager_cls.serve(settings, args.host, args.port)
    except OSError as exc:
        print(f"rccrawler serve: cannot listen on {args.host}:{args.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    if not served:
        print(f"rccrawler serve: no report.html in {settings.output_dir} yet "
              "(run the crawl first)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    return EXIT_OK


class WebGraphManager(ApplicationManager):
    """Crawls the sites and writes their web graphs (nodes, arcs, GraphML, skipped) and
    the report (report.json, report.html)."""

    unloader_classes: tuple[type[ResultUnloader], ...] = (
        CsvGraphUnloader,
        GraphMLUnloader,
        SkippedUnloader,
        ChangesUnloader,
        ReportUnloader,
        HtmlReportUnloader,
    )

    commands: ClassVar[Mapping[str, TaskCommand]] = {
        "serve": TaskCommand("serve the crawl's report.html", serve_command, serve_arguments),
    }

    @classmethod
    def serve(cls, settings: Settings, host: str, port: int) -> bool:
        """``rccrawler serve``: the crawl's report.html, once the crawl has written it."""
        from plugins.webgraph.report_server import serve_report  # the command's alone

        return serve_report(settings, host, port)
