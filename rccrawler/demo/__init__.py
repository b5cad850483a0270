"""`rccrawler demo`: serve the bundled sample site on loopback, crawl and index it, print the
report and a sample search; or, with ``--serve``, only serve it, for crawls of one's own."""

from __future__ import annotations

import errno
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from rccrawler.config import settings_from_mapping
from rccrawler.demo.server import DemoServer, serve_demo
from rccrawler.demo.site import DEMO_HOST, demo_facts, demo_sites

logger = logging.getLogger(__name__)

DEMO_MANAGER = "plugins.search.SearchManager"
DEMO_QUERY = "parser OR robots*"
"""The sample search printed after the crawl (the task is named by dotted path, SPEC §2)."""
SAMPLE_SITE_PORT = 8765
"""Where ``rccrawler demo --serve`` listens by default: config/sample.yaml routes the sample
site's host names to 127.0.0.1 on this port."""


def demo_settings(output_dir: Path, resolve: dict[str, str]) -> dict[str, Any]:
    """The settings of the demo crawl: the sample site, polite but quick."""
    return {
        "manager": DEMO_MANAGER,
        "sites": [f"http://{DEMO_HOST}/"],
        "state_dir": str(output_dir / "state"),
        "output_dir": str(output_dir),
        "threads": {"downloading": 4, "parsing": 2},
        "crawl": {
            "crawl_delay_ms": 5,
            "max_downloads_at_time": 4,
            "timeout_s": 10,
            "resolve": resolve,
            "user_agent": "rccrawler/0.1 (+demo)",
            "from": "demo@rccrawler.invalid",
        },
    }


def self_check(site: dict[str, Any]) -> str:
    """The demo checks its own result: the sample site is built with what a correct crawl
    finds in it (a byte-identical group counts once in ``pages_done``)."""
    facts = demo_facts()
    expected = len(facts.nodes) - (len(facts.duplicates) - 1)
    found = site["pages_done"]
    if found == expected and site["duplicates"] == len(facts.duplicates) - 1:
        return f"check: {found} pages, as a correct crawl of the sample site finds"
    return f"check FAILED: {found} pages, {site['duplicates']} duplicates; expected {expected}"


def run_demo(output_dir: Path, *, tui: bool | None = None) -> int:
    """Crawl the sample site from scratch; return the exit code.

    Args:
        output_dir: where the graph files and the state go.
        tui: show the live status view; None means "when stdout is a terminal".
    """
    from rccrawler.commands.fresh import start_fresh
    from rccrawler.commands.runner import print_summary, run_manager
    from rccrawler.loading import load_class
    from rccrawler.manager import ApplicationManager

    with serve_demo(demo_sites()) as server:
        raw = demo_settings(output_dir, server.resolve)
        manager_cls = load_class("manager", raw["manager"], ApplicationManager)
        settings = settings_from_mapping(
            raw, allowed_sections=frozenset(manager_cls.settings_sections)
        )
        manager = manager_cls(settings)
        start_fresh(manager)
        print(f"serving the sample site {DEMO_HOST} on 127.0.0.1:{server.server_port}; crawling it")
        code = run_manager(manager, summary=False, tui=tui)
        requests = server.requests
    if manager.finished:
        print_summary(manager, manager.report, tui=tui)
        site = manager.report["sites"][DEMO_HOST]
        skipped = ", ".join(f"{k} {v}" for k, v in site["skipped_by_reason"].items())
        print(f"the server answered {requests} requests; not crawled: {skipped}")
        print(self_check(site))
        for name in ("nodes.csv", "arcs.csv", "graphml", "skipped.csv"):
            print(f"  {output_dir / f'{DEMO_HOST}.{name}'}")
        print(f"  {output_dir / 'report.json'}")
        print(f"  {output_dir / 'report.html'}")
        # The demo's task is the search task, named by dotted path: rccrawler imports no plugin.
        search = getattr(manager_cls, "search", None)
        if callable(search):
            hits = search(settings, DEMO_QUERY, 3)
            print(f"sample search for {DEMO_QUERY!r}, best {len(hits)}:")
            for rank, hit in enumerate(hits, 1):
                print(f"  {rank}. {hit['title']} ({hit['url']})")
    return code


def serve_sample_site(port: int = SAMPLE_SITE_PORT) -> int:
    """Serve the sample site on 127.0.0.1:``port`` until Ctrl-C or SIGTERM; the exit code.

    The first line printed names the address (the real port when ``port`` is 0), so a
    script can wait for it before it crawls.
    """
    try:
        server = DemoServer(demo_sites(), port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        print(f"rccrawler demo: 127.0.0.1:{port} is in use; give another port with --port",
              file=sys.stderr)  # fmt: skip
        return 2
    hosts = ", ".join(server.sites)
    print(f"serving the sample site on 127.0.0.1:{server.server_port} ({hosts}) until Ctrl-C",
          flush=True)  # fmt: skip
    if server.server_port == SAMPLE_SITE_PORT:
        print("crawl it with: rccrawler --config config/sample.yaml", flush=True)
    else:
        print(f"crawl.resolve routes its names here: {server.resolve}", flush=True)

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
    return 0
