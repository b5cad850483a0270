"""Unloaders of the web-graph task: H.nodes.csv, H.arcs.csv, H.graphml, H.skipped.csv."""

from __future__ import annotations

import csv
from collections import Counter
from typing import TYPE_CHECKING, ClassVar

from plugins.webgraph.analysis import site_analysis
from rccrawler.policy import is_node
from rccrawler.unloaders import (
    ARC_CHANGES_HEADER,
    CHANGES_HEADER,
    ResultUnloader,
    atomic_write,
    host_file_stem,
    is_refresh,
    page_skip_reason,
    site_arc_changes,
    site_arcs,
    site_change_rows,
    site_pages,
    site_skipped,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from plugins.webgraph.analysis import LinkAnalysis
    from rccrawler.records import HostData, PageData

NODE_HEADER = (
    "id", "url", "level", "status", "content_type", "content_hash", "duplicate_of", "out_degree",
    "in_degree", "pagerank",
)  # fmt: skip


def graph_nodes(unloader: ResultUnloader, host: str) -> Iterator[PageData]:
    return (page for page in site_pages(unloader.context, host) if is_node(page))


class CsvGraphUnloader(ResultUnloader):
    """Writes ``H.nodes.csv`` and ``H.arcs.csv`` for every site.

    ``out_degree`` is what it says: the node's rows in ``H.arcs.csv`` (links to pages
    that turned out to be errors, non-HTML or off the graph are not arcs, so they do
    not count; nor does a link of a page to itself).
    """

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.nodes.csv", "{stem}.arcs.csv")

    def unload(self) -> list[Path]:
        return self.unload_per_site(self.unload_site)

    def unload_site(self, host: HostData) -> list[Path]:
        stem = host_file_stem(host.host)
        out_degree: Counter[int] = Counter()
        arcs = self.output_dir / f"{stem}.arcs.csv"
        with atomic_write(arcs, newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("from", "to"))
            for source, target in site_arcs(self.context, host.host):
                out_degree[source] += 1
                writer.writerow((source, target))
        nodes = self.output_dir / f"{stem}.nodes.csv"
        analysis = site_analysis(self.context, host.host)
        with atomic_write(nodes, newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(NODE_HEADER)
            for page in graph_nodes(self, host.host):
                writer.writerow(
                    (page.id, page.normalized_url, page.level, page.http_status,
                     page.content_type.split(";")[0].strip(), page.content_hash,
                     page.replace_id or "", out_degree[page.id], *_link_columns(analysis, page))
                )  # fmt: skip
        return [nodes, arcs]


class GraphMLUnloader(ResultUnloader):
    """Writes ``H.graphml``: the same graph as the CSV files (the same nodes, duplicates
    with their ``duplicate_of``, the same arcs), for Gephi, networkx or yEd."""

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.graphml",)

    def unload(self) -> list[Path]:
        return self.unload_per_site(self.unload_site)

    def unload_site(self, host: HostData) -> list[Path]:
        # Here, not with the module: xml.sax.saxutils loads urllib.request, http.client
        # and ssl, which the commands that only read a crawl would load for nothing.
        from xml.sax.saxutils import escape, quoteattr

        path = self.output_dir / f"{host_file_stem(host.host)}.graphml"
        analysis = site_analysis(self.context, host.host)
        with atomic_write(path) as handle:
            handle.write(
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
                '  <key id="url" for="node" attr.name="url" attr.type="string"/>\n'
                '  <key id="level" for="node" attr.name="level" attr.type="int"/>\n'
                '  <key id="status" for="node" attr.name="status" attr.type="int"/>\n'
                '  <key id="in_degree" for="node" attr.name="in_degree" attr.type="int"/>\n'
                '  <key id="pagerank" for="node" attr.name="pagerank" attr.type="double"/>\n'
                '  <key id="duplicate_of" for="node" attr.name="duplicate_of"'
                ' attr.type="string"/>\n'
                f'  <graph id={quoteattr(host.host)} edgedefault="directed">\n'
            )
            for page in graph_nodes(self, host.host):
                duplicate = (
                    f'<data key="duplicate_of">n{page.replace_id}</data>'
                    if page.replace_id is not None
                    else ""
                )
                handle.write(
                    f'    <node id="n{page.id}"><data key="url">'
                    f"{escape(page.normalized_url)}</data>"
                    f'<data key="level">{page.level}</data>'
                    f'<data key="status">{page.http_status}</data>'
                    f"{_link_data(analysis, page)}{duplicate}</node>\n"
                )
            for number, (source, target) in enumerate(site_arcs(self.context, host.host)):
                handle.write(f'    <edge id="e{number}" source="n{source}" target="n{target}"/>\n')
            handle.write("  </graph>\n</graphml>\n")
        return [path]


class SkippedUnloader(ResultUnloader):
    """Writes ``H.skipped.csv``: every URL found and not crawled, once, with why."""

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.skipped.csv",)

    def unload(self) -> list[Path]:
        return self.unload_per_site(self.unload_site)

    def unload_site(self, host: HostData) -> list[Path]:
        path = self.output_dir / f"{host_file_stem(host.host)}.skipped.csv"
        with atomic_write(path, newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("url", "reason", "found_on"))
            # Pages that were queued but ended without being nodes, then links
            # that never became pages; the DataManager keeps both unique.
            for page in site_pages(self.context, host.host):
                reason = page_skip_reason(page)
                if reason:
                    writer.writerow((page.normalized_url, reason, page.referer))
            writer.writerows(site_skipped(self.context, host.host))
        return [path]


class ChangesUnloader(ResultUnloader):
    """Writes, after a refresh (SPEC §10), ``H.changes.csv`` (every page of the last run's
    graph or of this one: added, removed, changed, unchanged or redirected, with its old
    and new status, body hash and run) and ``H.arcs_changes.csv`` (the arcs added and
    removed). A first run writes neither: everything in it is new."""

    output_names: ClassVar[tuple[str, ...]] = ("{stem}.changes.csv", "{stem}.arcs_changes.csv")

    def unload(self) -> list[Path]:
        if not is_refresh(self.context):
            return []
        context = self.context
        return self.write_site_csvs(
            "changes.csv", CHANGES_HEADER, lambda host: site_change_rows(context, host)
        ) + self.write_site_csvs(
            "arcs_changes.csv", ARC_CHANGES_HEADER, lambda host: site_arc_changes(context, host)
        )


def _link_columns(analysis: LinkAnalysis, page: PageData) -> tuple[int | str, str]:
    """in_degree and pagerank of a node; empty for a duplicate (its page has them)."""
    found = analysis.of(page.id)
    return ("", "") if found is None else (found[0], repr(found[1]))


def _link_data(analysis: LinkAnalysis, page: PageData) -> str:
    found = analysis.of(page.id)
    if found is None:
        return ""
    return f'<data key="in_degree">{found[0]}</data><data key="pagerank">{found[1]!r}</data>'
