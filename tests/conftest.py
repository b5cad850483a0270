"""Shared fixtures: the loopback multi-host server, a crawl runner, and the storage backends.

A test whose module (or itself) is marked ``both_backends`` and that uses ``crawler`` (or
``storage``) runs twice, ``[sqlite]`` and ``[postgresql]``; ``xfail_on_postgresql(reason)``
marks only the PostgreSQL run as an expected failure (strict: it errors once it passes;
``strict=False`` for a failure that shows in some runs only).
Every other test crawls on SQLite.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from crawling import CrawlRunner, require_postgresql
from webserver import Sites, SiteServer, serve_sites

from rccrawler.memory import tune_gc, tune_malloc
from rccrawler.threads.base import CrawlerThread

BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_backends: run the test's crawls on SQLite and on PostgreSQL"
    )
    config.addinivalue_line(
        "markers",
        "xfail_on_postgresql(reason, strict=True): the [postgresql] run of a both_backends "
        "test is expected to fail (strict=False: it fails in some runs only)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``storage`` over both backends where ``both_backends`` asks for it."""
    if "storage" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("both_backends") is None:
        return
    postgresql_marks = []
    failing = metafunc.definition.get_closest_marker("xfail_on_postgresql")
    if failing is not None:
        reason = failing.kwargs.get("reason") or failing.args[0]
        strict = failing.kwargs.get("strict", True)
        postgresql_marks.append(pytest.mark.xfail(strict=strict, reason=reason))
    metafunc.parametrize(
        "storage",
        [pytest.param("sqlite", id="sqlite"),
         pytest.param("postgresql", id="postgresql", marks=postgresql_marks)],
        indirect=True,
    )  # fmt: skip


@pytest.fixture
def serve() -> Iterator[Callable[..., SiteServer]]:
    """serve(sites) starts a loopback server for those virtual hosts, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda sites, **kw: stack.enter_context(serve_sites(sites, **kw))


@pytest.fixture
def postgresql() -> str:
    """The tests' PostgreSQL URL; skips when it is unreachable, except in CI (fails there)."""
    return require_postgresql()


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> str:
    """The ``storage:`` setting of the test's crawls: SQLite unless parametrized."""
    backend = getattr(request, "param", "sqlite")
    assert backend in BACKENDS, backend
    return require_postgresql() if backend == "postgresql" else "sqlite"


@pytest.fixture
def crawler(tmp_path: Path, storage: str) -> Iterator[CrawlRunner]:
    """Runs crawls in this process, with settings and output under tmp_path."""
    runner = CrawlRunner(tmp_path, storage=storage)
    yield runner
    runner.discard()


@pytest.fixture(autouse=True, scope="session")
def _tuned_like_the_command_line() -> None:
    """The tests run crawls in this process: opt into the memory tuning the command line
    does (``commands.runner``), once, after collection, so that a crawl here meets the
    collector and allocator it meets in ``rccrawler crawl``."""
    tune_malloc()
    tune_gc()


@pytest.fixture(autouse=True)
def _short_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle threads poll faster, so small test crawls end quickly."""
    monkeypatch.setattr(CrawlerThread, "idle_wait", 0.005)


__all__ = ["Sites"]
