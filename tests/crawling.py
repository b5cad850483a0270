"""Helpers to run a crawl against the loopback server and read what it wrote.

A crawl runs on either storage backend: ``CrawlRunner(root, storage=PG_URL)`` keeps it in
PostgreSQL, each runner as its own crawl, dropped again by :meth:`CrawlRunner.discard`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from support.processes import child_pids, process_alive

from rccrawler.config import Settings
from rccrawler.data.base import DataManager
from rccrawler.data.storage import discard_storage, is_shared, open_storage
from rccrawler.manager import ApplicationManager, load_settings
from rccrawler.unloaders import host_file_stem


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; whether it held.
    For what gives no event to wait on (another process, the database's lock table)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


RUN_TIMEOUT = 120
"""Only a guard against a hung command; no test asserts how fast anything is."""


def command(*args: str) -> list[str]:
    """``python -m rccrawler ARGS`` as a child process's command line."""
    return [sys.executable, "-m", "rccrawler", *args]


def cli(
    *args: str, cwd: Path, stdin: str | None = None, umask: int | None = None,
    timeout: float = RUN_TIMEOUT, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``rccrawler ARGS`` in ``cwd`` to its end; what it printed, and its code."""
    return subprocess.run(
        command(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
        input=stdin, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )  # fmt: skip


@contextlib.contextmanager
def running(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``rccrawler ARGS`` in the background; killed if the test leaves it running."""
    proc = subprocess.Popen(command(*args), cwd=cwd, text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=RUN_TIMEOUT)


def crawl_command(config: Path) -> tuple[list[str], dict[str, str]]:
    """``rccrawler --config config`` as a child process (no live view, quiet), and the
    environment that lets it import the tests' task modules."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    return [sys.executable, "-m", "rccrawler", "--config", str(config), "--no-tui", "-q"], env


def kill_under_way(command: list[str], env: dict[str, str], server: Any, hits: int) -> set[int]:
    """Start the crawl ``command``, SIGKILL it once ``server`` has answered ``hits``
    requests (a bound, not a measure: the crawl is under way), and wait until the
    processes it had started by then (its workers) are gone too.

    Returns:
        Those processes' ids.
    """
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert server.wait_for_hits(hits, timeout=60, alive=lambda: proc.poll() is None)
        children = child_pids(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert wait_until(lambda: not any(map(process_alive, children)), timeout=30, interval=0.05)
    return children


CLOCK_SLACK = 0.001
"""Seconds a timed wait may end early by (timeouts are rounded), allowed where a test
compares the server's stamps of requests a waiting client made one after the other."""

PG_URL = "postgresql://127.0.0.1:5432/test"
"""The PostgreSQL of the tests (trust auth); CI starts it (.ci/run)."""


@functools.cache
def postgresql_reachable() -> bool:
    """Whether PG_URL answers (asked once per test session)."""
    try:
        import psycopg
    except ImportError:
        return False
    try:
        with psycopg.connect(PG_URL, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def require_postgresql() -> str:
    """PG_URL, or skip the test when it is unreachable.

    CI starts PostgreSQL (.ci/run): with ``CI`` set an unreachable server fails the
    tests, it never skips them.
    """
    if not os.environ.get("CI") and not postgresql_reachable():
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL}")
    return PG_URL


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

    def changes(self, host: str) -> list[dict[str, str]]:
        """The rows of a refresh's ``H.changes.csv``."""
        return read_csv(self.output_dir / f"{host_file_stem(host)}.changes.csv")

    def changes_by_url(self, host: str) -> dict[str, str]:
        """URL → change, from ``H.changes.csv``."""
        return {row["url"]: row["change"] for row in self.changes(host)}

    def arc_changes(self, host: str) -> set[tuple[str, str, str]]:
        """(from URL, to URL, change) of a refresh's ``H.arcs_changes.csv``."""
        rows = read_csv(self.output_dir / f"{host_file_stem(host)}.arcs_changes.csv")
        return {(row["from_url"], row["to_url"], row["change"]) for row in rows}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


class CrawlRunner:
    """Writes a settings.yaml under a folder and runs the crawl in this process.

    Args:
        root: the folder of the settings files, state_dir and output_dir.
        storage: the ``storage:`` setting of every crawl; with a postgresql:// URL the
            runner's crawls are one crawl of their own (a unique ``name:`` once the
            settings take one, a unique state_dir until then), which :meth:`discard`
            drops.
    """

    def __init__(self, root: Path, storage: str = "sqlite") -> None:
        self.root = root
        self.storage = storage
        self.count = 0
        self.name = f"test-{uuid.uuid4().hex[:12]}"
        self.written: list[Path] = []
        root.mkdir(parents=True, exist_ok=True)

    @property
    def on_postgresql(self) -> bool:
        return self.storage != "sqlite"

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
        if self.on_postgresql:
            raw["storage"] = self.storage
            if "name" in {f.name for f in dataclasses.fields(Settings)}:
                raw["name"] = self.name
        raw.update(options)
        path = self.root / f"settings{self.count}.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        self.written.append(path)
        return path

    def discard(self) -> None:
        """Drop what this runner's crawls keep in PostgreSQL (as ``--fresh`` does)."""
        if not self.on_postgresql:
            return
        for path in self.written:
            _manager_cls, settings = load_settings(path)
            if is_shared(settings):
                discard_storage(settings)

    def run(
        self, sites: list[str], resolve: dict[str, str], *, refresh: bool = False, **options: Any
    ) -> CrawlResult:
        """Run (or resume) the crawl; ``refresh`` begins a new run of a finished one."""
        path = self.settings_file(sites, resolve, **options)
        manager_cls, settings = load_settings(path)
        manager = manager_cls(settings)
        finished = manager.run(refresh=refresh)
        report_path = settings.output_dir / "report.json"
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        return CrawlResult(finished, settings.output_dir, report, manager)


@contextlib.contextmanager
def open_state(config: Path) -> Iterator[DataManager]:
    """The saved state of a stopped crawl, on its own backend, through the DataManager."""
    manager_cls, settings = load_settings(config)
    with open_storage(settings, task_tables=manager_cls.task_tables) as data:
        yield data


def page_states(config: Path, host: str = "a.test") -> dict[str, str]:
    """Request path -> state of every page of ``host`` in a stopped crawl's state."""
    with open_state(config) as data:
        return {urlsplit(page.url).path: str(page.state) for page in data.iter_pages(host)}


def state_snapshot(config: Path) -> list[object]:
    """Everything a stopped crawl's state holds, to compare before and after a refused run."""
    with open_state(config) as data:
        rows: list[object] = []
        for host in data.hosts():
            rows += [host, *data.iter_pages(host.host), *data.iter_arcs(host.host),
                     *data.iter_skipped(host.host)]  # fmt: skip
        return rows
