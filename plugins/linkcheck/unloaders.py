"""The link checker's results: ``H.broken.csv`` and the broken links in ``report.json``."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, ClassVar

from plugins.linkcheck.broken import BrokenLink, find_broken
from plugins.linkcheck.external import ExternalChecker, check_external_enabled
from plugins.linkcheck.threads import EXTERNAL_LINKS
from rccrawler.unloaders import ReportUnloader, ResultUnloader, is_refresh, shared_result

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
            workers=context.settings.downloading_most,
            on_progress=lambda done, total: context.show_progress(
                "external links checked", done, total
            ),
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


NEWLY_BROKEN_HEADER = ("url", "status", "found_on", "old_status")


class NewlyBrokenUnloader(ResultUnloader):
    """After a refresh (SPEC §10), writes ``H.newly_broken.csv``: the internal links broken
    in this run that were not in the last, apart from those broken before (which
    ``H.broken.csv`` lists with the others), with what the last run found there."""

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.newly_broken.csv",)

    def unload(self) -> list[Path]:
        if not is_refresh(self.context):
            return []
        return self.write_site_csvs(
            "newly_broken.csv",
            NEWLY_BROKEN_HEADER,
            lambda host: (
                (*row, link.old_status)
                for link in site_broken_links(self.context, host)
                if link.newly_broken
                for row in link.rows()
            ),
        )


class LinkCheckReportUnloader(ReportUnloader):
    """``report.json`` with each site's ``broken_links``: url, status and found_on; after a
    refresh, its ``newly_broken_links`` too (each with its ``old_status``)."""

    def build(self) -> dict[str, Any]:
        report = super().build()
        refresh = is_refresh(self.context)
        for host, site in report["sites"].items():
            broken = site_broken_links(self.context, host)
            site["broken_links"] = [link.as_dict() for link in broken]
            if refresh:
                site["newly_broken_links"] = [
                    {**link.as_dict(), "old_status": link.old_status}
                    for link in broken
                    if link.newly_broken
                ]
        return report
