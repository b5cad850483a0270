"""The link checker's results: ``H.broken.csv`` and the broken links in ``report.json``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugins.linkcheck.broken import BrokenLink, find_broken
from rccrawler.unloaders import ReportUnloader, ResultUnloader, shared_result

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
        return self.write_site_csvs(
            "broken.csv",
            BROKEN_HEADER,
            lambda host: (
                row for link in site_broken_links(self.manager, host) for row in link.rows()
            ),
        )


class LinkCheckReportUnloader(ReportUnloader):
    """``report.json`` with each site's ``broken_links``: url, status and found_on."""

    def build(self) -> dict[str, Any]:
        report = super().build()
        for host, site in report["sites"].items():
            site["broken_links"] = [
                link.as_dict() for link in site_broken_links(self.manager, host)
            ]
        return report
