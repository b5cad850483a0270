"""Shared fixtures: the loopback multi-host server and a crawl runner."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from crawling import CrawlRunner
from webserver import Sites, SiteServer, serve_sites

from rccrawler.threads.base import CrawlerThread


@pytest.fixture
def serve() -> Iterator[Callable[..., SiteServer]]:
    """serve(sites) starts a loopback server for those virtual hosts, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda sites, **kw: stack.enter_context(serve_sites(sites, **kw))


@pytest.fixture
def crawler(tmp_path: Path) -> CrawlRunner:
    """Runs crawls in this process, with settings and output under tmp_path."""
    return CrawlRunner(tmp_path)


@pytest.fixture(autouse=True)
def _short_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle threads poll faster, so small test crawls end quickly."""
    monkeypatch.setattr(CrawlerThread, "idle_wait", 0.005)


__all__ = ["Sites"]
