"""The link checker's results: ``H.broken.csv`` and the broken links in ``report.json``."""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any

from plugins.linkcheck.broken import BrokenLink, find_broken
from rccrawler.unloaders import (
    ReportUnloader,
    ResultUnloader,
    atomic_write,
    host_file_stem,
    shared_result,
)

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.manager import ApplicationManager

BROKEN_HEADER = ("url", "status", "found_on")


def site_broken_links(manager: ApplicationManager, host: str) -> list[BrokenLink]:
    """The broken links of a site, found once per crawl (both unloaders need them)."""
    return shared_result(manager, "linkcheck.broken", host, lambda: find_broken(manager.data, host))


class BrokenLinksUnloader(ResultUnloader):
    """Writes ``H.broken.csv``: one row per broken URL and page linking to it (SPEC §8)."""

    def unload(self) -> list[Path]:
        written = []
        for host in self.data.hosts():
            path = self.output_dir / f"{host_file_stem(host.host)}.broken.csv"
            with atomic_write(path, newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(BROKEN_HEADER)
                for link in site_broken_links(self.manager, host.host):
                    writer.writerows(link.rows())
            written.append(path)
        return written


class LinkCheckReportUnloader(ReportUnloader):
    """``report.json`` with each site's ``broken_links``: url, status and found_on."""

    def build(self) -> dict[str, Any]:
        report = super().build()
        for host, site in report["sites"].items():
            site["broken_links"] = [
                link.as_dict() for link in site_broken_links(self.manager, host)
            ]
        return report
