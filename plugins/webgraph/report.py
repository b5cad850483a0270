"""HtmlReportUnloader: ``report.html``, the crawl report with a chart per question (SPEC §8).

One self-contained page: the charts are inline SVG drawn from the template's one bar-chart
macro, the style is inline, nothing is fetched to view it. Every text from the crawl
(URLs, content types, stop reasons) goes through Jinja2's autoescape.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from plugins.webgraph.analysis import site_analysis
from rccrawler.policy import media_type
from rccrawler.records import PageData, PageState
from rccrawler.unloaders import (
    REPORT_KEY,
    ResultUnloader,
    atomic_write,
    build_report,
    shared_result,
    site_change_rows,
    site_pages,
)

if TYPE_CHECKING:
    import jinja2

logger = logging.getLogger(__name__)

TOP_PAGES = 20
"""How many of the most linked pages the report lists."""
TOP_SKIP_REASONS = 10
TOP_CHANGED_PAGES = 200
"""How many pages of each change the report lists after a refresh (H.changes.csv has all)."""
LISTED_CHANGES = ("changed", "added", "removed", "redirected")

SIZE_BINS: tuple[tuple[int, str], ...] = (
    (1 << 10, "< 1 KiB"),
    (4 << 10, "1–4 KiB"),
    (16 << 10, "4–16 KiB"),
    (64 << 10, "16–64 KiB"),
    (256 << 10, "64–256 KiB"),
    (1 << 20, "256 KiB–1 MiB"),
    (4 << 20, "1–4 MiB"),
    (sys.maxsize, "≥ 4 MiB"),
)
"""Upper bounds (exclusive) and labels of the page-size histogram."""

Bars = Sequence[tuple[str, float]]
"""A chart's rows: (label, value), drawn in this order."""


@dataclass(slots=True)
class SiteCharts:
    """What report.html shows of one site, gathered in one pass over its pages."""

    host: str
    summary: dict[str, Any]
    levels: Counter[int] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    sizes: Counter[str] = field(default_factory=Counter)
    type_bytes: Counter[str] = field(default_factory=Counter)
    top: list[dict[str, Any]] = field(default_factory=list)
    changed_pages: list[tuple[str, list[str], int]] = field(default_factory=list)
    """After a refresh: (change, the first URLs, how many in all) for each change other
    than unchanged."""

    def add(self, page: PageData) -> None:
        label = status_label(page)
        if label is None:
            return  # never fetched (queued, robots, depth...)
        self.statuses[label] += 1
        if page.state is PageState.DONE and label != "redirect":
            self.levels[page.level] += 1
        if page.downloaded:
            self.sizes[size_label(page.bytes)] += 1
            mime = media_type(page.content_type) or "(none)"
            self.type_bytes[mime] += page.bytes

    def change_charts(self) -> list[dict[str, Any]]:
        """After a refresh: what changed since the last run, and in every refresh so far."""
        changes = self.summary.get("changes")
        if not changes:
            return []
        kinds = ("added", "removed", "changed", "redirected", "unchanged")
        charts = [
            _chart(f"Pages since run {changes['since_run']}", "Each page of the last run's "
                   "graph or of this one, by what became of it (H.changes.csv).",
                   [(kind, changes.get(kind, 0)) for kind in kinds]),
            _chart("Arcs since the last run", "Links between pages of the graph added and "
                   "removed (H.arcs_changes.csv).",
                   [("added", changes.get("arcs_added", 0)),
                    ("removed", changes.get("arcs_removed", 0))]),
        ]  # fmt: skip
        history = self.summary.get("changes_by_run", [])
        if len(history) > 1:
            charts.append(_chart(
                "Pages changed, added or removed, by run", "Every refresh of the crawl so far.",
                [(f"run {h['run']}", h.get("changed", 0) + h.get("added", 0)
                  + h.get("removed", 0) + h.get("redirected", 0)) for h in history],
            ))  # fmt: skip
        return charts

    def charts(self) -> list[dict[str, Any]]:
        """The charts in page order: title, a note, rows and the value format."""
        skipped = Counter(self.summary.get("skipped_by_reason", {}))
        return [
            _chart("Pages per level", "Graph nodes (duplicates included) by distance "
                   "from the start page.",
                   [(f"level {level}", n) for level, n in sorted(self.levels.items())]),
            _chart("Status codes and error kinds", "Final answer of every fetched URL: the "
                   "HTTP status, an error name, or redirect for an alias of a known page.",
                   _by_count(self.statuses)),
            _chart("Page sizes", "Response time is not stored per page, so this is the "
                   "histogram of body sizes (bytes received) instead.",
                   [(label, self.sizes[label]) for _, label in SIZE_BINS
                    if self.sizes[label]]),
            _chart("Bytes per content type", "Body bytes received, by media type.",
                   _by_count(self.type_bytes), unit="bytes"),
            _chart(f"The {TOP_PAGES} pages of highest PageRank", "PageRank (damping 0.85) "
                   "over the site's graph; the table below has their in-degree.",
                   [(row["url"], row["pagerank"]) for row in self.top], unit="rank"),
            _chart("Why URLs were not crawled", f"The {TOP_SKIP_REASONS} most frequent "
                   "reasons in skipped.csv.",
                   skipped.most_common(TOP_SKIP_REASONS)),
        ]  # fmt: skip


def status_label(page: PageData) -> str | None:
    """The status chart's label of a page, None for a page that was never fetched."""
    if page.state is PageState.DONE and page.error_code == "redirect":
        return "redirect"
    if page.http_status is not None:
        return str(page.http_status)
    if page.state is PageState.ERROR:
        return page.error_code or "error"
    return None


def size_label(size: int) -> str:
    return next(label for bound, label in SIZE_BINS if size < bound)


def _by_count(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))


def _chart(title: str, note: str, rows: Bars, unit: str = "") -> dict[str, Any]:
    return {"title": title, "note": note, "rows": rows, "unit": unit}


def format_value(value: float, unit: str = "") -> str:
    """A bar's value as text: bytes in KiB/MiB, ranks with 4 significant digits."""
    if unit == "rank":
        return f"{value:.4g}"
    if unit == "bytes":
        for limit, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value >= limit:
                return f"{value / limit:.1f} {suffix}"
        return f"{int(value)} B"
    return f"{int(value):,}"


def _environment() -> jinja2.Environment:
    """Jinja2 is imported here, when a report is written: the commands that only read a
    crawl (status, search, words) load every task's module, and never render."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("plugins.webgraph", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["value"] = format_value
    return env


class HtmlReportUnloader(ResultUnloader):
    """Writes ``report.html`` beside report.json: per site, its numbers and six charts."""

    output_names: ClassVar[tuple[str, ...]] = ("report.html",)
    template = "report.html"

    def unload(self) -> list[Path]:
        report = shared_result(
            self.context, REPORT_KEY, "", lambda: build_report(self.context, self.finisher)
        )
        sites = [self.site(host, summary) for host, summary in report["sites"].items()]
        page = _environment().get_template(self.template).render(report=report, sites=sites)
        path = self.output_dir / "report.html"
        with atomic_write(path) as handle:
            handle.write(page)
        return [path]

    def site(self, host: str, summary: dict[str, Any]) -> SiteCharts:
        charts = SiteCharts(host, summary)
        analysis = site_analysis(self.context, host)
        top = analysis.top(TOP_PAGES)
        urls: dict[int, str] = {}
        wanted = {page_id for page_id, _, _ in top}
        for page in site_pages(self.context, host):
            charts.add(page)
            if page.id in wanted:
                urls[page.id] = page.normalized_url
        charts.top = [
            {"url": urls.get(page_id, ""), "in_degree": in_degree, "pagerank": rank}
            for page_id, in_degree, rank in top
        ]
        if "changes" in summary:
            listed: dict[str, list[str]] = {kind: [] for kind in LISTED_CHANGES}
            counts: Counter[str] = Counter()
            for row in site_change_rows(self.context, host):
                url, change = str(row[0]), str(row[1])
                if change in listed:
                    counts[change] += 1
                    if len(listed[change]) < TOP_CHANGED_PAGES:
                        listed[change].append(url)
            charts.changed_pages = [
                (kind, listed[kind], counts[kind]) for kind in LISTED_CHANGES if counts[kind]
            ]
        return charts
