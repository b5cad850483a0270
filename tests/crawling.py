"""Helpers to run a crawl against the loopback server and read what it wrote."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rccrawler.manager import ApplicationManager, load_settings
from rccrawler.unloaders import host_file_stem


@dataclass
class SiteGraph:
    """One site's output files, parsed."""

    nodes: list[dict[str, str]]
    arcs: list[tuple[int, int]]
    skipped: list[dict[str, str]]

    @property
    def urls(self) -> set[str]:
        return {n["url"] for n in self.nodes if not n["duplicate_of"]}

    def node(self, url: str) -> dict[str, str]:
        return next(n for n in self.nodes if n["url"] == url)

    def skip_reason(self, url: str) -> str | None:
        return next((s["reason"] for s in self.skipped if s["url"] == url), None)


@dataclass
class CrawlResult:
    finished: bool
    output_dir: Path
    report: dict[str, Any]
    manager: ApplicationManager
    graphs: dict[str, SiteGraph] = field(default_factory=dict)

    def graph(self, host: str) -> SiteGraph:
        if host not in self.graphs:
            stem = self.output_dir / host_file_stem(host)
            with open(f"{stem}.nodes.csv", newline="", encoding="utf-8") as handle:
                nodes = list(csv.DictReader(handle))
            with open(f"{stem}.arcs.csv", newline="", encoding="utf-8") as handle:
                arcs = [(int(r["from"]), int(r["to"])) for r in csv.DictReader(handle)]
            with open(f"{stem}.skipped.csv", newline="", encoding="utf-8") as handle:
                skipped = list(csv.DictReader(handle))
            self.graphs[host] = SiteGraph(nodes, arcs, skipped)
        return self.graphs[host]


class CrawlRunner:
    """Writes a settings.yaml under a folder and runs the crawl in this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        root.mkdir(parents=True, exist_ok=True)

    def settings_file(self, sites: list[str], resolve: dict[str, str], **options: Any) -> Path:
        self.count += 1
        # The fixture sites have no sitemap: tests that count requests would see a
        # /sitemap.xml 404 per site. Sitemap tests turn it back on.
        crawl = {"crawl_delay_ms": 0, "max_downloads_at_time": 4, "timeout_s": 5,
                 "resolve": resolve, "sitemaps": False}  # fmt: skip
        crawl.update(options.pop("crawl", {}))
        raw: dict[str, Any] = {
            "sites": sites,
            "state_dir": str(self.root / "state"),
            "output_dir": str(self.root / "output"),
            "threads": {"downloading": 4, "parsing": 2},
            "crawl": crawl,
        }
        raw.update(options)
        path = self.root / f"settings{self.count}.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return path

    def run(self, sites: list[str], resolve: dict[str, str], **options: Any) -> CrawlResult:
        path = self.settings_file(sites, resolve, **options)
        manager_cls, settings = load_settings(path)
        manager = manager_cls(settings)
        finished = manager.run()
        report_path = settings.output_dir / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        return CrawlResult(finished, settings.output_dir, report, manager)
