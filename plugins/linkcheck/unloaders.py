"""The link checker's results: ``H.broken.csv`` and the broken links in ``report.json``."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, ClassVar

from plugins.linkcheck.broken import BrokenLink, find_broken
from plugins.linkcheck.external import ExternalChecker, check_external_enabled
from plugins.linkcheck.threads import EXTERNAL_LINKS
from rccrawler.unloaders import ReportUnloader, ResultUnloader, shared_result

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.context import CrawlContext

BROKEN_HEADER = ("url", "status", "found_on")


def site_broken_links(context: CrawlContext, host: str) -> list[BrokenLink]:
    """The broken links of a site, internal and (with check_external) external, by URL;
    found once per crawl (both unloaders need them)."""

    def compute() -> list[BrokenLink]:
        found = find_broken(context.data, host)
        statuses = external_statuses(context)
        if statuses:
            pages: defaultdict[str, list[str]] = defaultdict(list)
            for url, page in context.data.task_rows(
                EXTERNAL_LINKS.name, columns=("url", "found_on"), equals={"host": host}
            ):
                if url in statuses:
                    pages[url].append(page)
            found += [
                BrokenLink(url, statuses[url], tuple(sorted(on))) for url, on in pages.items()
            ]
        return sorted(found, key=lambda link: link.url)

    return shared_result(context, "linkcheck.broken", host, compute)


def external_statuses(context: CrawlContext) -> dict[str, str]:
    """{url: status} of the broken external links of every site, each checked once."""

    def compute() -> dict[str, str]:
        if not check_external_enabled(context.settings):
            return {}
        urls = {url for (url,) in context.data.task_rows(EXTERNAL_LINKS.name, columns=("url",))}
        crawl = context.settings.crawl
        checker = ExternalChecker(
            context.fetcher,
            delay=crawl.crawl_delay_ms / 1000,
            max_redirects=crawl.max_redirects,
            workers=context.settings.downloading_threads,
        )
        return checker.check(urls)

    return shared_result(context, "linkcheck.external", "", compute)


class BrokenLinksUnloader(ResultUnloader):
    """Writes ``H.broken.csv``: one row per broken URL and page linking to it (SPEC §8)."""

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.broken.csv",)

    def unload(self) -> list[Path]:
        return self.write_site_csvs(
            "broken.csv",
            BROKEN_HEADER,
            lambda host: (
                row for link in site_broken_links(self.context, host) for row in link.rows()
            ),
        )


class LinkCheckReportUnloader(ReportUnloader):
    """``report.json`` with each site's ``broken_links``: url, status and found_on."""

    def build(self) -> dict[str, Any]:
        report = super().build()
        for host, site in report["sites"].items():
            site["broken_links"] = [
                link.as_dict() for link in site_broken_links(self.context, host)
            ]
        return report
