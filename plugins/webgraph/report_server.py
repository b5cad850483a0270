"""``rccrawler serve`` of the web-graph task: its report.html on a small HTTP server.

A module of its own, imported by the command alone: a crawl never loads http.server.
"""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings

logger = logging.getLogger(__name__)


class ReportHTTPServer(ThreadingHTTPServer):
    """Serves one report.html at ``/`` (``rccrawler serve`` for a task without search).

    Args:
        address: (host, port) to listen on; port 0 picks a free one.
        path: the report file, read anew for each request (a later crawl rewrites it).
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], path: Path) -> None:
        super().__init__(address, _ReportHandler)
        self.path = path


class _ReportHandler(BaseHTTPRequestHandler):
    server: ReportHTTPServer

    def do_GET(self) -> None:
        if urlsplit(self.path).path not in ("/", "/report.html"):
            self.send_error(404)
            return
        try:
            body = self.server.path.read_bytes()
        except OSError:
            self.send_error(404, "no report.html: run the crawl first")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.info("%s " + format, self.address_string(), *args)


def serve_report(settings: Settings, host: str, port: int) -> bool:
    """Serve ``output_dir/report.html`` until interrupted; False when there is none yet."""
    path = settings.output_dir / "report.html"
    if not path.is_file():
        return False
    server = ReportHTTPServer((host, port), path)
    print(f"report on http://{host}:{server.server_port}/ (Ctrl-C ends it)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return True
